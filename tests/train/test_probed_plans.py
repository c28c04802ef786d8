"""A network pyd4j.train.fit plans is planned alike by `pyd4j plan` and by the agent route (`pyd4j
tune --plan`): a layer the planner has no shape rule for (a 1-D convolution over an LSTM's
sequences) and every opaque step get DL4J's own shapes and a probe iteration's working memory
(`pyd4j.dl4j.probe`), whichever way the plan is made. Real DL4J: the session JVM, and for the
agent route an unchanged example job in child JVMs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from pyd4j.dl4j.graph import UnsupportedLayer, graph_from_dl4j_json
from pyd4j.sched.graph import LayerType

pytestmark = pytest.mark.jvm

BATCH = 4
FEATURES, STEPS = 6, 20


def conv1d_network(folder: Path) -> Path:
    """LSTM(16) -> Convolution1DLayer(8, kernel 3, Same) -> RnnOutputLayer(4), built by DL4J's own
    builders: its conf.toJson() and the input sidecar, as a user's network."""
    import jpype

    def builder(cls: str):
        return jpype.JClass(f"org.deeplearning4j.nn.conf.layers.{cls}$Builder")()

    Activation = jpype.JClass("org.nd4j.linalg.activations.Activation")  # noqa: N806
    layers = [builder("LSTM").nOut(jpype.JInt(16)).activation(Activation.TANH).build(),
              builder("Convolution1DLayer").kernelSize(jpype.JInt(3)).nOut(jpype.JInt(8))
              .convolutionMode(jpype.JClass("org.deeplearning4j.nn.conf.ConvolutionMode").Same)
              .activation(Activation.RELU).build(),
              builder("RnnOutputLayer").nOut(jpype.JInt(4)).activation(Activation.SOFTMAX)
              .lossFunction(jpype.JClass("org.nd4j.linalg.lossfunctions.LossFunctions$LossFunction").MCXENT).build()]
    conf = (jpype.JClass("org.deeplearning4j.nn.conf.NeuralNetConfiguration$Builder")()
            .seed(jpype.JLong(5)).updater(jpype.JClass("org.nd4j.linalg.learning.config.Adam")(1e-3)).list(*layers)
            .setInputType(jpype.JClass("org.deeplearning4j.nn.conf.inputs.InputType").recurrent(FEATURES, STEPS))
            .build())
    path = folder / "lstm_conv1d.json"
    path.write_text(str(conf.toJson()))
    (folder / "lstm_conv1d.input.json").write_text(json.dumps(
        {"model": "MultiLayerNetwork", "inputs": [{"type": "recurrent", "size": FEATURES, "timeSeriesLength": STEPS}]}))
    return path


def live(path: Path):
    import jpype

    conf = jpype.JClass("org.deeplearning4j.nn.conf.MultiLayerConfiguration").fromJson(path.read_text())
    net = jpype.JClass("org.deeplearning4j.nn.multilayer.MultiLayerNetwork")(conf)
    net.init()
    return net


def test_pyd4j_plan_probes_what_pyd4j_train_fit_probes(jvm, tmp_path: Path) -> None:
    from pyd4j.commands.plan import command
    from pyd4j.dl4j.graph import network_kind
    from pyd4j.sched.choose import choose_plan
    from pyd4j.dl4j.plan_file import plan_document
    from pyd4j.train import planned_graph

    path = conv1d_network(tmp_path)
    doc = json.loads(path.read_text())
    with pytest.raises(UnsupportedLayer, match="Convolution1DLayer of 'layer1' has no shape rule"):
        graph_from_dl4j_json(doc, BATCH, (FEATURES, STEPS))   # the rules alone cannot plan it
    # pyd4j.train.fit's graph: from the live network's probe
    fit_graph = planned_graph(live(path), doc, BATCH, (FEATURES, STEPS))
    conv = fit_graph.layers[2]
    assert conv.type is LayerType.OPAQUE and conv.out_shape == (BATCH, 8, STEPS)   # DL4J's Same convolution
    assert conv.attrs["measured"]["ws_backward"] > 0
    # `pyd4j plan` accepts it, probing a network built from the file: the same graph, the same plan
    plan_file = tmp_path / "plan.json"
    r = CliRunner().invoke(command, ["--model", str(path), "--batch", str(BATCH), "--policy", "liveness",
                                     "--emit-plan", str(plan_file), "--json"])
    assert r.exit_code == 0, r.output[-2000:]
    out = json.loads(r.output[r.output.index("{"):])
    assert out["layers"] == len(fit_graph) == 4
    written = json.loads(plan_file.read_text())
    plan, result = choose_plan(fit_graph, policy="liveness")
    expected = plan_document(plan, result, network_kind(doc))
    assert written["nodes"] == expected["nodes"] and written["records"] == expected["records"]
    assert written["predicted"] == expected["predicted"]
    # the plan `pyd4j plan` wrote trains the network exactly as DL4J does (one iteration, bit for bit)
    import jpype

    from pyd4j.nd import from_numpy

    rng = np.random.default_rng(0)
    x = rng.random((BATCH, FEATURES, STEPS), dtype=np.float32) - 0.5
    y = np.zeros((BATCH, 4, STEPS), dtype=np.float32)
    y[np.arange(BATCH)[:, None], rng.integers(0, 4, (BATCH, STEPS)), np.arange(STEPS)[None, :]] = 1.0
    ref, net = live(path), live(path)
    net.setParams(ref.params().dup())
    for n in (ref, net):
        n.setInput(from_numpy(x, copy=True))
        n.setLabels(from_numpy(y, copy=True))
    ref.computeGradientAndScore()
    trainer = jpype.JClass("org.pyd4j.train.PlannedTrainer")
    with trainer.attach(net, jpype.JClass("org.pyd4j.train.PlanFile").read(str(plan_file)), None) as t:
        t.computeGradientAndScore()
    a = np.asarray(ref.gradient().gradient().dup().data().asDouble())
    b = np.asarray(net.gradient().gradient().dup().data().asDouble())
    assert a.size == b.size > 0 and np.array_equal(a, b) and net.score() == ref.score()


def test_a_search_over_batches_probes_at_two_batches_and_extrapolates(jvm, tmp_path: Path) -> None:
    """`pyd4j plan --max-batch` plans many batch sizes: --batch is probed itself, the others come from the
    line through probes at two small batches, within 5% of probing them directly."""
    from pyd4j.commands.plan import _probe, _read_network
    from pyd4j.dl4j.probe import FIT_BATCHES, of_configuration

    path = conv1d_network(tmp_path)
    doc = _read_network(str(path))
    probe = _probe(str(path), doc, BATCH)
    direct = of_configuration(doc)
    for batch in (BATCH, 4 * FIT_BATCHES[1]):
        planned = probe([(batch, FEATURES, STEPS)])["layer1"]
        measured = direct([(batch, FEATURES, STEPS)])["layer1"]
        assert planned["shape"] == measured["shape"] == [8, STEPS]
        for k, v in measured["measured"].items():
            assert planned["measured"][k] == (v if batch == BATCH else pytest.approx(v, rel=0.05)), (batch, k)


@pytest.mark.slow
def test_the_agent_route_plans_a_network_that_needs_the_probe(jvm, tmp_path: Path) -> None:
    """`pyd4j tune --plan` on an unchanged job whose network has a layer without a shape rule: the
    job's network (described by the agent) is probed in this process, planned, and trained under the
    plan by the agent (previously refused, pointing to pyd4j.train.fit)."""
    import os

    from pyd4j.jvm import classpath, examples_jar
    from pyd4j.profile.tune import tune_job

    path = conv1d_network(tmp_path)
    cp = os.pathsep.join([examples_jar(), *classpath()[1:]])   # the job's own class path: no pyd4j jar
    argv = ["java", "-Xmx1g", "-cp", cp, "org.pyd4j.examples.TrainSynthetic", str(path), str(BATCH), "3"]
    doc = tune_job(argv, tmp_path / "tune", plan_policy="liveness", timeout_s=600)
    assert doc["plan"]["applied"] is True and doc["plan"]["policy"] == "liveness" and doc["plan"]["nodes"] == 4
    said = [e["result"] for e in doc["plan"]["agent"] if e["type"] == "plan"]
    assert said and all(s["status"] == "attached" for s in said)
    stats = [e["stats"] for e in doc["plan"]["agent"] if e["type"] == "plan_stats" and e.get("stats")]
    assert stats and stats[-1]["iterations"] == 3 and stats[-1]["forwards"] == 3 * 3   # every layer, planned
    written = json.loads(Path(doc["plan"]["path"]).read_text())
    conv = next(n for n in written["nodes"] if n["name"] == "layer1")
    assert conv["shape"] == [BATCH, 8, STEPS]
