"""Live heap as the profiler reports it against `jcmd GC.class_histogram`, on the corpus LSTM job
(tests/fixtures/java CorpusJob lstm: LSTM 8 -> 32 -> 4 classes, 20 steps, batch 16, fresh random
sequences), with the agent's defaults.

After `--seconds` of training, right after the agent's next inspection: `jcmd GC.class_histogram` at once (a single full-GC histogram, what a
user would run), then `jcmd GC.run` and, once the agent's next live point says ND4J's deallocators
are done, two more histograms a few seconds apart. Compared with the last live heap the agent
measured before any jcmd, the live heap it reports (peak), and the old measure (heap left after
young collections). Writes benchmarks/results/live_heap.json.

    .venv/bin/python benchmarks/live_heap.py [--seconds 90]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from pyd4j.jvm import classpath, find_java
from pyd4j.jvm.classpath import PROJECT_ROOT
from pyd4j.profile import profile_job
from pyd4j.profile.histogram import read_histogram
from pyd4j.profile.timeline import Timeline

ROOT = Path(__file__).resolve().parent
FIXTURES_JAR = PROJECT_ROOT / "tests" / "fixtures" / "java" / "target" / "pyd4j-fixtures.jar"


def histogram(pid: int) -> tuple[int, int]:
    """(Total, deallocation bookkeeping) of `jcmd <pid> GC.class_histogram`."""
    out = subprocess.run(["jcmd", str(pid), "GC.class_histogram"], check=True, capture_output=True, text=True,
                         timeout=300).stdout
    return read_histogram(out)


def drained_after(run_dir: Path, since_ms: float, deadline_s: float = 300) -> None:
    end = time.monotonic() + deadline_s
    while not any(p["t"] >= since_ms and p.get("offheap_drained") for p in Timeline.load(run_dir).live_points):
        if time.monotonic() > end:
            raise TimeoutError("no drained live point after a jcmd collection")
        time.sleep(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=90)
    args = parser.parse_args()
    cp = os.pathsep.join([str(FIXTURES_JAR), *classpath()[1:]])
    refs: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        run_dir, stop = Path(tmp) / "run", Path(tmp) / "stop"
        started = time.monotonic()

        def on_sample(sample: dict) -> None:
            if "t" in refs or time.monotonic() - started < args.seconds:
                return
            # right after the agent's next inspection, so both measure the same moment of the run
            ready = refs.setdefault("ready", time.time() * 1000)
            timeline = Timeline.load(run_dir)
            if not any(p["t"] >= ready and p.get("heap_drained") for p in timeline.live_points):
                return
            pid = timeline.start["pid"]
            refs["t"] = time.time() * 1000
            refs["single"] = histogram(pid)
            since = time.time() * 1000
            subprocess.run(["jcmd", str(pid), "GC.run"], check=True, capture_output=True, timeout=300)
            refs["after_deallocators"] = []
            for _ in range(2):
                drained_after(run_dir, since)
                since = time.time() * 1000
                refs["after_deallocators"].append(histogram(pid))
            stop.touch()

        env_threads = os.environ.get("OMP_NUM_THREADS")
        os.environ["OMP_NUM_THREADS"] = "1"
        try:
            run = profile_job(["java", "-cp", cp, "org.pyd4j.fixtures.CorpusJob", "lstm", "0", "0", "1", str(stop)],
                              run_dir, on_sample=on_sample, timeout_s=args.seconds + 900)
        finally:
            if env_threads is None:
                os.environ.pop("OMP_NUM_THREADS", None)
            else:
                os.environ["OMP_NUM_THREADS"] = env_threads
        t = run.timeline.until(refs["t"])
    ours = max((p for p in t.live_points if p.get("heap_drained")), key=lambda p: p["t"])
    reference = min(total for total, _ in refs["after_deallocators"])
    objects_reference = min(total - kept for total, kept in refs["after_deallocators"])
    ours_objects = ours["heap_live"] - ours.get("heap_bookkeeping", 0)

    def error(value: float | None) -> float | None:
        return abs(value - reference) / reference if value else None

    result = {
        "benchmark": "live_heap", "job": "org.pyd4j.fixtures.CorpusJob lstm", "seconds": args.seconds,
        "iterations": t.iterations(), "live_points": len(t.live_points),
        "jcmd_histogram_single": refs["single"][0], "jcmd_histogram_single_bookkeeping": refs["single"][1],
        "jcmd_histograms_after_deallocators": [total for total, _ in refs["after_deallocators"]],
        "jcmd_bookkeeping_after_deallocators": [kept for _, kept in refs["after_deallocators"]],
        "reference_bytes": reference,
        # the job's own objects: without ND4J's/JavaCPP's deallocation bookkeeping (pyd4j.profile.histogram)
        "job_objects": ours_objects, "job_objects_reference": objects_reference,
        "job_objects_error": abs(ours_objects - objects_reference) / objects_reference,
        "last_live_heap": ours["heap_live"], "last_live_heap_error": error(ours["heap_live"]),
        "reported_live_heap_peak": t.live_heap_peak(), "reported_live_heap_peak_error": error(t.live_heap_peak()),
        "heap_after_young_gc_peak": t.heap_after_gc_peak(), "heap_after_young_gc_error": error(t.heap_after_gc_peak()),
        "single_histogram_error": error(refs["single"][0]),
        "load_avg_1m": os.getloadavg()[0], "java": find_java().version, "cpus": os.cpu_count(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    out = ROOT / "results" / "live_heap.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
