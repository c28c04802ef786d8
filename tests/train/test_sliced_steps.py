"""Batch normalization in two passes over batch slices (org.pyd4j.train.SlicedBatchNorm) and activation
layers in slices: DL4J's
training step, exactly up to the order of floating-point additions, in a fraction of its memory
(real DL4J).

The networks' batch normalizations run in the planner's two-pass variant
(`pyd4j.sched.choose.sliced_variant`), whole (one slice) and with every sliceable step in as many
batch slices as the batch allows. `org.pyd4j.fixtures.PlannedCheck` (child JVM,
`-Dpyd4j.check.f64=true`) compares one planned iteration with DL4J's own
`computeGradientAndScore()` and both with the same computation in float64 (the exact result), and
then planned `fit()` with DL4J's `fit()` over 10 iterations. The claim (as for chunked
convolutions): every gradient, and the parameters after 10 iterations, as close to the exact result
as DL4J's own float32 results are; the running mean and variance are among those parameters.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyd4j.dl4j.graph import graph_from_dl4j_json, network_kind
from pyd4j.dl4j.input_types import sidecar_shapes
from pyd4j.dl4j.plan_file import write_plan
from pyd4j.sched.choose import BudgetTooSmall, choose_plan, default_cost, smallest_plan, sliced_variant
from pyd4j.sched.convws import assign_workspaces
from pyd4j.sched.simulator import simulate
from tests.train.conftest import NETWORKS
from tests.train.test_chunked_conv import FLOOR, run_check

ITERATIONS = 10
BATCH = {"deep_cnn_bn": 4, "resnet_graph": 4, "deep_cnn30": 2}


def sliced_plans(name: str, batch: int, tmp_path: Path) -> list[str]:
    config = NETWORKS / f"{name}.json"
    doc = json.loads(config.read_text())
    g = sliced_variant(graph_from_dl4j_json(doc, batch, sidecar_shapes(config)))
    assert g is not None
    cost = default_cost()
    whole, r = choose_plan(g, policy="liveness")
    sliced = assign_workspaces(choose_plan(g, policy="liveness")[0], cost, 0)   # every sliceable step in slices
    return [str(write_plan(tmp_path / f"{name}.{tag}.json", p, res, network_kind(doc), str(config)))
            for tag, p, res in (("whole", whole, r), ("sliced", sliced, simulate(sliced, cost)))]


@pytest.mark.jvm
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BATCH))
def test_sliced_batch_norm_trains_as_dl4j_does(name: str, tmp_path: Path) -> None:
    files = sliced_plans(name, BATCH[name], tmp_path)
    plans = [json.loads(Path(f).read_text()) for f in files]
    assert all(p["schema"] == 2 and any(n.get("sliced") for n in p["nodes"]) for p in plans)
    rows = run_check(name, files, ITERATIONS, BATCH[name])
    assert [r["plan"] for r in rows] == files
    for r in rows:
        where = f"{name} / {Path(r['plan']).name}"
        stats = r["stats"]
        assert stats["chunked_steps"] > 0 and stats["rebuilds"] == 0 and stats["left_to_gc"] == 0, where
        assert r["iteration_count"] == [ITERATIONS, ITERATIONS] and r["fit_iterations"] == ITERATIONS, where
        exact = r["score_f64"]   # deep_cnn30 (30 batch normalizations): DL4J's own score 1.3e-5 off the exact one
        assert abs(r["score"] - exact) <= FLOOR * abs(r["score_ref"] - exact) + 1e-7 * abs(exact), (where, r["score"])
        for var, (_, _, fit_err, plan_err, scale) in r["gradient_by_variable"].items():
            assert plan_err <= FLOOR * fit_err + 1e-7 * scale, (where, "gradient", var, fit_err, plan_err)
        params = r["params_by_variable"].values()
        worst_fit = max(fit_err / scale for _, fit_err, _, scale in params)
        worst_plan = max(plan_err / scale for _, _, plan_err, scale in params)
        assert worst_plan <= FLOOR * worst_fit + 1e-6, (where, "parameters", worst_fit, worst_plan)


def test_the_sliced_variant_holds_less_and_is_chosen_only_when_needed() -> None:
    """No plan with DL4J's batch normalization fits a budget just under its smallest plan; the
    two-pass variant's does, and choose_plan takes it only then."""
    config = NETWORKS / "deep_cnn_bn.json"
    doc = json.loads(config.read_text())
    g = graph_from_dl4j_json(doc, 64, sidecar_shapes(config))
    plain = smallest_plan_of(g)
    variant = sliced_variant(g)
    assert variant is not None and all(l.attrs.get("variant") == "sliced" for l in variant.layers if l.type.value == "BN")
    two_pass = smallest_plan_of(variant)
    assert two_pass < 0.9 * plain, (two_pass, plain)
    roomy, _ = choose_plan(g, budget=plain + (64 << 20))
    assert not any(l.attrs.get("variant") == "sliced" for l in roomy.graph.layers)
    tight, r = choose_plan(g, budget=plain - 1)
    assert r.device_peak_bytes < plain and any(l.attrs.get("variant") == "sliced" for l in tight.graph.layers)
    small, small_r = smallest_plan(g)
    assert small_r.device_peak_bytes == two_pass
    with pytest.raises(BudgetTooSmall) as err:
        choose_plan(g, budget=two_pass // 2)
    assert err.value.minimum == two_pass   # the floor named is the two-pass variant's


def smallest_plan_of(g) -> int:
    from pyd4j.sched.choose import _smallest

    return _smallest(g)[1].device_peak_bytes


@pytest.mark.jvm
@pytest.mark.slow
def test_sliced_activation_layers_are_dl4j_bit_for_bit(tmp_path: Path) -> None:
    """Activation layers in batch slices run DL4J's own step on each slice, element by element, and
    write the input gradient over the output gradient where the plan moves it: the result is DL4J's
    own, bit for bit (everything else as DL4J runs it)."""
    from dataclasses import replace

    from tests.train.test_chunked_conv import chunk_record

    config = NETWORKS / "deep_cnn_bn.json"
    doc = json.loads(config.read_text())
    g = graph_from_dl4j_json(doc, 4, sidecar_shapes(config))
    acts = g.with_framework(g.framework)
    acts.layers = [replace(l, attrs={**l.attrs, "variant": "sliced"}) if l.type.value == "ACT" else l for l in g.layers]
    plan, r = choose_plan(acts, policy="liveness")
    assert any(s.op.name == "MOVE" for s in plan.steps)   # input gradients written in place
    whole = write_plan(tmp_path / "acts.json", plan, r, network_kind(doc), str(config))
    sliced = json.loads(whole.read_text())
    for layer in acts.layers:
        if layer.type.value == "ACT":
            for op in ("FORWARD", "BACKWARD"):
                chunk_record(sliced, layer.id, op, chunks=2)
    (tmp_path / "acts2.json").write_text(json.dumps(sliced))
    rows = run_check("deep_cnn_bn", [str(whole), str(tmp_path / "acts2.json")], ITERATIONS, 4)
    for row in rows:
        assert row["stats"]["chunked_steps"] > 0 and row["stats"]["rebuilds"] == 0, row["plan"]
        assert row["bit_identical"] and row["score"] == row["score_ref"] and row["params_identical"], row["plan"]
