"""Deepest trainable ResNet on a 12 GB K40c profile (batch 16, 227x227, SGD momentum state on
the device), per policy, next to the SuperNeurons paper's claims.

Writes benchmarks/results/depth.json.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from pyd4j.sched.costmodel import CostModel
from pyd4j.sched.policies import POLICIES
from pyd4j.sched.search import max_resnet_depth

OUT = Path(__file__).parent / "results" / "depth.json"


def main() -> None:
    cost = CostModel.for_device("k40c")
    rows = {}
    for policy in POLICIES:
        t = time.perf_counter()
        r = max_resnet_depth(policy, cost, batch=16, image=227)
        rows[policy] = {"depth": r.value, "peak_bytes": r.result.peak_bytes,
                        "time_s": r.result.time_s, "overhead": r.result.overhead,
                        "search_s": time.perf_counter() - t, "plans_evaluated": r.evaluations}
        print(policy, rows[policy])
    doc = {"device": cost.device.name, "capacity_bytes": cost.device.memory_bytes, "batch": 16,
           "image": 227, "policies": rows,
           "ratio_to_baseline": rows["superneurons"]["depth"] / rows["baseline"]["depth"],
           "ratio_to_liveness": rows["superneurons"]["depth"] / rows["liveness"]["depth"],
           "paper": {"deepest_resnet_k40c": 2500, "ratio_to_frameworks": 3.2432}}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
