"""estimate() on the example networks against hand-computed parameter and activation counts (real DL4J)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pyd4j.dl4j.config import ConfigurationError
from pyd4j.dl4j.input_types import parse_input_spec
from pyd4j.memory.estimate import Estimate, EstimateError, estimate
from pyd4j.memory.jvm_overhead import jvm_native_bytes

NETWORKS = Path(__file__).resolve().parents[2] / "examples" / "networks"
MLP_PARAMS = 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10  # 535818


@pytest.mark.jvm
def test_mlp_terms_against_hand_counts(jvm):
    """784-512-256-10, Adam, batch 32: every fit() term counted by hand (pyd4j.dl4j.fitmem's model)."""
    b = 32
    e = estimate(NETWORKS / "mlp.json", b)
    t = e.breakdown()
    assert e.parameter_count == MLP_PARAMS
    assert t["parameters"] == MLP_PARAMS * 4
    assert t["gradients"] == MLP_PARAMS * 4
    assert t["updater_state"] == 2 * MLP_PARAMS * 4  # Adam: m and v
    # WS_ALL_LAYERS_ACT: the three layers' outputs, +5% (DL4J's overallocationLimit)
    assert t["activations"] == round((512 + 256 + 10) * 4 * 1.05) * b
    # WS_LAYER_WORKING_MEM: the largest step, the first dense layer's backward (4 pre-activation-sized buffers), +2%
    assert t["working_memory"] == round(4 * 512 * 4 * 1.02) * b
    # epsilon workspaces: even layers' largest (layer 0's: the input's 784) + odd layers' (layer 1's: 512), +2%
    assert t["epsilons"] == round((784 + 512) * 4 * 1.02) * b
    # no batch normalization: no backlog of its arrays for the collector
    assert t["batchnorm_backlog"] == 0
    # the terms assume glibc's mmap threshold fixed (the flags set it); without it glibc may keep what the
    # workspaces' learning frees: the working memory, the epsilons and the first iteration's activations
    assert e.environment == {"MALLOC_MMAP_THRESHOLD_": "131072"}
    assert e.without_environment.bytes_at(b) == (4 * 512 + 784 + 512 + 512 + 256 + 10) * 4 * b
    # (queue 2 + 2) x (features + labels), in the prefetch thread's workspace of at least 10 MiB
    assert t["prefetch_buffers"] == 10 * 1024**2 + (784 + 10) * 4 * 4 * b
    assert "backend_overhead" not in t and "preprocessors" not in t
    assert e.offheap_bytes == sum(v for k, v in t.items() if k not in ("java_heap", "jvm_native", "long_run_native", "g1_tables"))
    # DL4J's own report: a cross-check beside the model, not summed; it agrees on parameters and updater state
    report = {r.name: r.bytes_at(b) for r in e.report_terms}
    assert report["parameters"] == t["parameters"] and report["updater_state"] == t["updater_state"]
    assert {r.source for r in e.report_terms} == {"dl4j-report"}
    sources = {x.name: x.source for x in e.terms}
    assert sources["parameters"] == "estimate" and sources["java_heap"] == "estimate"
    # heap: (32 MiB base + 1 MiB x 3 layers) x 2 for the collector = 70 MiB, above the 64 MiB floor
    assert t["java_heap"] == 70 * 1024**2
    # the JVM's own: 100 MiB + 160 KiB x 3 layers + 4 MiB per CPU; G1's tables 5% of the heap (flags pin Serial
    # where the JVM would pick it, and drop them)
    assert t["jvm_native"] == jvm_native_bytes(e.cpu_count, 3) == 100 * 1024**2 + 3 * 160 * 1024 + e.cpu_count * 4 * 1024**2
    assert t["g1_tables"] == int(70 * 1024**2 * 0.05) and t["long_run_native"] == 48 * 1024**2
    assert e.total_bytes == e.offheap_bytes + e.heap_bytes + e.native_bytes
    back = Estimate.from_dict(e.to_dict())
    assert back == e


@pytest.mark.jvm
def test_linear_in_batch_and_dtype(jvm):
    e32 = estimate(NETWORKS / "lenet.json", 32)
    e64 = estimate(NETWORKS / "lenet.json", 64)
    assert e32.at_batch(64).breakdown() == e64.breakdown()
    half = estimate(NETWORKS / "lenet.json", 32, dtype="bf16")
    assert half.term_bytes("parameters") * 2 == e32.term_bytes("parameters")
    assert half.term_bytes("activations") * 2 == e32.term_bytes("activations")
    infer = estimate(NETWORKS / "lenet.json", 32, mode="infer")
    lstm = estimate(NETWORKS / "lstm.json", 32)  # 3 layers, 50 steps: 32 + 3 + 64 KiB x 50 x 3 = 44.375 MiB, x 2
    assert lstm.term_bytes("java_heap") == int(44.375 * 2 * 1024**2)
    assert "gradients" not in infer.breakdown() and infer.offheap_bytes < e32.offheap_bytes


@pytest.mark.jvm
def test_lenet_preprocessors_are_views(jvm):
    # FeedForwardToCnn before layer 0 and CnnToFeedForward before the dense layer reshape without copying
    # (tests/train/test_layer_facts.py): training holds only the layers' own outputs; inference holds what
    # output() settles its workspaces at (measured, tests/dl4j/test_inference.py), no preprocessor term
    e = estimate(NETWORKS / "lenet.json", 10)
    outputs = 20 * 24 * 24 + 20 * 12 * 12 + 50 * 8 * 8 + 50 * 4 * 4 + 500 + 10
    assert e.term_bytes("activations") == round(outputs * 4 * 1.05) * 10
    assert "preprocessors" not in e.breakdown()
    infer = estimate(NETWORKS / "lenet.json", 10, mode="infer")
    assert "preprocessors" not in infer.breakdown() and infer.term_bytes("inference_workspaces") > 0


@pytest.mark.jvm
def test_graph_and_live_object(jvm):
    from org.deeplearning4j.nn.conf import MultiLayerConfiguration

    g = estimate(NETWORKS / "resnet_graph.json", 16)
    assert g.model_kind == "ComputationGraph" and g.layer_count >= 14
    live = MultiLayerConfiguration.fromJson((NETWORKS / "lstm.json").read_text())
    from_file = estimate(NETWORKS / "lstm.json", 8)
    from_object = estimate(live, 8, input="rnn:32x50")
    assert from_object.breakdown() == from_file.breakdown()


@pytest.mark.jvm
def test_unknown_layer_type_is_named(jvm, tmp_path):
    doc = json.loads((NETWORKS / "mlp.json").read_text())
    doc["confs"][1]["layer"]["@class"] = "org.example.NoSuchLayer"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    (tmp_path / "bad.input.json").write_text('{"inputs": [{"type": "feedForward", "size": 784}]}')
    with pytest.raises(ConfigurationError, match="org.example.NoSuchLayer"):
        estimate(bad, 8)


def test_bad_json_names_file_and_position(tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text('{\n  "confs": [ {\n    "layer": ,\n')
    with pytest.raises(ConfigurationError, match=r"broken\.json' is not valid JSON.*line 3, column 14"):
        estimate(bad, 8)


def test_not_a_network(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"hello": 1}')
    with pytest.raises(ConfigurationError, match="not a DL4J network configuration"):
        estimate(bad, 8)


@pytest.mark.parametrize("batch", [0, -1])
def test_bad_batch(batch):
    with pytest.raises(EstimateError, match="minibatch size"):
        estimate(NETWORKS / "mlp.json", batch)


def test_bad_dtype():
    with pytest.raises(EstimateError, match="unknown dtype 'float8'"):
        estimate(NETWORKS / "mlp.json", 8, dtype="float8")


def test_input_spec():
    assert parse_input_spec("cnn:32x32x3") == {"type": "convolutional", "height": 32, "width": 32, "channels": 3}
    with pytest.raises(ConfigurationError, match="cannot read input type"):
        parse_input_spec("image:32")


@pytest.mark.jvm
def test_cli_json_is_one_document_and_refusal_exits_nonzero(jvm):
    run = lambda *a: subprocess.run([sys.executable, "-m", "pyd4j.cli", *a], capture_output=True, text=True, timeout=300)  # noqa: E731
    ok = run("flags", "--model", str(NETWORKS / "mlp.json"), "--batch", "32", "--total", "8g", "--json")
    assert ok.returncode == 0, ok.stderr
    doc = json.loads(ok.stdout)
    assert doc["flags"][1].startswith("-Xmx") and doc["total_bytes"] > 0 and "parameters" in doc["breakdown"]
    # the table shows the terms the flags were sized from: the long-run term under the pinned node limit, and
    # no G1 tables beside a pinned Serial collector
    assert doc["collector"] == "Serial" and doc["breakdown"]["long_run_native"] == 40 * 1024**2
    table = run("flags", "--model", str(NETWORKS / "mlp.json"), "--batch", "32", "--total", "8g")
    assert table.returncode == 0, table.stderr
    row = next(line for line in table.stdout.splitlines() if "long_run_native" in line)
    assert "40 MiB" in row and "g1_tables" not in table.stdout
    # --no-pin (a JVM that refuses HotSpot's options): none of them, and the larger unpinned sizes
    free = run("batch", "--model", str(NETWORKS / "lenet.json"), "--total", "2g", "--no-pin", "--json")
    pinned = run("batch", "--model", str(NETWORKS / "lenet.json"), "--total", "2g", "--json")
    free, pinned = json.loads(free.stdout), json.loads(pinned.stdout)
    assert "-XX:MaxNodeLimit=20000" in pinned["flags"] and not any(f.startswith("-XX:MaxNodeLimit") for f in free["flags"])
    assert 0 < free["largest_batch"] < pinned["largest_batch"] and free["breakdown"]["long_run_native"] == 48 * 1024**2
    refused = run("flags", "--model", str(NETWORKS / "deep_cnn_bn.json"), "--batch", "4096", "--total", "2g", "--json")
    assert refused.returncode == 3
    doc = json.loads(refused.stdout)
    assert doc["ok"] is False and 0 < doc["largest_batch"] < 4096 and doc["biggest_term"]
    parsecs = run("flags", "--model", str(NETWORKS / "mlp.json"), "--batch", "8", "--total", "12 parsecs")
    assert parsecs.returncode == 2 and "12 parsecs" in parsecs.stderr


@pytest.mark.jvm
def test_a_series_duplicated_to_another_inputs_length_keeps_that_length(jvm):
    """deeplearning4j-examples' seq2seq adder (AdditionModelWithSeq2Seq): the encoder's last step is duplicated to
    the length of the second input ("sumOut") and merged with it. DL4J's input types say that length is 1; the
    planner takes it from the input, so each step added to "sumOut" adds, per sample, the duplicated step (128),
    the merge (14 + 128), the decoder's output (128) and the output layer's (14): 412 floats, +5% over-allocation."""
    import jpype

    NNC = jpype.JClass("org.deeplearning4j.nn.conf.NeuralNetConfiguration")
    L = jpype.JPackage("org").deeplearning4j.nn.conf.layers
    V = jpype.JPackage("org").deeplearning4j.nn.conf.graph.rnn
    Act = jpype.JClass("org.nd4j.linalg.activations.Activation")
    LF = jpype.JClass("org.nd4j.linalg.lossfunctions.LossFunctions$LossFunction")
    Adam = jpype.JClass("org.nd4j.linalg.learning.config.Adam")
    S = jpype.JArray(jpype.JString)
    conf = (NNC.Builder().updater(Adam(1e-3)).graphBuilder().addInputs(S(["additionIn", "sumOut"]))
            .addLayer("encoder", L.LSTM.Builder().nIn(14).nOut(128).activation(Act.TANH).build(), S(["additionIn"]))
            .addVertex("lastTimeStep", V.LastTimeStepVertex("additionIn"), S(["encoder"]))
            .addVertex("duplicateTimeStep", V.DuplicateToTimeSeriesVertex("sumOut"), S(["lastTimeStep"]))
            .addLayer("decoder", L.LSTM.Builder().nIn(142).nOut(128).activation(Act.SOFTSIGN).build(),
                      S(["sumOut", "duplicateTimeStep"]))
            .addLayer("output", L.RnnOutputLayer.Builder().nIn(128).nOut(14).activation(Act.SOFTMAX)
                      .lossFunction(LF.MCXENT).build(), S(["decoder"]))
            .setOutputs(S(["output"])).build())
    text = str(conf.toJson())
    four = estimate(text, 10, input=["rnn:14x5", "rnn:14x4"]).breakdown()["activations"]
    eight = estimate(text, 10, input=["rnn:14x5", "rnn:14x8"]).breakdown()["activations"]
    assert eight - four == pytest.approx(10 * 4 * 412 * 4 * 1.05, abs=8)
