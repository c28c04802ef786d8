"""Planner speed, end to end: `pyd4j plan` as a user runs it, and every policy on networks of
10,000+ layers.

1. `pyd4j plan --model resnet3335 --batch 16 --policy superneurons --json` and
   `pyd4j plan --model resnet --max-depth --batch 16 --json`, each in a fresh interpreter
   (imports, graph building, every plan the report holds, simulation): wall and CPU seconds,
   best of a few runs, with the load average while they ran (the machine is shared).
2. Plan + simulate per policy on a 10,000-layer chain and ResNet-3335, graph building timed
   separately; the baseline measured in the same run is the liveness plan of the same network
   (ratio column).

Writes benchmarks/results/plan_speed.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time

from harness import RESULTS, Recorder
from pyd4j.sched import zoo
from pyd4j.sched.costmodel import CostModel
from pyd4j.sched.policies import POLICIES, make_plan
from pyd4j.sched.simulator import simulate

OUT = RESULTS / "plan_speed.json"
CLI_CASES = {
    "plan_resnet3335_superneurons": (["plan", "--model", "resnet3335", "--batch", "16",
                                      "--policy", "superneurons", "--json"], 3.0),
    "plan_max_depth": (["plan", "--model", "resnet", "--max-depth", "--batch", "16", "--json"],
                       10.0),
}


def cli_run(args: list[str]) -> tuple[float, float, dict]:
    """(wall s, CPU s of the child, its JSON) of one `pyd4j` invocation in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "pyd4j.cli", *args], check=True,
                         capture_output=True, text=True).stdout
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, json.loads(out)


def timed(fn, repeat: int = 3, setup=lambda: None) -> tuple[float, object]:
    """Best wall time of `fn(setup())` (setup untimed)."""
    best, out = float("inf"), None
    for _ in range(repeat):
        arg = setup()
        t = time.perf_counter()
        out = fn(arg)
        best = min(best, time.perf_counter() - t)
    return best, out


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    rec = Recorder("plan_speed")
    cli = {}
    for name, (args, target) in CLI_CASES.items():
        runs = [cli_run(args) for _ in range(3)]
        wall, cpu, doc = min(runs, key=lambda r: r[0])
        cli[name] = {"command": "pyd4j " + " ".join(args), "wall_s": wall, "cpu_s": cpu,
                     "wall_s_runs": [r[0] for r in runs], "cpu_s_runs": [r[1] for r in runs],
                     "target_s": target, "load_average": os.getloadavg(),
                     "result": {k: doc.get(k) for k in ("model", "layers", "depth",
                                                        "lower_bound_bytes")}}
        print(f"{name}: best wall {wall:.2f}s (CPU {cpu:.2f}s), target {target}s, "
              f"load {os.getloadavg()[0]:.1f}")
    cost = CostModel.for_device("k40c")
    cases = [("chain10000", lambda: zoo.chain(10_000)),
             ("resnet3335", lambda: zoo.resnet(3335, batch=16)),  # 11,126 layers
             ("resnet152", lambda: zoo.resnet(152, batch=32))]
    rows = []
    for name, build in cases:
        # every plan on a fresh graph: plans are memoised on their graph
        t_build, g = timed(lambda _: build(), 1)
        live_t, _ = timed(lambda fresh: simulate(make_plan(fresh, "liveness", cost), cost),
                          setup=build)
        for policy in POLICIES:
            t_plan, plan = timed(lambda fresh: make_plan(fresh, policy, cost), setup=build)
            t_sim, res = timed(lambda p: simulate(p, cost), setup=lambda: plan)
            rows.append({"network": name, "layers": len(g), "policy": policy,
                         "records": len(plan.steps), "build_s": t_build, "plan_s": t_plan,
                         "simulate_s": t_sim, "plan_plus_simulate_s": t_plan + t_sim,
                         "ratio_to_liveness": (t_plan + t_sim) / live_t,
                         "peak_bytes": res.peak_bytes})
            print(f"{name:12s} {len(g):6d} layers {policy:13s} plan {t_plan:.3f}s "
                  f"simulate {t_sim:.3f}s records {len(plan.steps)}")
    rec.doc.update({"processor": platform.processor() or platform.machine(), "cli": cli, "rows": rows,
                    "max_plan_plus_simulate_10k_s": max(r["plan_plus_simulate_s"] for r in rows
                                                        if r["layers"] >= 10_000)})
    print(f"wrote {rec.write(OUT, indent=2)}")


if __name__ == "__main__":
    main()
