"""The `speed` document of `pyd4j tune --speed` and its human table."""

from __future__ import annotations

import time

from pyd4j.profile import ab
from pyd4j.profile.speed_setup import Setup


def speed_doc(final: ab.Comparison | None, rows: list[dict], trials: list[dict], verdict: str, runs: list[dict],
              started: float, kept: Setup | None = None, note: str | None = None) -> dict:
    """The `speed` part of the document: the verdict, what to paste, every trial and run."""
    paste = {"environment": {}, "jvm_options": [], "code": [], "maven": []}
    for c in (kept.changes if kept else ()):
        paste["environment"].update({k: v for k, v in c.env})
        paste["jvm_options"] += list(c.jvm)
        if c.maven:
            paste["maven"].append(c.maven)
        elif c.agent:
            paste["code"].append(c.paste)
    fd = final.to_dict() if final else None
    failed = [{k: r.get(k) for k in ("side", "setup", "why", "run_dir")} for r in runs[1:] if not r["ok"]]
    return {"verdict": verdict, "failed_runs": failed, "ratio": fd["ratio"] if fd else None, "interval": fd["interval"] if fd else None,
            "changes": rows, "tried": trials, "paste": paste, "runs": len(runs),
            "extra_runs": max(0, len(runs) - 1), "run_log": runs, "wall_s": round(time.monotonic() - started, 1),
            "method": "alternated runs; Hodges-Lehmann ratio with the exact Mann-Whitney 95% interval",
            "note": note}


def print_speed(doc: dict) -> None:
    """The human table of a speed tune: each trial, then the kept changes and what to paste."""
    from pyd4j.output import print_table  # noqa: PLC0415

    s = doc["speed"]

    def interval(row: dict) -> str:
        iv = row.get("interval")
        return "-" if not iv else f"{iv[0]:.3f}-{iv[1]:.3f}" if iv[1] is not None else f"{iv[0]:.3f}-inf"

    probe = doc.get("probe") or {}
    spark = doc.get("spark_cluster")
    cores_each = spark and f"{spark['executor_cores']} core{'s' if spark['executor_cores'] != 1 else ''} each"
    where = (f"the sum over its executors ({cores_each}) on {spark['master']}" if spark
             else f"on {doc.get('cores')} cores")
    print(f"job as it is: {probe.get('iterations_per_s') or 0:.3g} iterations/s {where}"
          + (f"; ND4J: {probe['nd4j']}" if probe.get("nd4j") else ""))
    if probe.get("time_split"):
        from pyd4j.profile.timesplit import describe  # noqa: PLC0415

        print(describe(probe["time_split"]))
    if probe.get("prefetch_not_tried"):
        print(f"prefetch not tried: {probe['prefetch_not_tried']}")
    if probe.get("build_not_tried"):
        print(f"nd4j-native build not tried: {probe['build_not_tried']}")
    if probe.get("mkl_not_tried"):
        print(f"MKL not tried: {probe['mkl_not_tried']}")
    if probe.get("heap_not_tried"):
        print(f"heap not tried: {probe['heap_not_tried']}")
    if probe.get("explicit_gc_not_tried"):
        print(f"-XX:+DisableExplicitGC not tried: {probe['explicit_gc_not_tried']}")
    if s["tried"]:
        print_table("pyd4j tune --speed: changes tried (after/before iterations per second)",
                    ["setting", "after", "on top of", "verdict", "ratio", "95% interval", "runs"],
                    [[t["setting"], t["after"], t["on_top_of"], t["verdict"],
                      "-" if t["ratio"] is None else f"{t['ratio']:.3f}", interval(t), t["runs"]] for t in s["tried"]])
    if s["verdict"] == "verified":
        print(f"verified: {s['ratio']:.3f}x iterations/s (95% interval {interval(s)}) with:")
        for c in s["changes"]:
            print(f"  {c['setting']}: {c['before']} -> {c['after']}  ({c['reason']})")
        p = s["paste"]
        if p["environment"]:
            print("environment:  " + " ".join(f"{k}={v}" for k, v in p["environment"].items()))
        if p["jvm_options"]:
            print("JVM options:  " + " ".join(p["jvm_options"]))
        if p.get("spark_submit"):
            print("spark-submit: " + " ".join(p["spark_submit"]))
        for line in p["code"]:
            print("code:         " + line)
        for snippet in p.get("maven", []):
            print("Maven (pom.xml):\n" + "\n".join("  " + ln for ln in snippet.splitlines()))
    else:
        print(f"{s['verdict']}" + (f": {s['note']}" if s.get("note") else
                                   ": no change was proved faster by the A/B; nothing is recommended"))
    for r in s.get("failed_runs") or []:
        print(f"warning: a run of {r['setup']} failed ({r['why']}); the A/B ran it again (a second failure of the "
              f"same setting counts it as breaking the job); its output: {r['run_dir']}")
    if doc.get("error"):
        print(f"error: {doc['error']}")
    budget = doc.get("budget") or {}
    if budget.get("untried"):
        print(f"not tried, the budget was spent first: {', '.join(budget['untried'])}")
    limits = ", ".join(x for x in (f"{budget['runs']} runs" if budget.get("runs") else "",
                                   f"{budget['minutes']:g} minutes" if budget.get("minutes") else "") if x)
    print(f"cost: {s['extra_runs']} runs after the first, {s['wall_s']:.0f} s"
          + (f" of a budget of {limits}" + (f" (spent: {budget['spent']})" if budget.get("spent") else "") if limits else "")
          + f"; runs in {doc['out']}")
    if doc.get("window"):
        print(f"window: {doc['window']['text']}")
