"""The SuperNeurons planner on the K40c profile, under the `cudnn` dependency model and the zoo
as the release code builds it:

1. zoo peaks per policy vs the lower bound (batch 32, each network at its code's input size),
   the arena high-water of a first-fit allocator next to the accounted peak, and the
   iteration-time overhead of the minimum-memory plans, of the same memory with delayed frees,
   and of the time-optimised superneurons plan under the device's memory;
2. ResNet-152 at batch 32 as the budget shrinks (time-optimised superneurons);
3. the deepest trainable ResNet (batch 16, 227x227), per policy, for the standard block
   layout (3, 4, k, 3) and the release code's (6, 32, k, 6), on the nominal 12 GiB and on the
   memory a K40c leaves with ECC on (NVIDIA's Tesla K40 board specification BD-06902-001:
   about 6.25% less, ~11.25 GB; the CUDA context and cuDNN handles are not deducted), with what
   the deepest plan's peak is made of.

Writes benchmarks/results/depth.json.
"""

from __future__ import annotations

import argparse
import time

from harness import RESULTS, Recorder
from pyd4j.sched import zoo
from pyd4j.sched.bounds import lower_bound
from pyd4j.sched.costmodel import CostModel
from pyd4j.sched.deps import framework_deps
from pyd4j.sched.policies import POLICIES, make_plan
from pyd4j.sched.search import max_resnet_depth
from pyd4j.sched.simulator import simulate

OUT = RESULTS / "depth.json"
NOMINAL = 12 * 2**30
USABLE = NOMINAL * 15 // 16  # ECC on: 6.25% of the memory holds the check bits
KEEP_DW = framework_deps("cudnn", {"frameworks": {"cudnn": {"keep_dw": True}}})


def zoo_table(cost: CostModel) -> dict:
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
            "layers": len(g), "params": g.n_params, "image": g.layers[0].out_shape[2],
            "lower_bound_bytes": bound.lower_bound_bytes,
            "resident_bytes": bound.resident_bytes, "l_peak_bytes": bound.l_peak_bytes,
            "l_peak_layer": bound.l_peak_layer,
            "policies": {p: {"peak_bytes": r.peak_bytes, "arena_peak_bytes": r.arena_peak_bytes,
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
              f"{cached.overhead:+.1%}", flush=True)
    return nets


def budget_sweep(cost: CostModel) -> list[dict]:
    g = zoo.build("resnet152", batch=32)
    sweep = []
    for gib in (1.4, 2, 4, 6, 8, 10, 12):
        budget = int(gib * 2**30)
        r = simulate(make_plan(g, "superneurons", cost, budget, cache=True), cost, budget)
        sweep.append({"budget_bytes": budget, "device_peak_bytes": r.device_peak_bytes,
                      "time_s": r.time_s, "overhead": r.overhead,
                      "bytes_offloaded": r.bytes_offloaded, "recompute_s": r.recompute_s})
        print("resnet152 budget", gib, "GiB", f"{r.overhead:+.1%}", flush=True)
    return sweep


def depths(cost: CostModel) -> dict:
    out = {}
    for layout in ("standard", "paper"):
        for label, cap in (("nominal", NOMINAL), ("usable", USABLE)):
            rows = {}
            for policy in POLICIES:
                t = time.perf_counter()
                r = max_resnet_depth(policy, cost, batch=16, image=227, capacity=cap,
                                     layout=layout)
                row = {"depth": r.value, "search_s": time.perf_counter() - t,
                       "plans_evaluated": r.evaluations}
                if r.result is not None:
                    g = zoo.resnet(r.value, batch=16, layout=layout)
                    b = lower_bound(g)
                    row.update({"peak_bytes": r.result.peak_bytes,
                                "arena_peak_bytes": r.result.arena_peak_bytes,
                                "time_s": r.result.time_s, "overhead": r.result.overhead,
                                "lower_bound_bytes": b.lower_bound_bytes,
                                "resident_bytes": b.resident_bytes,
                                "parameter_bytes": 2 * sum(g.deps.psz),
                                "state_bytes": g.deps.resident_state_bytes,
                                "resident_share_of_peak": b.resident_bytes / r.result.peak_bytes})
                rows[policy] = row
                print(layout, label, policy, {k: row[k] for k in ("depth", "plans_evaluated")},
                      flush=True)
            # the same plans placed in a first-fit arena (fragmentation), and with dW allocated
            # for the whole run as the release code does
            arena = max_resnet_depth("superneurons", cost, batch=16, image=227, capacity=cap,
                                     layout=layout, fit="arena")
            kept = max_resnet_depth("superneurons", cost, batch=16, image=227, capacity=cap,
                                    layout=layout, framework=KEEP_DW)
            rows["superneurons_arena_fit"] = {"depth": arena.value,
                                              "plans_evaluated": arena.evaluations}
            rows["superneurons_dw_kept"] = {"depth": kept.value,
                                            "plans_evaluated": kept.evaluations,
                                            "peak_bytes": kept.result.peak_bytes}
            print(layout, label, "arena fit", arena.value, "dW kept", kept.value, flush=True)
            base, live = rows["baseline"]["depth"], rows["liveness"]["depth"]
            out[f"{layout}_{label}"] = {
                "layout": layout, "stages": list(zoo.LAYOUTS[layout]), "capacity_bytes": cap,
                "policies": rows,
                "ratio_to_baseline": rows["superneurons"]["depth"] / base if base else None,
                "ratio_to_liveness": rows["superneurons"]["depth"] / live if live else None}
    return out


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    rec = Recorder("depth")
    cost = CostModel.for_device("k40c")
    nets = zoo_table(cost)
    sweep = budget_sweep(cost)
    deep = depths(cost)
    rec.doc.update({"device": cost.device.name, "profile": "cudnn", "nominal_bytes": NOMINAL,
           "usable_bytes": USABLE, "batch": 16, "image": 227, "zoo_batch32": nets,
           "resnet152_batch32_budget_sweep": sweep, "deepest_resnet": deep,
           "paper": {"deepest_resnet_k40c": 2500, "ratio_to_frameworks": 3.2432,
                     "release_code_deepest": "testing/residual_imagenet_max.cpp: stages "
                                             "(6, 32, 788, 6), ResNet-2498"}})
    print(f"wrote {rec.write(OUT, indent=2)}")


if __name__ == "__main__":
    main()
