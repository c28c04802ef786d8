"""SIGTERM at random moments: `pyd4j serve` (two models under a budget that holds one, requests
alternating between them so that evictions write the disk tier) and `pyd4j tune` (the example
LeNet job) are each started --trials times and sent SIGTERM after a random delay. After each: did
it exit, what is left in its own TMPDIR (temp files and directories), and which processes still
carry the trial's mark in their environment (the command, the JVM, a job it started). Result:
benchmarks/results/sigterm.json.

    .venv/bin/python benchmarks/sigterm.py [--trials 100] [--tune-trials 0] [--max-delay 12]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

from harness import RESULTS, ROOT, Recorder
from harness.training import NETWORKS
MARK = "PYD4J_SIGTERM_TRIAL"


def marked(mark: str) -> list[int]:
    """Processes whose environment carries the trial's mark."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if f"{MARK}={mark}".encode() in (d / "environ").read_bytes().split(b"\0"):
                pids.append(int(d.name))
        except OSError:
            continue
    return pids


def _traffic(port: int, stop: threading.Event) -> None:
    """Requests alternating between the two models once the server answers (evictions each time)."""
    bodies = {m: json.dumps({"inputs": [{"name": "input", "shape": [1, 784], "datatype": "FP32",
                                         "data": [0.5] * 784}]}).encode() for m in ("mlp", "lenet")}
    while not stop.is_set():
        for m, body in bodies.items():
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{port}/v2/models/{m}/infer", data=body,
                                             headers={"content-type": "application/json"})
                urllib.request.urlopen(req, timeout=5).read()
            except OSError:
                time.sleep(0.2)


def trial(kind: str, delay: float, work: Path) -> dict:
    mark = uuid.uuid4().hex
    tmp = work / f"tmp-{mark[:8]}"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp), **{MARK: mark})
    port = 0
    if kind == "serve":
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        argv = [sys.executable, "-m", "pyd4j.cli", "serve", "--port", str(port), "--budget", "8m", "--max-batch", "8",
                "--slice-rows", "whole", "--model", f"mlp={NETWORKS / 'mlp.json'}", "--model",
                f"lenet={NETWORKS / 'lenet.json'}"]
    else:
        argv = [sys.executable, "-m", "pyd4j.cli", "tune", "--out", str(work / f"tune-{mark[:8]}"), "--", "java", "-cp",
                f"{ROOT / 'examples/target/pyd4j-examples.jar'}:{ROOT / 'java/target/lib'}/*",
                "org.pyd4j.examples.TrainLeNetSynthetic", "100", "16", "2"]
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL)
    stop = threading.Event()
    if kind == "serve":
        threading.Thread(target=_traffic, args=(port, stop), daemon=True).start()
    time.sleep(delay)
    ended_before = proc.poll() is not None
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=60)
        exited = True
    except subprocess.TimeoutExpired:
        exited, code = False, None
    stop.set()
    time.sleep(1.0)   # a child the command started may take a moment to go after it
    left_procs = marked(mark)
    for pid in left_procs:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    left_files = sorted(p.name for p in tmp.iterdir())
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(work / f"tune-{mark[:8]}", ignore_errors=True)
    return {"kind": kind, "delay_s": round(delay, 2), "ended_before_signal": ended_before, "exited": exited,
            "exit_code": code, "temp_entries_left": left_files, "processes_left": len(left_procs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=100, help="SIGTERMs of pyd4j serve")
    ap.add_argument("--tune-trials", type=int, default=0, help="SIGTERMs of pyd4j tune")
    ap.add_argument("--max-delay", type=float, default=12.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=RESULTS / "sigterm.json")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    rec = Recorder("sigterm")
    work = Path(tempfile.mkdtemp(prefix="pyd4j-bench-sigterm-"))
    rows = []
    try:
        for kind, n in (("serve", args.trials), ("tune", args.tune_trials)):
            for i in range(n):
                rows.append(trial(kind, rng.uniform(0, args.max_delay), work))
                r = rows[-1]
                print(f"{kind} {i}: delay {r['delay_s']} s, exit {r['exit_code']}, temp left "
                      f"{len(r['temp_entries_left'])}, processes left {r['processes_left']}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary = {}
    for kind in ("serve", "tune"):
        mine = [r for r in rows if r["kind"] == kind]
        if mine:
            summary[kind] = {"trials": len(mine), "not_exited": sum(not r["exited"] for r in mine),
                             "temp_entries_left": sum(len(r["temp_entries_left"]) for r in mine),
                             "trials_with_temp_left": sum(bool(r["temp_entries_left"]) for r in mine),
                             "processes_left": sum(r["processes_left"] for r in mine),
                             "ended_before_signal": sum(r["ended_before_signal"] for r in mine),
                             "exit_codes": sorted({str(r["exit_code"]) for r in mine}),
                             # 143: its own exit; -15: the signal before any handler; -6/-11: an abort or a crash
                             "exited_143": sum(r["exit_code"] == 143 for r in mine),
                             "ended_by_the_signal": sum(r["exit_code"] == -15 for r in mine),
                             "aborted": sum(r["exit_code"] in (-6, -11) for r in mine)}
    rec.doc.update(max_delay_s=args.max_delay, seed=args.seed, summary=summary, trials=rows)
    print(json.dumps(summary))
    print(rec.write(args.out))


if __name__ == "__main__":
    main()
