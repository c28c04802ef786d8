"""Convolutions in batch chunks (DL4J's dynamic convolution workspace) train as DL4J trains, in
less working memory (real DL4J).

For each example network, every convolution that may be sliced runs its forward and backward step
in as many batch chunks as the batch allows (the planner's least-memory choice), and
`org.pyd4j.fixtures.PlannedCheck` (child JVM, `-Dpyd4j.check.f64=true`) compares
- one planned iteration with DL4J's own `computeGradientAndScore()` on the same batch, and both
  with the same computation in float64 (the float32 parameters cast exactly: the exact result);
- 20 iterations of planned `fit()` with DL4J's own `fit()`, both with float64 `fit()`.

Slices change the order of floating-point additions (a matrix product over fewer rows rounds
differently; DL4J's own gradients differ from the exact ones by 1e-7..1e-5 relative), so the
results are not bit-identical to fit(): the claim is that they are as close to the exact result as
DL4J's own float32 results are. Networks with batch normalization amplify rounding: a convolution's
bias in front of batch normalization has a gradient of exactly zero (batch normalization removes
the mean), so float32 computes noise there, and Adam turns noise into steps of the learning rate;
its parameters (and the running means that follow them) are compared with the same float64 rule.
LeNet (no batch normalization) also meets a plain rule: every gradient within 2e-6 of fit()'s (both
within DL4J's own float32 error of the exact one), every parameter within 1e-4 after 20 iterations.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from pyd4j.dl4j.input_types import sidecar_shapes
from pyd4j.jvm.classpath import classpath
from pyd4j.sched.convws import assign_workspaces
from pyd4j.dl4j.graph import graph_from_dl4j_json, network_kind
from pyd4j.sched.simulator import record_scratch, simulate
from pyd4j.sched.choose import IN_MEMORY, choose_plan, default_cost
from pyd4j.dl4j.plan_file import write_plan
from tests.train.conftest import FIXTURES_JAR, NETWORKS
from tests.train.test_refusals import network, problems

ITERATIONS = 20
BATCH = {"lenet": 8, "deep_cnn_bn": 4, "resnet_graph": 4}
FLOOR = 4.0   # planned error vs float64 <= FLOOR x DL4J's own float32 error (measured: <= 2.5)


def plans(name: str, tmp_path: Path) -> tuple[list[str], dict[str, dict]]:
    config = NETWORKS / f"{name}.json"
    doc = json.loads(config.read_text())
    g = graph_from_dl4j_json(doc, BATCH[name], sidecar_shapes(config))
    cost = default_cost()
    files, info = [], {}
    whole, r = choose_plan(g, policy="liveness")
    files.append(str(write_plan(tmp_path / f"{name}.whole.json", whole, r, network_kind(doc), str(config))))
    info[files[-1]] = {"chunked": 0, "scratch": g.deps.ws_fwd[0]}
    for policy in ("liveness", IN_MEMORY):
        plan = assign_workspaces(choose_plan(g, policy=policy)[0], cost, 0)   # every convolution sliced
        r = simulate(plan, cost)
        files.append(str(write_plan(tmp_path / f"{name}.{policy}.chunked.json", plan, r, network_kind(doc),
                                    str(config))))
        counts = g.framework.chunk_counts
        info[files[-1]] = {"chunked": sum(1 for s in plan.steps if counts[s.algo] > 1),
                           "scratch": max(record_scratch(plan))}
    return files, info


def run_check(name: str, files: list[str], iterations: int = ITERATIONS, batch: int | None = None) -> list[dict]:
    """PlannedCheck with the float64 reference, on the plan files (written at `batch`, BATCH[name] by default)."""
    cp = ":".join([str(FIXTURES_JAR)] + classpath())
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(["java", "-Dpyd4j.check.f64=true", "-Xmx1g", "-cp", cp, "org.pyd4j.fixtures.PlannedCheck",
                          str(NETWORKS / f"{name}.json"), str(NETWORKS / f"{name}.input.json"), str(batch or BATCH[name]),
                          str(iterations), *files], capture_output=True, text=True, timeout=3000, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


@pytest.mark.jvm
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BATCH))
def test_chunked_convolutions_train_as_dl4j_does(name: str, tmp_path: Path) -> None:
    files, info = plans(name, tmp_path)
    rows = run_check(name, files)
    assert [r["plan"] for r in rows] == files
    whole = rows[0]
    assert whole["bit_identical"] and whole["params_identical"] and whole["stats"]["chunked_steps"] == 0
    for r in rows[1:]:
        where = f"{name} / {Path(r['plan']).name}"
        stats = r["stats"]
        assert stats["chunked_steps"] == info[r["plan"]]["chunked"] > 0, where
        assert stats["rebuilds"] == 0 and stats["left_to_gc"] == 0, where
        assert r["iteration_count"] == [ITERATIONS, ITERATIONS] and r["fit_iterations"] == ITERATIONS, where
        assert abs(r["score"] - r["score_ref"]) <= 1e-6 * abs(r["score_ref"]), where
        # per variable: [relative to fit(), max |fit()|, |fit() - exact|, |planned - exact|, max |exact|]
        for var, (rel, _, fit_err, plan_err, scale) in r["gradient_by_variable"].items():
            assert plan_err <= FLOOR * fit_err + 1e-7 * scale, (where, "gradient", var, fit_err, plan_err)
        # after 20 iterations, over the whole network: [relative to fit(), |fit() - exact|, |planned - exact|,
        # max |exact|] per variable. Each variable's float32 drift is a random walk, and fit()'s own drift on
        # one variable can be small by chance (lenet's output weights: 4.7e-7, while its dense layer's is
        # 5.7e-6), so the planned run's worst is held to fit()'s worst, not variable by variable
        params = r["params_by_variable"].values()
        worst_fit = max(fit_err / scale for _, fit_err, _, scale in params)
        worst_plan = max(plan_err / scale for _, _, plan_err, scale in params)
        assert worst_plan <= FLOOR * worst_fit + 1e-6, (where, "parameters", worst_fit, worst_plan)
        if name == "lenet":   # no batch normalization: fit()'s own results within plain tolerances; two
            # results each within DL4J's float32 error of the exact one differ by up to twice that error
            assert r["max_relative"] <= 2e-6 and r["params_relative"] <= 1e-4, where


@pytest.mark.jvm
@pytest.mark.slow
@pytest.mark.parametrize("name", ["deep_cnn_bn", "resnet_graph"])
def test_chunks_divide_the_working_memory(name: str, tmp_path: Path) -> None:
    """DL4J's working-memory workspace (the trainer's stats) is as large as the planner says: for
    these convolution-dominated networks about 1/k of the whole batch's with k chunks."""
    files, info = plans(name, tmp_path)
    rows = run_check(name, files[:2])
    whole, chunked = (r["stats"]["working_memory_bytes"] for r in rows)
    k = BATCH[name]   # every convolution in k = batch chunks
    assert 0.5 / k <= chunked / whole <= 1.5 / k, (whole, chunked)
    for r in rows:   # measured vs the planner's held scratch: within 20 %
        predicted = info[r["plan"]]["scratch"]
        assert 0.8 <= r["stats"]["working_memory_bytes"] / predicted <= 1.2, (r["plan"], predicted, r["stats"])


def chunk_record(doc: dict, node: int, op: str = "BACKWARD", chunks: int = 2) -> None:
    for rec in doc["records"]:
        if rec[0] == op and rec[1] == node:
            rec[2:] = [{"algo": f"BATCH_{chunks}", "chunks": chunks}]
            return
    raise AssertionError(f"no {op} record of node {node}")


@pytest.mark.jvm
def test_slicing_what_cannot_be_sliced_is_refused_with_the_fix(jvm, tmp_path: Path) -> None:
    import jpype

    made = iter(range(100))

    def plan_with(name: str, node: int, op: str) -> str:
        config = NETWORKS / f"{name}.json"
        doc_net = json.loads(config.read_text())
        plan, r = choose_plan(graph_from_dl4j_json(doc_net, 4, sidecar_shapes(config)), policy="liveness")
        path = tmp_path / f"{name}.{node}.{op}.{next(made)}.json"
        write_plan(path, plan, r, network_kind(doc_net), str(config))
        doc = json.loads(path.read_text())
        chunk_record(doc, node, op)
        path.write_text(json.dumps(doc))
        return str(path)

    # batch normalization (statistics over the whole batch) and pooling are not run in slices
    out = problems(network("deep_cnn_bn"), plan_with("deep_cnn_bn", 2, "FORWARD"))
    assert len(out) == 1 and "'layer1'" in out[0] and "only a ConvolutionLayer or LocalResponseNormalization is run in batch chunks" in out[0], out
    assert "without batch chunks" in out[0]
    # a convolution with input dropout: fit() draws one mask for the whole batch
    net = network("deep_cnn_bn")
    net.getLayers()[3].conf().getLayer().setIDropout(jpype.JClass("org.deeplearning4j.nn.conf.dropout.Dropout")(0.9))
    out = problems(net, plan_with("deep_cnn_bn", 4, "BACKWARD"))
    assert any("'layer3'" in p and "input dropout" in p and "without batch chunks" in p for p in out), out
    # a convolution fed through a preprocessor (LeNet's first reshapes the flat input) is accepted:
    # the reshape runs on the whole batch, the convolution in slices
    assert problems(network("lenet"), plan_with("lenet", 1, "FORWARD")) == []
    assert problems(network("lenet"), plan_with("lenet", 1, "BACKWARD")) == []
    # the same networks' convolutions otherwise are accepted in chunks
    assert problems(network("deep_cnn_bn"), plan_with("deep_cnn_bn", 4, "BACKWARD")) == []
    assert problems(network("resnet_graph"), plan_with("resnet_graph", 2, "FORWARD")) == []
