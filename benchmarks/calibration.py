"""Simulated vs published measured training throughput; fits the K40c compute efficiency.

The published figures are listed, with their sources, under `published` of a device entry in
pyd4j/sched/devices.json (k40c; k80 as a cross-check). Each is compared with the simulated time
of the same network at the same batch and input size under the device's profile, with ample
memory: the time-optimised superneurons plan under the device's memory, which must run at the
infinite-memory time (nothing offloaded or recomputed, fastest convolution algorithms), or this
script stops. What is simulated follows what was measured (`measures`):

- `forward_backward` (Torch cnn-benchmarks): forward + backward steps only -- no weight update,
  no copy of the input batch (the script times model:forward and model:backward on a batch
  already on the device);
- `iteration` (Caffe): the whole simulated iteration, update and input copy included.

Each figure is reported twice: at the datasheet default efficiency (`compute_efficiency`, what
the profile used before it was fitted) and at the profile's efficiency now; "within 25%" means
simulated / published img/s in [0.75, 1.25].

`--fit`: fit the k40c `efficiency` (one scalar) to the figures marked `"fit": true`, minimising
the sum of squared log ratios of simulated to published img/s (scipy's bounded
minimize_scalar: the time is not exactly proportional to 1 / efficiency, memory-bound steps do
not change), and write it, with a `calibration` note, into the k40c entry of devices.json; the
k80 profile (same Kepler generation and software era) takes the same efficiency, its figures
are a cross-check and are not fitted. Writes benchmarks/results/calibration.json.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

from harness import RESULTS as RESULTS_DIR
from harness import ROOT, Recorder
from scipy.optimize import minimize_scalar

from pyd4j.sched import costmodel, zoo
from pyd4j.sched.costmodel import CostModel, default_doc
from pyd4j.sched.graph import Graph, LayerType
from pyd4j.sched.policies import make_plan
from pyd4j.sched.simulator import simulate

RESULTS = RESULTS_DIR / "calibration.json"
DEVICES = ROOT / "pyd4j" / "sched" / "devices.json"
FIT_DEVICE = "k40c"
FOLLOWERS = ("k80",)  # profiles that take the fitted efficiency (cross-checks, not fitted)
DATE = "2026-12-03"
TOLERANCE = 0.25


def cost_at(device: str, efficiency: float | None) -> CostModel:
    """The device's cost model, at `efficiency` (None: the profile's own)."""
    if efficiency is None:
        return CostModel.for_device(device)
    return CostModel.for_device(device, {"devices": {device: {"efficiency": efficiency}}})


def simulated_s(g: Graph, cost: CostModel, measures: str) -> tuple[float, float]:
    """(seconds of what was measured, plan overhead vs infinite memory) with ample memory."""
    r = simulate(make_plan(g, "superneurons", cost, cache=True), cost, arena=False)
    if r.bytes_offloaded or r.recompute_s or r.time_s > r.ideal_time_s * (1 + 1e-9):
        raise SystemExit(f"{g.name} b{g.batch} does not run at infinite-memory speed under "
                         f"the device's memory (overhead {r.time_s / r.ideal_time_s - 1:+.1%})")
    overhead = round(r.time_s / r.ideal_time_s - 1, 12) + 0.0
    if measures == "iteration":
        return r.time_s, overhead
    if measures != "forward_backward":
        raise SystemExit(f"unknown `measures` {measures!r}")
    fwd, bwd, _ = cost.layer_times(g)
    total = 0.0
    for layer in g.layers:
        i = layer.id
        if layer.type is LayerType.DATA:
            continue  # the input is on the device already
        if layer.type is LayerType.CONV:
            best = cost.conv_options(g, i)[0][0]  # cudnn.benchmark picks the fastest
            total += cost.conv_time(g, i, False, best) + cost.conv_time(g, i, True, best)
        else:
            total += fwd[i] + bwd[i]
    return total, overhead


def entries() -> list[tuple[str, dict, Graph]]:
    out = []
    for device, entry in default_doc()["devices"].items():
        for pub in entry.get("published", []):
            out.append((device, pub, zoo.build(pub["model"], batch=pub["batch"],
                                               image=pub.get("image"))))
    return out


def published(pub: dict) -> float:
    """Published img/s: from the printed ms per iteration where there is one."""
    return pub["batch"] / (pub["ms"] / 1e3) if "ms" in pub else pub["img_s"]


def img_s(device: str, pub: dict, g: Graph, efficiency: float | None) -> tuple[float, float]:
    t, overhead = simulated_s(g, cost_at(device, efficiency), pub.get("measures", "iteration"))
    return pub["batch"] / t, overhead


def fit(rows: list[tuple[str, dict, Graph]]) -> tuple[float, dict[str, float]]:
    """Efficiency minimising sum(log(simulated / published img/s)^2) over the fit figures."""
    chosen = [(d, p, g) for d, p, g in rows if d == FIT_DEVICE and p.get("fit")]
    if not chosen:
        raise SystemExit(f"no published figure of {FIT_DEVICE} is marked \"fit\": true")

    def loss(eff: float) -> float:
        return sum(math.log(img_s(d, p, g, eff)[0] / published(p)) ** 2 for d, p, g in chosen)

    res = minimize_scalar(loss, bounds=(0.02, 1.0), method="bounded",
                          options={"xatol": 1e-6})
    eff = float(f"{res.x:.4g}")
    ratios = {f"{p['model']} b{p['batch']}": img_s(d, p, g, eff)[0] / published(p)
              for d, p, g in chosen}
    return eff, ratios


def write_efficiency(device: str, efficiency: float, note: str) -> None:
    """Set `efficiency` and the `calibration` note of a devices.json entry, keeping the file's
    layout (the entry's first line holds its numbers; its `calibration` line closes it)."""
    lines = DEVICES.read_text().splitlines()
    start = next(k for k, line in enumerate(lines) if line.lstrip().startswith(f'"{device}":'))
    end = next(k for k in range(start, len(lines)) if '"calibration":' in lines[k])
    lines[start], n = re.subn(r'"efficiency": [0-9.eE+-]+', f'"efficiency": {efficiency}',
                              lines[start])
    if n != 1:
        raise SystemExit(f"devices.json: the {device} line has no efficiency to replace")
    lines[end] = re.sub(r'"calibration": ".*"(\},?)$',
                        lambda m: f'"calibration": {json.dumps(note)}{m.group(1)}', lines[end])
    DEVICES.write_text("\n".join(lines) + "\n")
    json.loads(DEVICES.read_text())  # still valid


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fit", action="store_true",
                    help=f"fit the {FIT_DEVICE} efficiency and write it into devices.json")
    args = ap.parse_args()
    rec = Recorder("calibration")
    if Path(costmodel.__file__).resolve().parent / "devices.json" != DEVICES:
        sys.exit(f"pyd4j is imported from {Path(costmodel.__file__).parent}, not this checkout; "
                 "run with PYTHONPATH=.")
    doc = default_doc()
    before = doc["compute_efficiency"]
    rows = entries()
    if args.fit:
        eff, ratios = fit(rows)
        fitted = [f"{p['model']} b{p['batch']}" for d, p, _ in rows
                  if d == FIT_DEVICE and p.get("fit")]
        residuals = ", ".join(f"{k} {v:.3f}" for k, v in ratios.items())
        note = (f"compute efficiency {eff} fitted {DATE} by benchmarks/calibration.py --fit on "
                f"{' and '.join(fitted)} (the published Torch cnn-benchmarks K40c figures above: "
                "forward + backward, cuDNN 5.0, batch 16), minimising the sum of squared log "
                "ratios of simulated to published img/s with ample memory; residuals "
                f"(simulated / published img/s): {residuals}. Not fitted, reported in "
                "benchmarks/results/calibration.json: VGG-16 (suspect figure), the grouped "
                f"AlexNet and the CaffeNet figures. Before the fit: the datasheet default {before}")
        write_efficiency(FIT_DEVICE, eff, note)
        for dev in FOLLOWERS:
            write_efficiency(dev, eff, f"compute efficiency {eff} taken from the {FIT_DEVICE} "
                             f"fit ({DATE}; same Kepler generation, same Torch benchmark script); "
                             "its published figures are a cross-check, not fitted")
        costmodel._DEFAULT = None  # reload the file just written
        doc = default_doc()
        print(f"{FIT_DEVICE} efficiency fitted: {eff} (residuals {residuals})")
    out = []
    for device, pub, g in entries():
        eff_now = CostModel.for_device(device).efficiency
        sim0, _ = img_s(device, pub, g, before)
        sim1, overhead = img_s(device, pub, g, None)
        pub_img_s = published(pub)
        r0, r1 = sim0 / pub_img_s, sim1 / pub_img_s
        figure = {k: v for k, v in pub.items() if k not in ("note", "source")}
        out.append({"device": device, **figure,
                    "published_img_s": pub_img_s,
                    "efficiency_before": before, "simulated_img_s_before": sim0,
                    "ratio_before": r0, "within_25pct_before": abs(r0 - 1) <= TOLERANCE,
                    "efficiency": eff_now, "simulated_img_s": sim1, "ratio": r1,
                    "within_25pct": abs(r1 - 1) <= TOLERANCE, "plan_overhead": overhead,
                    "note": pub["note"], "source": pub["source"]})
        print(f"{device} {pub['model']} b{pub['batch']} ({pub.get('measures', 'iteration')}): "
              f"published {pub_img_s:.1f} img/s; simulated {sim0:.1f} ({r0:.2f}x) at "
              f"efficiency {before}, {sim1:.1f} ({r1:.2f}x) at {eff_now}"
              f"{'' if abs(r1 - 1) <= TOLERANCE else '  OUTSIDE 25%'}")
    fitted = doc["devices"][FIT_DEVICE]
    rec.doc.update({
        "tolerance": TOLERANCE, "ratio": "simulated / published img/s",
        "fit": {"device": FIT_DEVICE, "efficiency": fitted.get("efficiency"),
                "efficiency_before": before, "calibration": fitted.get("calibration")},
        "comparisons": out})
    rec.write(RESULTS)


if __name__ == "__main__":
    main()
