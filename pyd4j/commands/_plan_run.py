"""What `pyd4j plan` does with plans beyond simulating them: writes one for DL4J's planned trainer, solves the
exact optimum, runs each for real on a backend, plots their memory timelines."""

from __future__ import annotations

from pathlib import Path

import click


def emit_plan_file(g, network_json: str, path: str, budget: int | None, policy: str | None) -> dict:
    """Write the plan the DL4J planned trainer runs (see pyd4j.dl4j.plan_file)."""
    import json

    from pyd4j.dl4j.graph import network_kind
    from pyd4j.sched.choose import BudgetTooSmall, choose_plan
    from pyd4j.dl4j.plan_file import write_plan

    try:
        plan, result = choose_plan(g, budget, policy)
    except BudgetTooSmall as e:
        raise click.BadParameter(str(e), param_hint="--budget") from None
    kind = network_kind(json.loads(Path(network_json).read_text()))
    write_plan(path, plan, result, kind, network_json, budget)
    return {"path": path, "policy": plan.policy, "tensor_cache": bool(plan.notes.get("tensor_cache")),
            "budget_bytes": budget, "peak_bytes": result.peak_bytes,
            "device_peak_bytes": result.device_peak_bytes, "records": len(plan.steps)}


def optimum(g, cost, cap: int) -> dict:
    """The MILP's smallest budget and its fastest plan under `cap` (replayed by the simulator)."""
    from pyd4j.sched.optimum import OptimumError, optimum_plan, smallest_budget
    from pyd4j.sched.simulator import simulate

    try:
        smallest, proven, status = smallest_budget(g, cost)
        out = {"smallest_budget_bytes": smallest, "smallest_budget_proven_bytes": proven,
               "fits": cap >= smallest, "status": status, "mip_gap": 0.0}
        if cap >= smallest:
            opt = optimum_plan(g, cost, cap)
            r = simulate(opt.plan, cost, cap)
            out.update({"status": opt.status, "mip_gap": opt.mip_gap, "time_s": opt.time_s,
                        **summary(r)})
    except OptimumError as e:
        raise click.BadParameter(str(e), param_hint="--optimum") from None
    return out


def summary(r) -> dict:
    """The keys of a plan variant's simulation that the report shows."""
    return {k: r.as_dict()[k] for k in ("peak_bytes", "device_peak_bytes", "time_s", "overhead",
                                        "bytes_offloaded", "bytes_prefetched", "recompute_s",
                                        "stall_s")}


def execute_plans(g, plans: dict, results: dict, backend: str) -> dict:
    """Runs each plan once on `backend` under a budget equal to its planned device peak."""
    import time

    import numpy as np

    from pyd4j.device.executor import execute, init_params, random_batch, reference_run

    if backend == "native":
        from pyd4j.device.native import NativeBackend as make, load_library

        library = load_library().pyd4j_agent_build_kind().decode() + " build"
    elif backend == "cupy":
        from pyd4j.device.cupy_backend import CupyBackend as make

        library = "CuPy"
    else:
        from pyd4j.device.host import HostBackend as make

        library = "numpy"
    x, labels = random_batch(g)
    params = init_params(g)
    ref = reference_run(g, x, labels, params)
    out = {}
    for p, plan in plans.items():
        r = results[p]
        if backend == "cupy":  # the budget is on CuPy's pool bytes, placed by CuPy's own policy
            b = make(budget_bytes=cupy_budget(r.arena_peak_bytes))
        else:  # first-fit arenas: the simulated high-water is what they need
            b = make(budget_bytes=r.device_peak_bytes, arena_bytes=r.arena_peak_bytes)
        try:
            t = time.perf_counter()
            run = execute(plan, b, x, labels, params)
            b.synchronize()
            elapsed = time.perf_counter() - t
        finally:
            b.close()
        diff = max((float(np.max(np.abs(run.grads[k] - ref.grads[k]))) for k in ref.grads), default=0.0)
        out[p] = {"planned_peak_bytes": r.device_peak_bytes, "measured_peak_bytes": run.stats.peak_bytes,
                  "planned_arena_peak_bytes": r.arena_peak_bytes,
                  "measured_arena_peak_bytes": run.stats.arena_peak_bytes,
                  "planned_time_s": r.time_s, "measured_time_s": elapsed,
                  "bytes_offloaded": run.stats.bytes_offloaded,
                  "bytes_prefetched": run.stats.bytes_prefetched,
                  "grads_equal_reference": all(np.array_equal(run.grads[k], ref.grads[k]) for k in ref.grads),
                  "max_abs_grad_diff": diff}
    return {"backend": backend, "library": library, "policies": out}


def cupy_budget(arena_peak_bytes: int) -> int:
    """Pool bytes a plan gets on CuPy: its simulated first-fit high-water plus room for CuPy's
    512-byte rounding and its own placement (measured on a GPU, see benchmarks/agent_gpu.py)."""
    return int(arena_peak_bytes * 1.25) + (1 << 20)


def plot(path: str, name: str, timelines: dict[str, list[int]], bound: int, cap: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    for p, tl in timelines.items():
        n = max(1, len(tl) - 1)
        ax.plot([k / n for k in range(len(tl))], [b / 2**30 for b in tl], label=p, lw=1)
    ax.axhline(bound / 2**30, color="k", ls="--", lw=0.8, label="lower bound")
    ax.axhline(cap / 2**30, color="r", ls=":", lw=0.8, label="device memory")
    ax.set_xlabel("iteration progress (plan records)")
    ax.set_ylabel("device memory (GiB)")
    ax.set_title(f"{name}: memory timeline per policy")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
