"""Zoo peaks per policy vs the lower bound (batch 32, 227x227) with the iteration-time overhead
of the minimum-memory plans, of the same memory with delayed frees, and of the time-optimised
superneurons plan under the device's memory (tensor cache), and the deepest trainable ResNet on a 12 GB K40c profile (batch 16, 227x227, SGD momentum state on
the device), per policy, next to the SuperNeurons paper's claims.

Writes benchmarks/results/depth.json.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from pyd4j.sched import zoo
from pyd4j.sched.bounds import lower_bound
from pyd4j.sched.costmodel import CostModel
from pyd4j.sched.policies import POLICIES, make_plan
from pyd4j.sched.simulator import simulate
from pyd4j.sched.search import max_resnet_depth

OUT = Path(__file__).parent / "results" / "depth.json"


def main() -> None:
    cost = CostModel.for_device("k40c")
    nets = {}
    for model in ("alexnet", "vgg16", "vgg19", "resnet50", "resnet101", "resnet152",
                  "inception_v4"):
        g = zoo.build(model, batch=32)
        bound = lower_bound(g, cost)
        res = {p: simulate(make_plan(g, p, cost), cost) for p in POLICIES}
        cached = simulate(make_plan(g, "superneurons", cost, cache=True), cost)
        at_min = {p: simulate(make_plan(g, p, cost, r.device_peak_bytes, cache=True), cost)
                  for p, r in res.items()}
        base = res["baseline"].peak_bytes
        nets[model] = {
            "layers": len(g), "lower_bound_bytes": bound.lower_bound_bytes,
            "resident_bytes": bound.resident_bytes, "l_peak_bytes": bound.l_peak_bytes,
            "policies": {p: {"peak_bytes": r.peak_bytes,
                             "peak_over_bound": r.peak_bytes / bound.lower_bound_bytes,
                             "reduction_vs_baseline": 1 - r.peak_bytes / base,
                             "time_s": r.time_s, "overhead": r.overhead}
                         for p, r in res.items()},
            "delayed_frees": {p: {"device_peak_bytes": r.device_peak_bytes,
                                  "time_s": r.time_s, "overhead": r.overhead}
                              for p, r in at_min.items()},
            "superneurons_cached": {"peak_bytes": cached.peak_bytes,
                                    "device_peak_bytes": cached.device_peak_bytes,
                                    "time_s": cached.time_s, "overhead": cached.overhead,
                                    "bytes_offloaded": cached.bytes_offloaded,
                                    "recompute_s": cached.recompute_s}}
        print(model, {p: round(v["peak_over_bound"], 3) for p, v in nets[model]["policies"].items()},
              "overhead min-memory / delayed frees / time-optimised:",
              f"{res['superneurons'].overhead:+.1%} / {at_min['superneurons'].overhead:+.1%} / "
              f"{cached.overhead:+.1%}")
    # graceful degradation: time-optimised superneurons on ResNet-152 as the budget shrinks
    g = zoo.build("resnet152", batch=32)
    sweep = []
    for gib in (1.4, 2, 4, 6, 8, 10, 12):
        budget = int(gib * 2**30)
        r = simulate(make_plan(g, "superneurons", cost, budget, cache=True), cost, budget)
        sweep.append({"budget_bytes": budget, "device_peak_bytes": r.device_peak_bytes,
                      "time_s": r.time_s, "overhead": r.overhead,
                      "bytes_offloaded": r.bytes_offloaded, "recompute_s": r.recompute_s})
        print("resnet152 budget", gib, "GiB", f"{r.overhead:+.1%}")
    rows = {}
    for policy in POLICIES:
        t = time.perf_counter()
        r = max_resnet_depth(policy, cost, batch=16, image=227)
        rows[policy] = {"depth": r.value, "peak_bytes": r.result.peak_bytes,
                        "time_s": r.result.time_s, "overhead": r.result.overhead,
                        "search_s": time.perf_counter() - t, "plans_evaluated": r.evaluations}
        print(policy, rows[policy])
    doc = {"device": cost.device.name, "capacity_bytes": cost.device.memory_bytes, "batch": 16,
           "image": 227, "zoo_batch32": nets, "resnet152_batch32_budget_sweep": sweep,
           "policies": rows,
           "ratio_to_baseline": rows["superneurons"]["depth"] / rows["baseline"]["depth"],
           "ratio_to_liveness": rows["superneurons"]["depth"] / rows["liveness"]["depth"],
           "paper": {"deepest_resnet_k40c": 2500, "ratio_to_frameworks": 3.2432}}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
