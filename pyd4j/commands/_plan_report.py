"""`pyd4j plan`'s report of one network at one batch: every policy's plan simulated at its minimum memory
and time-optimised under the budget, against the lower bound; as a JSON document and as tables."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import click

from pyd4j.commands._plan_run import summary
from pyd4j.output import human_bytes, print_table


@dataclass
class PolicyRuns:
    """Each policy's plans and simulations: the reported ones, the minimum-memory ones, the variants."""

    results: dict[str, Any] = field(default_factory=dict)
    timelines: dict[str, list[int]] = field(default_factory=dict)
    plans: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, dict] = field(default_factory=dict)
    mins: dict[str, Any] = field(default_factory=dict)


def run_policies(g: Any, chosen: list[str], cost: Any, cap: int, cache: bool, plot: str | None) -> PolicyRuns:
    from pyd4j.sched.policies import evaluate, make_plan
    from pyd4j.sched.simulator import simulate

    runs = PolicyRuns()
    for p in chosen:
        small = make_plan(g, p, cost, cap)
        rs = (simulate(small, cost) if plot and not cache else evaluate(small, cost))
        # the same device memory as the minimum-memory plan, frees delayed by the tensor cache
        at_min = evaluate(make_plan(g, p, cost, rs.device_peak_bytes, cache=True), cost,
                          arena=False)
        fast_plan = make_plan(g, p, cost, cap, cache=True)
        fast = (simulate(fast_plan, cost) if plot and cache
                else evaluate(fast_plan, cost, arena=cache))
        runs.plans[p], runs.results[p] = (fast_plan, fast) if cache else (small, rs)
        runs.mins[p] = rs
        runs.timelines[p] = runs.results[p].timeline
        runs.extra[p] = {"at_min_peak": summary(at_min), "time_optimised": {
            **summary(fast), "budget_bytes": cap, "fits": fast.device_peak_bytes <= cap,
            "tensor_cache": bool(fast_plan.notes.get("tensor_cache"))}}
    return runs


def document(g: Any, batch: int, cost: Any, cap: int, bound: Any, runs: PolicyRuns) -> dict:
    from pyd4j.sched.simulator import ideal_time

    results = runs.results
    base_peak = results["baseline"].peak_bytes if "baseline" in results else None
    ideal = next(iter(results.values())).ideal_time_s
    no_ws = ideal_time(next(iter(runs.plans.values())), cost, fastest_conv=False)
    return {
        "model": g.name, "layers": len(g), "batch": batch, "device": cost.device.key,
        "profile": g.framework.name,   # the key users' scripts read: kept
        "capacity_bytes": cap, "lower_bound_bytes": bound.lower_bound_bytes,
        "resident_bytes": bound.resident_bytes, "l_peak_bytes": bound.l_peak_bytes,
        "l_peak_layer": bound.l_peak_layer, "workspace_bytes": bound.workspace_bytes,
        "ideal_time_s": ideal, "no_workspace_time_s": no_ws,
        "policies": {p: {**r.as_dict(), "fits": r.peak_bytes <= cap,
                         "peak_over_bound": r.peak_bytes / bound.lower_bound_bytes,
                         "reduction_vs_baseline": (1 - r.peak_bytes / base_peak) if base_peak else None,
                         **runs.extra[p]}
                     for p, r in results.items()},
    }


def dl4j_fit(build: Any, batch: int) -> dict:
    """DL4J's own fit() of the network without a plan: the model `pyd4j estimate` and `flags` use."""
    from pyd4j.dl4j.fitmem import MALLOC_ENV, REFERENCE_BATCH, fit_terms

    fit = fit_terms(build(REFERENCE_BATCH).with_framework("dl4j"))
    return {"bytes": sum(t.bytes_at(batch) for t in fit),
            "terms": {t.name: t.bytes_at(batch) for t in fit}, "environment": MALLOC_ENV,
            "note": "DL4J's own fit() without a plan, in the environment pyd4j's flags set "
                    "(pyd4j.dl4j.fitmem; the data pipeline not included)"}


def planned_job_figure(g: Any, network_json: str, budget: int | None, policy: str | None,
                       emitted: dict | None) -> dict:
    """What the job training the network under the plan chosen as --emit-plan chooses it (and pyd4j.train.fit
    with the same budget and policy) holds off the heap: `pyd4j.memory.planned_job`, the one figure."""
    from pyd4j.memory.planned_job import planned_job_document
    from pyd4j.sched.choose import BudgetTooSmall, choose_plan

    if emitted is not None:
        chosen, peak = emitted["policy"], emitted["device_peak_bytes"]
    else:
        try:
            plan, result = choose_plan(g, budget, policy)
        except BudgetTooSmall as err:
            return {"policy": None, "error": str(err)}
        chosen, peak = plan.policy, result.device_peak_bytes
    return {"policy": chosen, **planned_job_document(peak, network_json, g.batch, g.dtype)}


def planned_job_line(figure: dict) -> str:
    """`pyd4j plan`'s line of the planned job's off-heap memory."""
    from pyd4j.memory.planned_job import offheap_line

    if figure.get("policy") is None:
        return offheap_line(figure)
    return f"{figure['policy']} plan (as --emit-plan and pyd4j.train.fit choose it): {offheap_line(figure)}"


def print_minimum(doc: dict, g: Any, batch: int, cost: Any, cap: int, bound: Any, runs: PolicyRuns) -> None:
    print_table(
        f"{g.name}, batch {batch}, on {cost.device.name}, minimum memory: lower bound "
        f"{human_bytes(bound.lower_bound_bytes)} (resident {human_bytes(bound.resident_bytes)} "
        f"+ l_peak {human_bytes(bound.l_peak_bytes)} at {bound.l_peak_layer})",
        ["policy", "peak", "/bound", "+workspace", "arena", "time", "overhead",
         "delayed frees", "fits"],
        [(p, human_bytes(r.peak_bytes), f"{r.peak_bytes / bound.lower_bound_bytes:.3f}",
          human_bytes(r.device_peak_bytes), human_bytes(r.arena_peak_bytes),
          f"{r.time_s * 1e3:.0f} ms", f"{r.overhead:+.0%}",
          f"{runs.extra[p]['at_min_peak']['overhead']:+.0%}", "yes" if r.peak_bytes <= cap else "no")
         for p, r in runs.mins.items()])
    if "dl4j_fit" in doc:
        click.echo(f"DL4J's own fit() (no plan) holds {human_bytes(doc['dl4j_fit']['bytes'])} off the heap at batch "
                   f"{batch}: the figure `pyd4j estimate` and `pyd4j flags` use (the data pipeline besides).")
    if "planned_job_offheap" in doc:
        click.echo(planned_job_line(doc["planned_job_offheap"]))
    print_table(
        f"Time-optimised under a budget of {human_bytes(cap)}: tensors stay cached on the "
        "device; only what the budget forces moves or is recomputed",
        ["policy", "+workspace", "time", "overhead", "offloaded", "recompute", "fits"],
        [(p, human_bytes(e["device_peak_bytes"]), f"{e['time_s'] * 1e3:.0f} ms",
          f"{e['overhead']:+.0%}", human_bytes(e["bytes_offloaded"]),
          f"{e['recompute_s'] * 1e3:.0f} ms", "yes" if e["fits"] else "no")
         for p, e in ((p, runs.extra[p]["time_optimised"]) for p in runs.results)])
    ideal, no_ws = doc["ideal_time_s"], doc["no_workspace_time_s"]
    click.echo(
        "arena: the high-water of a first-fit allocator that never moves a buffer (fragmentation "
        "included).\n"
        "delayed frees: the overhead with the same device memory as the minimum-memory plan, the "
        "tensor cache deciding what to free and when.\n"
        f"overhead = iteration time vs an infinite-memory run ({ideal * 1e3:.1f} ms: no copies, "
        "no recomputation, fastest convolution algorithm with unlimited workspace). Policies "
        "before superneurons use the no-workspace algorithm: "
        f"{no_ws * 1e3:.1f} ms ({no_ws / ideal - 1:+.1%}) even with infinite memory; superneurons "
        "picks the fastest algorithm whose workspace fits in free memory.")


def print_extras(doc: dict, cap: int, backend: str) -> None:
    """The tables of --optimum and --execute, and the line of --emit-plan."""
    ideal = doc["ideal_time_s"]
    if "optimum" in doc:
        o = doc["optimum"]
        print_table(
            f"Exact optimum (MILP, solver status {o['status']}, gap {o['mip_gap']:.2%})",
            ["smallest budget", "budget", "device peak", "time", "overhead"],
            [(human_bytes(o["smallest_budget_bytes"]), human_bytes(cap),
              human_bytes(o["device_peak_bytes"]) if o["fits"] else "-",
              f"{o['time_s'] * 1e3:.0f} ms" if o["fits"] else "does not fit",
              f"{o['time_s'] / ideal - 1:+.0%}" if o["fits"] else "-")])
    if "execute" in doc:
        ex = doc["execute"]
        print_table(
            f"Executed on the {backend} backend ({ex['library']}), one iteration each",
            ["policy", "planned peak", "measured peak", "planned time", "measured time",
             "grads = reference"],
            [(p, human_bytes(e["planned_peak_bytes"]), human_bytes(e["measured_peak_bytes"]),
              f"{e['planned_time_s'] * 1e3:.1f} ms", f"{e['measured_time_s'] * 1e3:.1f} ms",
              "yes" if e["grads_equal_reference"] else f"no (max diff {e['max_abs_grad_diff']:.3g})")
             for p, e in ex["policies"].items()])
    if "emitted_plan" in doc:
        emitted = doc["emitted_plan"]
        click.echo(f"wrote {emitted['path']}: the {emitted['policy']} plan"
                   f"{' (time-optimised under the budget)' if emitted['tensor_cache'] else ''}, predicted peak "
                   f"{human_bytes(emitted['device_peak_bytes'])}; train with it: "
                   f"PlannedTrainer.fit(net, iterator, \"{emitted['path']}\")")
