"""Planned training on DL4J's own zoo (deeplearning4j-zoo 1.0.0-M2.1): networks no one in this
project wrote, built by DL4J's code at small inputs (`org.pyd4j.fixtures.ZooNets`), planned from
their `conf.toJson()` with what DL4J itself says of their layers (`org.pyd4j.train.LayerProbe`),
and checked by `org.pyd4j.fixtures.PlannedCheck` in a child JVM: one planned iteration against
DL4J's own `computeGradientAndScore()` on the same batch and random state. A representative
subset (recurrent networks are covered in test_opaque_layers; every zoo model is in
benchmarks/zoo_coverage.py)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from pyd4j.jvm.classpath import classpath
from pyd4j.dl4j.graph import dl4j_topological_order, graph_from_dl4j_json, network_kind
from pyd4j.sched.graph import LayerType
from pyd4j.sched.convws import assign_workspaces
from pyd4j.sched.simulator import simulate
from pyd4j.sched.choose import IN_MEMORY, choose_plan, default_cost, smallest_plan
from pyd4j.dl4j.plan_file import write_plan
from tests.train.conftest import FIXTURES_JAR

pytestmark = [pytest.mark.jvm, pytest.mark.slow]

BATCH = 2
# layers each one brings that the planner once refused: ActivationLayer softmax and global average
# pooling (SqueezeNet), Upsampling2D (UNet), SeparableConvolution2D (Xception), LRN with its n written
# as 5.0 (AlexNet). Darknet19, ResNet50 (ZeroPaddingLayer, AVG SubsamplingLayer) and the rest of the
# zoo are in benchmarks/zoo_coverage.py (minutes each on a small machine), average pooling in
# test_planned_gradients (resnet_graph). LeNet: its first convolution takes the flat input through
# DL4J's FeedForwardToCnnPreProcessor, and the smallest plan runs it in batch slices (the reshape on
# the whole batch first). AlexNet: its LRNs (and convolutions) in batch slices, as the smallest plan
# runs them at large batches, where the first LRN's backward step decides the peak
MODELS = ("SqueezeNet", "UNet", "Xception", "LeNet", "AlexNet")
CHUNK_TOLERANCE = 4.0   # a chunked plan's error against float64 may be this many times DL4J's own
ZOO_LIB = FIXTURES_JAR.parent / "zoo-lib"


def java_classpath() -> str:
    return ":".join([str(FIXTURES_JAR), str(ZOO_LIB / "*")] + classpath())


@pytest.fixture(scope="module")
def zoo(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("zoo")
    run = subprocess.run(["java", "-Xmx3g", f"-Dpyd4j.probe.batch={BATCH}", "-cp", java_classpath(),
                          "org.pyd4j.fixtures.ZooNets", str(out), *MODELS],
                         capture_output=True, text=True, timeout=1200, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    built = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert [b["model"] for b in built if b["size"]] == list(MODELS), built
    return out


def load(zoo: Path, model: str):
    doc = json.loads((zoo / f"{model}.json").read_text())
    inp = json.loads((zoo / f"{model}.input.json").read_text())["inputs"][0]
    info = json.loads((zoo / f"{model}.info.json").read_text())
    shape = (inp["channels"], inp["height"], inp["width"])
    return doc, shape, info


@pytest.mark.parametrize("model", MODELS)
def test_zoo_network_trains_planned_exactly(zoo: Path, model: str, tmp_path: Path) -> None:
    doc, shape, info = load(zoo, model)
    g = graph_from_dl4j_json(doc, BATCH, shape, info=info)
    # DL4J's shapes (a forward pass) are the planner's, node by node; DL4J's order is the plan's
    assert {l.name: list(l.out_shape[1:]) for l in g.layers if l.type is not LayerType.DATA} == \
        {k: v["shape"] for k, v in info.items() if v["shape"] is not None}
    if "vertices" in doc:
        recorded = doc.pop("topologicalOrderStr")
        assert dl4j_topological_order(doc) == recorded == [l.name for l in g.layers]
    opaque = [l for l in g.layers if l.type is LayerType.OPAQUE]
    assert all("measured" in l.attrs for l in opaque), [l.name for l in opaque if "measured" not in l.attrs]
    files = {}
    for policy in ("liveness", IN_MEMORY, "smallest"):
        plan, result = smallest_plan(g, offload=False) if policy == "smallest" else choose_plan(g, policy=policy)
        if model == "LeNet" and policy == "smallest":
            counts = g.framework.chunk_counts
            sliced = {g.layers[s.arg].name for s in plan.steps if counts[s.algo] > 1}
            assert "cnn1" in sliced and g.layers[1].attrs.get("preprocessor") == "FeedForwardToCnnPreProcessor", sliced
        if model == "AlexNet" and policy == "smallest":
            # at batch 2 the parameters decide the peak and nothing is sliced; slice every step that may be
            # (its LRNs too) as the smallest plan does at large batches (benchmarks/planned_training.py)
            plan = assign_workspaces(plan, default_cost(), 0)
            result = simulate(plan, default_cost())
            counts = g.framework.chunk_counts
            sliced = {g.layers[s.arg].type for s in plan.steps if counts[s.algo] > 1}
            assert LayerType.LRN in sliced and LayerType.CONV in sliced, sliced
        path = tmp_path / f"{model}.{policy}.json"
        files[str(write_plan(path, plan, result, network_kind(doc), model))] = policy
    run = subprocess.run(["java", "-Xmx3g", "-Dpyd4j.check.f64=true", "-cp", java_classpath(), "org.pyd4j.fixtures.PlannedCheck",
                          str(zoo / f"{model}.json"), str(zoo / f"{model}.input.json"), str(BATCH), "0", *files],
                         capture_output=True, text=True, timeout=1200, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    rows = {files[r["plan"]]: r for r in (json.loads(x) for x in run.stdout.splitlines() if x.startswith("{"))}
    assert set(rows) == {"liveness", IN_MEMORY, "smallest"}
    for policy, r in rows.items():
        assert r["variables"] == r["planned_variables"] > 0, policy
        assert r["stats"]["left_to_gc"] >= 0 and r["stats"]["rebuilds"] == 0, policy
        if policy == "smallest" and r["stats"]["chunked_steps"]:
            # convolutions in batch slices: the same sums in another order. Against the same iteration
            # in float64, each variable's error is of the size of DL4J's own float32 error (a relative
            # difference to DL4J's result means nothing where a gradient is ~0, e.g. a bias before BN).
            # A gradient that is exactly 0 in float64 (the beta of a batch normalization whose output
            # only reaches another one's batch statistics) is a residue of cancelling sums: its error is
            # measured against DL4J's own error on the sums of the same layer (its gamma: the same terms)
            by_layer: dict[str, float] = {}
            for name, (_, _, err_dl4j, _, _) in r["gradient_by_variable"].items():
                layer = name.rsplit("_", 1)[0]
                by_layer[layer] = max(by_layer.get(layer, 0.0), err_dl4j)
            for name, (_, _, err_dl4j, err_planned, scale) in r["gradient_by_variable"].items():
                floor = by_layer[name.rsplit("_", 1)[0]] if scale < 1e-12 else err_dl4j
                assert err_planned <= CHUNK_TOLERANCE * max(floor, 1e-6 * scale), (name, err_planned, err_dl4j)
            assert abs(r["score"] - r["score_ref"]) <= 1e-6 * abs(r["score_ref"]), policy
        else:   # unchunked: DL4J's ops in DL4J's order, the same bits
            assert r["bitwise"], (policy, r["worst_variable"], r["max_relative"])
            assert r["score"] == r["score_ref"], policy
    # the smallest plan recomputes (and holds less than liveness in the planner's model)
    assert rows[IN_MEMORY]["stats"]["recomputes"] > 0
