"""Planned training reproduces DL4J's own training exactly (real DL4J, every policy).

For each example network and each policy, `pyd4j.sched` plans the DL4J-faithful graph, the plan is
written as a plan file, and `org.pyd4j.fixtures.PlannedCheck` (in a child JVM) compares
- one planned iteration with DL4J's own `computeGradientAndScore()` on the same batch and random
  state: every gradient entry and the score;
- 20 iterations of `fit()` with the plan installed against DL4J's own `fit()` from the same
  parameters, data and random state: every parameter, the iteration count.
Offloading plans run on a fake in-memory tier (it isolates the trainer's logic; the real tiers have
their own tests). The op order of every planned step is DL4J's, so the results are bit-identical --
with the trainer's buffer pool making later iterations' arrays on buffers released earlier.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from pyd4j.dl4j.input_types import sidecar_shapes
from pyd4j.jvm.classpath import classpath
from pyd4j.dl4j.graph import graph_from_dl4j_json, network_kind
from pyd4j.sched.policies import POLICIES
from pyd4j.sched.choose import IN_MEMORY, choose_plan
from pyd4j.dl4j.plan_file import write_plan
from tests.train.conftest import FIXTURES_JAR, NETWORKS

pytestmark = [pytest.mark.jvm, pytest.mark.slow]

ITERATIONS = 20
# small batches keep CI quick: the claims do not depend on the batch size
BATCH = {"mlp": 8, "lenet": 8, "deep_cnn_bn": 4, "resnet_graph": 2, "deep_cnn30": 4}


def run_check(name: str, tmp_path: Path) -> dict[str, dict]:
    config = NETWORKS / f"{name}.json"
    doc = json.loads(config.read_text())
    g = graph_from_dl4j_json(doc, BATCH[name], sidecar_shapes(config))
    files = []
    for policy in (*POLICIES, IN_MEMORY):
        plan, result = choose_plan(g, policy=policy)
        files.append(str(write_plan(tmp_path / f"{name}.{policy}.json", plan, result,
                                    network_kind(doc), str(config))))
    cp = ":".join([str(FIXTURES_JAR)] + classpath())
    # one OpenMP thread: ND4J's many tiny ops run far faster on a loaded machine, and no less exactly
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(["java", "-Xmx1g", "-cp", cp, "org.pyd4j.fixtures.PlannedCheck", str(config),
                          str(NETWORKS / f"{name}.input.json"), str(BATCH[name]), str(ITERATIONS), *files],
                         capture_output=True, text=True, timeout=3000, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return {r["policy"]: r for r in rows}


@pytest.mark.parametrize("name", sorted(BATCH))
def test_planned_training_is_dl4j_training(name: str, tmp_path: Path) -> None:
    rows = run_check(name, tmp_path)
    assert set(rows) == {*POLICIES, IN_MEMORY}
    for policy, r in rows.items():
        where = f"{name} / {policy}"
        assert r["variables"] == r["planned_variables"] > 0, where
        assert r["max_relative"] <= 1e-6, f"{where}: worst {r['worst_variable']} {r['max_relative']}"
        assert r["bit_identical"], where   # same ops in the same order: same bits, same score
        assert r["score"] == r["score_ref"], where
        assert r["params_relative"] <= 1e-4 and r["params_identical"], where
        assert r["iteration_count"] == [ITERATIONS, ITERATIONS] and r["fit_iterations"] == ITERATIONS, where
        stats = r["stats"]
        assert stats["rebuilds"] == 0, where   # the plan said everything the trainer did
        assert stats["left_to_gc"] == 0, where   # everything released was closed, nothing waits for the GC
        assert r["tier_offloads"] == r["tier_releases"] and r["tier_held_after"] == 0, where
        assert stats["stale_releases"] == 0 == r["fit_stats"]["stale_releases"], where   # none released a buffer handed out again
    # the buffer pool was at work where the parameters above came out bit-identical: arrays of the
    # iterations after the first were made on buffers released earlier (at these batches mlp's and
    # deep_cnn30's arrays are below the pool's 128 KiB floor, and lenet's whole step memory is less than
    # its parameters, the room the pool leaves between iterations for DL4J's update step)
    if name in ("deep_cnn_bn", "resnet_graph"):
        assert rows["liveness"]["fit_stats"]["pooled_reuses"] > 0, rows["liveness"]["fit_stats"]
    # ... and not under a plan made for the least memory (one that recomputes), whose peak it would raise
    assert rows["liveness"]["fit_stats"]["buffer_pool"]
    if rows["recompute"]["stats"]["recomputes"] > 0:
        assert not rows["recompute"]["fit_stats"]["buffer_pool"]
        assert rows["recompute"]["fit_stats"]["pooled_reuses"] == 0
    # the policies do what they say: liveness holds less than keeping everything, recomputation
    # recomputes, the tensor pool offloads
    assert rows["liveness"]["stats"]["peak_live_bytes"] <= rows["baseline"]["stats"]["peak_live_bytes"]
    assert rows["baseline"]["stats"]["offloads"] == 0 == rows["liveness"]["stats"]["recomputes"]
    if name != "mlp":   # an MLP has no convolution to offload and no cheap layer to recompute
        assert rows["utp"]["stats"]["offloads"] > 0 and rows["recompute"]["stats"]["recomputes"] > 0
        assert rows[IN_MEMORY]["stats"]["offloads"] == 0 < rows[IN_MEMORY]["stats"]["recomputes"]
