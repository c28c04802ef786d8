"""Simulated vs published measured training throughput on the K40c profile.

The published figures are listed, with their sources, under `published` of the k40c entry in
pyd4j/sched/devices.json; each is compared with the simulated iteration time of the same network
at the same batch (time-optimised superneurons plan under the device's memory, which with ample
memory is the infinite-memory time). Writes benchmarks/results/calibration.json.
"""

from __future__ import annotations

import json
from pathlib import Path

from pyd4j.sched import zoo
from pyd4j.sched.costmodel import CostModel, default_doc
from pyd4j.sched.policies import make_plan
from pyd4j.sched.simulator import simulate

RESULTS = Path(__file__).parent / "results" / "calibration.json"


def main() -> None:
    rows = []
    for device, entry in default_doc()["devices"].items():
        for pub in entry.get("published", []):
            cost = CostModel.for_device(device)
            g = zoo.build(pub["model"], batch=pub["batch"], image=pub.get("image"))
            r = simulate(make_plan(g, "superneurons", cost, cache=True), cost)
            sim = pub["batch"] / r.time_s
            rows.append({"device": device, **pub, "simulated_img_s": sim,
                         "simulated_over_published": sim / pub["img_s"]})
            print(f"{device} {pub['model']} b{pub['batch']}: published {pub['img_s']:.1f} img/s, "
                  f"simulated {sim:.1f} ({sim / pub['img_s']:.2f}x)")
    RESULTS.write_text(json.dumps({"comparisons": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
