"""The prefetch depth `pyd4j tune --speed` chooses, against every other depth, on loaders of four shapes.

    .venv/bin/python benchmarks/prefetch_depth.py [--rounds 3] [--epochs 8] [--loaders even-fast,...]
        [--out benchmarks/results/prefetch_depth.json]

The job is tests/fixtures/java SpeedJob's MLP (batch 64) trained with fit() on its own iterator whose
asyncSupported() is false, so DL4J does not prefetch it, for `--epochs` epochs of 32 batches. Its
next() sleeps (a loader waiting on disk: no CPU), in times set from the compute time per iteration C
measured by the agent at the start of the run:

- even-fast: every batch 0.5 C (the loader keeps up);
- even-slow: every batch 1.5 C (the loader is the bottleneck: no depth can hide it);
- uneven-fast: 1 ms, and every 8th batch 3 C more (keeps up on average: the slow batches stall a short queue);
- uneven-slow: 0.9 C, and every 4th batch 2 C more (slower than C on average).

Per loader: one probe run under the agent without prefetch, from which the tuner's own rule
(`pyd4j.profile.speed.prefetch_candidate`) chooses a depth; then `--rounds` rounds of runs at every depth of
the grid (none, 1, 2, 3, 4, 6, 8, and the chosen one), the order rotated each round so that drift
falls on every depth alike. Reported: iterations/s per depth (median, min-max), the best depth, and the
chosen depth's median over the best's, over depth 2 (DL4J's own) and over no prefetch.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from harness import RESULTS, Recorder, median_range, order, ratios
from harness.speedjobs import FIXTURES_JAR
from harness.speedjobs import command as speed_job
from pyd4j.profile.speed import MAX_PREFETCH, Change, Setup, job_runner, prefetch_candidate, probe_of
from pyd4j.profile.timesplit import time_split

GRID = (0, 1, 2, 3, 4, 6, 8)   # 0: no prefetch (fit() calls next() on the training thread)


def command(epochs: int, options: list[str]) -> list[str]:
    """The MLP for `epochs` epochs on the CPU's build with MKL, as the speed corpus runs it."""
    return speed_job("mlp", 0, [f"epochs={epochs}", *options], [])


def loaders(compute_ms: float) -> dict[str, list[str]]:
    c = compute_ms
    return {
        "even-fast": [f"slow-data={max(1, round(0.5 * c))}"],
        "even-slow": [f"slow-data={max(1, round(1.5 * c))}"],
        "uneven-fast": ["slow-data=1", f"data-spike=8:{max(1, round(3 * c))}"],
        "uneven-slow": [f"slow-data={max(1, round(0.9 * c))}", f"data-spike=4:{max(1, round(2 * c))}"],
    }


def setup(depth: int) -> Setup:
    if depth == 0:
        return Setup()
    return Setup((Change("prefetch", "none", f"queue of {depth}", "", agent=(f"prefetch={depth}",)),))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=8, help="epochs of 32 batches a run")
    ap.add_argument("--loaders", default="even-fast,even-slow,uneven-fast,uneven-slow",
                    help="the loaders to measure (comma-separated)")
    ap.add_argument("--out", type=Path, default=RESULTS / "prefetch_depth.json")
    args = ap.parse_args()
    wanted = [x for x in args.loaders.split(",") if x]
    unknown = sorted(set(wanted) - set(loaders(1.0)))
    if unknown:
        raise SystemExit(f"--loaders: unknown {', '.join(unknown)}; known: {', '.join(loaders(1.0))}")
    if not FIXTURES_JAR.exists():
        raise SystemExit(f"{FIXTURES_JAR} is not built; run `make setup`")
    os.environ["OMP_NUM_THREADS"] = "1"
    rec = Recorder("prefetch_depth")
    tmp = Path(tempfile.mkdtemp(prefix="prefetch-depth-"))

    # the compute time per iteration, from the agent's split of a run whose loader costs nothing (three
    # times as long as the others, so that the JIT's first iterations weigh little)
    run = job_runner(command(3 * args.epochs, ["slow-data=0"]), tmp / "calibrate")
    m = run(Setup(), "calibrate")
    per = (time_split(m.timeline) or {}).get("ms_per_iteration") or {}
    compute = sum(per.get(k, 0.0) for k in ("forward", "backward", "updater", "outside"))
    if not m.ok or compute <= 0:
        raise SystemExit(f"the calibration run measured no compute time: {m.why}")
    print(f"compute per iteration: {compute:.2f} ms", flush=True)

    rows: dict[str, dict] = {}
    for name, options in loaders(compute).items():
        if name not in wanted:
            continue
        runner = job_runner(command(args.epochs, options), tmp / name)
        probe = probe_of(runner(Setup(), "probe"))
        change, why = prefetch_candidate(probe)
        chosen = int(change.agent[0].split("=")[1]) if change else 0
        split = probe.time_split or {}
        rows[name] = {"options": options, "chosen": chosen, "why": change.why if change else why,
                      "probe": {"data_ms": (split.get("ms_per_iteration") or {}).get("data"),
                                "data_ms_quantiles": split.get("data_ms_quantiles"),
                                "data_share": (split.get("share") or {}).get("data")},
                      "runs": {str(d): [] for d in sorted(set(GRID) | {chosen})}, "_runner": runner}
        print(f"{name}: {options} -> depth {chosen} ({rows[name]['why'][:160]})", flush=True)

    for r in range(args.rounds):
        for name, row in rows.items():
            for d in order(sorted(int(d) for d in row["runs"]), r, rotate=True):
                m = row["_runner"](setup(d), f"d{d}")
                row["runs"][str(d)].append(round(m.iterations_per_s, 2) if m.ok and m.iterations_per_s else None)
        _write(rec, args.out, rows, compute, args)
        print(f"round {r + 1} of {args.rounds} done", flush=True)
    _write(rec, args.out, rows, compute, args)


def _summary(row: dict) -> dict:
    """Medians per depth; the chosen depth against the best, depth 2 and none as the median of the
    per-round ratios (runs of one round are minutes apart at most, so drift cancels within a round)."""
    med = {d: statistics.median(v) for d, v in ((d, [x for x in xs if x]) for d, xs in row["runs"].items()) if v}
    if not med:
        return {}
    best = max(med, key=med.get)
    chosen = str(row["chosen"])
    out = {"median_iterations_per_s": {d: round(v, 2) for d, v in med.items()},
           "range": {d: [min(x for x in xs if x), max(x for x in xs if x)] for d, xs in row["runs"].items() if any(xs)},
           "best": int(best)}

    def paired(a: str, b: str) -> dict | None:
        return median_range(ratios(row["runs"][a], row["runs"][b]))

    if chosen in med:
        out["chosen_over_best"] = paired(chosen, best)
        out["chosen_over_depth2"] = paired(chosen, "2")
        out["chosen_over_none"] = paired(chosen, "0")
        out["chosen_within_3pct_of_best"] = bool(out["chosen_over_best"]) and out["chosen_over_best"]["median"] >= 0.97
    return out


def _write(rec: Recorder, path: Path, rows: dict, compute: float, args) -> None:
    loaders_out = {}
    for name, row in rows.items():
        loaders_out[name] = {k: v for k, v in row.items() if not k.startswith("_")} | _summary(row)
    within = [r.get("chosen_within_3pct_of_best") for r in loaders_out.values() if "chosen_within_3pct_of_best" in r]
    rec.doc.update({
        "meta": {"network": "SpeedJob mlp, batch 64", "epochs_per_run": args.epochs, "rounds": args.rounds,
                 "grid": list(GRID), "max_prefetch": MAX_PREFETCH, "compute_ms_per_iteration": round(compute, 2),
                 "omp_threads": 1},
        "loaders": loaders_out,
        "summary": {"chosen_within_3pct_of_best": f"{sum(within)} of {len(within)}"}})
    rec.write(path)


if __name__ == "__main__":
    main()
