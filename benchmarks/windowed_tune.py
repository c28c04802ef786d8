"""Tune a job that runs for hours, in minutes: `pyd4j tune`, `tune --speed` and `tune --timeout` at their
defaults (each run ended at its measurement window) against full-length tunes (`--window full`), on long
DL4J jobs (tests/fixtures LongJob, an MLP trained in epochs of 100 batches): healthy, leaking (32 KiB kept
per iteration) and one with a bad setting (System.gc() after every iteration); then three more that the
tunes were not developed on: a wide network (1,024 hidden units, 200 batches an epoch), a slow leak (4 KiB
an iteration) and a mild bad setting (System.gc() every 10th iteration), each paced to run for hours; then
two more: deeplearning4j-examples' AdditionModelWithSeq2Seq (a ComputationGraph of two LSTMs, DOUBLE, CPU-bound
with no pause), compiled unchanged from a checkout (`--checkout`) and run for `--seq2seq-epochs` epochs
instead of its 10 (benchmarks/harness/java/WithFields.java sets the public field its author says to tweak),
with a full-length tune of a copy of it (`seq2seq-full`, told apart by an ignored argument); and the
bad-setting job paced like the others (`bad-paced`).

Per job and item: the tune's wall time, exit code and outcome, the limits it recommends, the iterations
each of its runs trained and why its window ended, the leaks it found, and the processes of the job still
running after it (0 expected). Then: the windowed memory limits over the full-length tune's (target within
10%; `--items from-full` gives any job a full-length counterpart at the cost of one whole run: the job run
whole under `pyd4j profile`, as a production run, then `pyd4j tune --from` that run), the job run whole
without pyd4j with the windowed flags (and the environment they assume) inside a memory cgroup of the
recommended container limit (`hold`, target 0 failures), the speed changes found windowed and full-length
on shorter copies of the bad-setting job and of the healthy one (no pause), and a `--timeout` tune (never
"rerun-failed"). ND4J gets one OpenMP thread (2 shared cores). Writes benchmarks/results/windowed_tune.json; rows of items not re-measured are kept.

    .venv/bin/python benchmarks/windowed_tune.py [--iterations 12000] [--parallel 2] [--only healthy,leak]
                                                 [--checkout DIR] [--seq2seq-epochs 240]
                                                 [--items window,full,from-full,hold,speed,speed-full,timeout,plan]
                                                 [--out benchmarks/results/windowed_tune.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from harness import RESULTS, Recorder
from harness.dl4j_examples import PACKAGE, commit_of, compile_jobs
from harness.record import short_commit
from harness.speedjobs import FIXTURES_JAR
from pyd4j.jvm.classpath import classpath
from pyd4j.profile.command import JavaCommand
from pyd4j.units import parse_bytes

OUT = RESULTS / "windowed_tune.json"
CLI = [sys.executable, "-m", "pyd4j.cli"]
LIMITS = {"heap": "-Xmx", "maxbytes": "-Dorg.bytedeco.javacpp.maxbytes=",
          "maxphysicalbytes": "-Dorg.bytedeco.javacpp.maxphysicalbytes=", "direct": "-XX:MaxDirectMemorySize="}
LIMITED = ("import json, sys; from pyd4j.memory.container import run_limited; "
           "r = run_limited(sys.argv[3:], int(sys.argv[1]), timeout=float(sys.argv[2])); "
           "print(json.dumps(r.to_dict(output=True)))")
# the items each job gets, in order
ITEMS = {"healthy": ("window", "full", "hold", "timeout", "plan", "speed"), "leak": ("window", "full"),
         "bad": ("window", "full", "hold", "speed"), "bad-short": ("speed", "speed-full"),
         "healthy-short": ("speed", "speed-full"),
         "wide": ("window", "plan", "speed", "hold"), "slow-leak": ("window", "plan", "speed", "hold"),
         "bad-mild": ("window", "plan", "speed", "hold"), "seq2seq": ("window", "plan", "speed", "hold"),
         "seq2seq-full": ("full",), "bad-paced": ("window", "plan", "speed", "hold")}
# items any job can be given with --items: the recommendation from one whole run under `pyd4j profile`
EXTRA_ITEMS = ("from-full",)
# the job whose full-length tune a windowed tune is compared with (else the job's own from-full row)
FULL_OF = {"healthy": "healthy", "leak": "leak", "bad": "bad", "seq2seq": "seq2seq-full"}
SEQ2SEQ = "org.deeplearning4j.examples.advanced.modelling.seq2seq.AdditionModelWithSeq2Seq"
WITH_FIELDS = Path(__file__).parent / "harness" / "java" / "WithFields.java"


def jobs(iterations: int, seq2seq_classes: Path | None = None, seq2seq_epochs: int = 240) -> dict[str, list[str]]:
    """Each job's command; the iteration counts differ, so each job's processes are told apart."""
    cp = os.pathsep.join([str(FIXTURES_JAR), *classpath()[1:]])
    seq2seq = []
    if seq2seq_classes:
        ex_cp = os.pathsep.join([str(seq2seq_classes), *map(str, classpath())])
        seq2seq = ["java", "-Xmx1g", "-cp", ex_cp, "WithFields", SEQ2SEQ, f"nEpochs={seq2seq_epochs}"]

    def job(mode: str, n: int, *opts: str) -> list[str]:
        hidden = () if any(o.startswith("hidden=") for o in opts) else ("hidden=64",)
        return ["java", "-Xmx1g", "-cp", cp, "org.pyd4j.fixtures.LongJob", mode, str(n), *hidden, *opts]
    return {"healthy": job("healthy", iterations, "pause=40"), "leak": job("leak", iterations + 1, "pause=40", "leak-kib=32"),
            "bad": job("bad", iterations + 2), "bad-short": job("bad", iterations // 6 + 3),
            "healthy-short": job("healthy", iterations // 6 + 4),
            "wide": job("healthy", iterations + 6, "pause=40", "batches=200", "hidden=1024"),
            "slow-leak": job("leak", iterations + 7, "pause=40", "leak-kib=4"),
            "bad-mild": job("bad", iterations + 8, "pause=40", "gc-every=10"),
            "bad-paced": job("bad", iterations + 9, "pause=40"),
            **({"seq2seq": seq2seq, "seq2seq-full": [*seq2seq, "--", "full-length-copy"]} if seq2seq else {})}


def main_part(command: list[str]) -> str:
    """The job's main class and arguments: what tells its processes apart."""
    return " ".join(command[command.index("-cp") + 2:])


def leftovers(command: list[str], since: float) -> list[str]:
    """Processes still running the job (its main class and arguments ending their command line) that were
    started at or after `since` (epoch seconds: the tune's start; a concurrent run of the same job started
    before it is not the tune's), as "name: main class and arguments" (no paths)."""
    key = main_part(command)
    out = []
    for p in psutil.process_iter(["cmdline", "create_time", "name"]):
        try:
            line = " ".join(p.info["cmdline"] or [])
            if line.endswith(key) and p.info["create_time"] >= since - 1 and p.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{p.info['name']}: {key}")
        except psutil.Error:
            pass
    return out


def limits_of(recommended: list[str] | None) -> dict[str, int | None]:
    out: dict[str, int | None] = {k: None for k in LIMITS}
    for arg in recommended or []:
        for name, prefix in LIMITS.items():
            if arg.startswith(prefix):
                out[name] = parse_bytes(arg[len(prefix):])
    return out


def tune(name: str, item: str, command: list[str], root: Path) -> dict:
    """One `pyd4j tune` through the command line, as a user runs it; `from-full`: the job run whole under
    `pyd4j profile`, then `pyd4j tune --from` that run (the full-length recommendation, no verifying re-run)."""
    if item == "from-full":
        return from_full(name, command, root)
    opts = {"window": [], "full": ["--window", "full"], "timeout": ["--timeout", "60", "--window", "full"],
            "plan": ["--plan", "superneurons"], "speed": ["--speed"],
            "speed-full": ["--speed", "--window", "full", "--budget-minutes", "240"]}[item]
    out = root / f"{name}-{item}"
    began, started = time.monotonic(), time.time()
    p, doc = cli_json(["tune", "--json", *opts, "--out", str(out), "--", *command])
    row = {"job": name, "item": item, "command": ["pyd4j", "tune", *opts, "--", "<job>"],
           "wall_s": round(time.monotonic() - began, 1), "exit": p.returncode, "left_running": leftovers(command, started)}
    if item.startswith("speed"):
        s = doc.get("speed") or {}
        row.update(verdict=s.get("verdict"), changes=[c["setting"] for c in s.get("changes") or []], ratio=s.get("ratio"),
                   tried=[{k: t.get(k) for k in ("setting", "verdict", "ratio", "runs")} for t in s.get("tried") or []],
                   runs=s.get("runs"), budget=doc.get("budget"), window=doc.get("window"),
                   probe_iterations_per_s=(doc.get("probe") or {}).get("iterations_per_s"))
        return row
    return {**row, **memory_fields(doc, item)}


def cli_json(args: list[str]) -> tuple[subprocess.CompletedProcess, dict]:
    """One pyd4j command with --json: the process and its document."""
    p = subprocess.run([*CLI, *args], capture_output=True, text=True)
    try:
        return p, json.loads(p.stdout)
    except json.JSONDecodeError:
        return p, {"error": "no JSON document", "stderr_tail": p.stderr[-1500:]}


def from_full(name: str, command: list[str], root: Path) -> dict:
    """The job run whole under `pyd4j profile` (as a production run), then `pyd4j tune --from` it."""
    run_dir = root / f"{name}-profile"
    began, started = time.monotonic(), time.time()
    prof, _ = cli_json(["profile", "--json", "--no-report", "--out", str(run_dir), "--", *command])
    profile_wall = time.monotonic() - began
    p, doc = cli_json(["tune", "--json", "--from", str(run_dir), "--out", str(root / f"{name}-from-full")])
    row = {"job": name, "item": "from-full", "command": ["pyd4j", "profile", "--", "<job>", "then",
                                                         "pyd4j", "tune", "--from", "<run>"],
           "wall_s": round(time.monotonic() - began, 1), "profile_wall_s": round(profile_wall, 1),
           "profile_exit": prof.returncode, "exit": p.returncode, "left_running": leftovers(command, started)}
    return {**row, **memory_fields(doc, "from-full")}


def memory_fields(doc: dict, item: str) -> dict:
    """What a memory tune's document says: per side, the limits, the leaks found, the plan."""
    sides = {}
    for side in ("before", "after"):
        d = doc.get(side) or {}
        sides[side] = {"iterations": d.get("iterations"), "stopped_by": d.get("stopped_by"), "wall_s": d.get("wall_s"),
                       "findings": d.get("findings"), "window": ((d.get("window") or {}).get("decision") or {}).get("reason"),
                       "whole_job": (d.get("scope") or {}).get("whole_job")}
    row = dict(outcome=doc.get("outcome"), verified_for=doc.get("verified_for"), recommended=doc.get("recommended"),
               recommended_environment=doc.get("recommended_environment") or {}, limits=limits_of(doc.get("recommended")),
               container_bytes=doc.get("container_bytes"), sides=sides,
               leak_found=any(k.startswith("leak") for s in sides.values() for k in s["findings"] or []),
               not_verified_because=doc.get("not_verified_because"), error=doc.get("error"))
    if item == "plan":
        plan = doc.get("plan") or {}
        row["plan"] = {"applied": plan.get("applied"), "policy": plan.get("policy"),
                       "predicted_peak_bytes": plan.get("predicted_peak_bytes"),
                       "not_applied": (doc.get("after") or {}).get("plan_not_applied")}
    return row


def hold(name: str, command: list[str], window_row: dict, timeout_s: float) -> dict:
    """The whole job without pyd4j, with the windowed tune's flags, in a cgroup of its container limit."""
    row = {"job": name, "item": "hold", "command": ["<job with the windowed flags>", "in a cgroup of container_bytes"]}
    if not window_row.get("recommended") or not window_row.get("container_bytes"):
        return {**row, "skipped": "the windowed tune recommended no flags"}
    argv = JavaCommand.parse(command).argv(window_row["recommended"], drop_memory_flags=True)
    began = time.monotonic()
    # the environment the flags assume, as the tune's re-runs had it
    env = {**os.environ, **(window_row.get("recommended_environment") or {})}
    out = subprocess.run([sys.executable, "-c", LIMITED, str(window_row["container_bytes"]), str(timeout_s), *argv],
                         capture_output=True, text=True, check=True, env=env).stdout
    r = json.loads(out.splitlines()[-1])
    done, asked = progress(command, r["stdout"])
    return {**row, "wall_s": round(time.monotonic() - began, 1), "exit": r["exit_code"],
            "iterations_done": done, "iterations_asked": asked,
            "limit_bytes": r["limit_bytes"], "peak_bytes": r["peak_bytes"], "oom_killed": r["oom_killed"],
            "ok": bool(r["ok"] and done and done >= asked), "ending": r["description"],
            "windowed_outcome": window_row.get("outcome"), "stderr_tail": r["stderr"][-600:] if not r["ok"] else ""}


def progress(command: list[str], stdout: str) -> tuple[int | None, int]:
    """(what the job finished, what it was asked): LongJob's iterations, or the example's epochs."""
    if SEQ2SEQ in command:
        epochs = [int(e) for e in re.findall(r"EPOCH (\d+) COMPLETE", stdout)]
        asked = int(next(a for a in command if a.startswith("nEpochs=")).split("=")[1])
        return (max(epochs) + 1 if epochs else None), asked
    done = re.search(r"FIXTURE .*?iterations=(\d+)", stdout)
    return (int(done.group(1)) if done else None), int(command[command.index("org.pyd4j.fixtures.LongJob") + 2])


def run_job(name: str, command: list[str], items: list[str], root: Path, record, timeout_s: float,
            earlier: dict[str, dict] | None = None) -> None:
    rows: dict[str, dict] = dict(earlier or {})   # `--window-from`: the window a hold runs the flags of
    for item in items:
        print(f"{name}: {item} ...", flush=True)
        if item == "hold":
            row = hold(name, command, rows.get("window") or {}, timeout_s)
        else:
            row = tune(name, item, command, root)
        rows[item] = row
        record(row)
        print(f"{name}: {item}: exit {row.get('exit')}, {row.get('outcome') or row.get('verdict') or row.get('ending')}, "
              f"{row.get('wall_s')} s", flush=True)


def summary(rows: list[dict]) -> dict:
    by = {(r["job"], r["item"]): r for r in rows}
    agree = {}
    for job in sorted({r["job"] for r in rows}):
        w = by.get((job, "window"))
        f = by.get((FULL_OF.get(job, job), "full")) or by.get((job, "from-full"))
        if not (w and f):
            continue
        ratios = {k: round(w["limits"][k] / f["limits"][k], 3) for k in LIMITS if w["limits"].get(k) and f["limits"].get(k)}
        if w.get("container_bytes") and f.get("container_bytes"):
            ratios["container"] = round(w["container_bytes"] / f["container_bytes"], 3)
        sized = bool(w["sides"]["before"].get("whole_job")) and w["outcome"] == "verified"
        # limits are compared where the windowed tune sized them for the whole job; else it claims none
        agree[job] = {"window_over_full": ratios, "window_sized_for_the_whole_job": sized,
                      "within_10pct": all(0.9 <= v <= 1.1 for v in ratios.values()) if sized else None,
                      "window_wall_s": w["wall_s"], "full_wall_s": f["wall_s"],
                      "window_outcome": w["outcome"], "full_outcome": f["outcome"], "full_item": f["item"],
                      "leak_found": {"window": w["leak_found"], "full": f["leak_found"]}}
    speed = {f"{r['job']} {r['item']}": {"changes": r["changes"], "ratio": r["ratio"], "wall_s": r["wall_s"],
                                         "runs": r["runs"]} for r in rows if r["item"].startswith("speed")}
    return {
        "memory_window_vs_full": agree,
        "tune_wall_s": {f"{r['job']} {r['item']}": r["wall_s"] for r in rows if "wall_s" in r and r["item"] != "hold"},
        "hold": {r["job"]: {"ok": r.get("ok"), "oom_killed": r.get("oom_killed"), "peak_over_limit": round(
            r["peak_bytes"] / r["limit_bytes"], 3) if r.get("peak_bytes") and r.get("limit_bytes") else None}
            for r in rows if r["item"] == "hold"},
        "speed": speed,
        "timeout_failed": [r["job"] for r in rows if r["item"] == "timeout" and r.get("outcome") == "rerun-failed"],
        "left_running": sum(len(r.get("left_running") or []) for r in rows),
        "targets": {"tune_wall_s_at_most": 600, "limits_within": 0.10, "hold_failures": 0, "left_running": 0},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=12000, help="iterations of the long jobs")
    parser.add_argument("--parallel", type=int, default=2, help="jobs at once")
    parser.add_argument("--only", default="", help="comma-separated jobs: " + ", ".join(ITEMS))
    parser.add_argument("--items", default="", help="comma-separated items (default: each job's all)")
    parser.add_argument("--hold-timeout", type=float, default=3600, help="seconds a whole run may take")
    parser.add_argument("--resummarise", action="store_true", help="recompute the summary of the result file")
    parser.add_argument("--out", type=Path, default=OUT, help="the result file (rows of earlier runs kept)")
    parser.add_argument("--checkout", type=Path, help="a deeplearning4j-examples checkout (for the seq2seq jobs)")
    parser.add_argument("--seq2seq-epochs", type=int, default=240, help="epochs of AdditionModelWithSeq2Seq")
    parser.add_argument("--window-from", type=Path, help="an earlier result file whose window rows the holds take")
    args = parser.parse_args()
    out = args.out
    if args.resummarise:
        doc = json.loads(out.read_text())
        doc["summary"] = summary(doc["rows"])
        rec = Recorder.amending(out, doc)
        hide_paths(rec)
        rec.write(out, indent=2)
        print(json.dumps(doc["summary"], indent=2))
        return
    os.environ["OMP_NUM_THREADS"] = "1"
    chosen = [j for j in ITEMS if not args.only or j in args.only.split(",")]
    if any(j.startswith("seq2seq") for j in chosen) and not args.checkout:
        raise SystemExit("the seq2seq jobs need --checkout: a deeplearning4j-examples checkout")
    wanted = set(filter(None, args.items.split(",")))
    earlier = json.loads(out.read_text()) if out.exists() else {"rows": []}
    rows: list[dict] = []
    lock = threading.Lock()
    # rows added to an earlier result file amend it: its run record stays the first measurement's
    rec = Recorder.amending(out, earlier) if earlier.get("run") else Recorder("windowed_tune")
    hide_paths(rec)

    def record(row: dict) -> None:
        with lock:
            row["when"] = time.strftime("%Y-%m-%dT%H:%M:%S")
            row["commit"] = short_commit()
            row["load_average"] = [round(x, 2) for x in os.getloadavg()]
            rows.append(row)
            again = {(r["job"], r["item"]) for r in rows}
            kept = [r for r in earlier["rows"] if (r["job"], r["item"]) not in again]
            write(rec, kept + rows, args, commands)

    with tempfile.TemporaryDirectory(prefix="windowed-tune-") as tmp:
        classes = Path(tmp) / "seq2seq-classes" if args.checkout else None
        if classes:   # the example (and what it uses) with the launcher that sets its nEpochs
            compile_jobs(args.checkout, [SEQ2SEQ.removeprefix(PACKAGE)], classes, extra=(WITH_FIELDS,))
        commands = jobs(args.iterations, classes, args.seq2seq_epochs)
        if args.checkout:
            rec.doc["examples_commit"] = commit_of(args.checkout)
        pending = [(j, [i for i in (*ITEMS[j], *EXTRA_ITEMS) if i in wanted] if wanted else list(ITEMS[j]))
                   for j in chosen]
        threads: list[threading.Thread] = []
        for job, items in pending:
            while sum(t.is_alive() for t in threads) >= args.parallel:
                time.sleep(5)
            windows = {r["item"]: r for r in json.loads(args.window_from.read_text())["rows"]
                       if r["job"] == job and r["item"] == "window"} if args.window_from else None
            th = threading.Thread(target=run_job, args=(job, commands[job], items, Path(tmp), record, args.hold_timeout,
                                                        windows))
            th.start()
            threads.append(th)
        for th in threads:
            th.join()
    print(json.dumps(json.loads(out.read_text())["summary"], indent=2))


def hide_paths(rec: Recorder) -> None:
    """This machine's folders (the temporary one, the Python environment, the tree) as labels."""
    rec.hide(sys.prefix, "<venv>")
    rec.hide(Path(__file__).resolve().parents[1], "<tree>")
    rec.hide(tempfile.gettempdir(), "<tmp>")


def write(rec: Recorder, rows: list[dict], args, commands: dict[str, list[str]]) -> None:
    rec.doc.update({
        "omp_threads": 1, "iterations": args.iterations,
        "jobs": {k: main_part(v) for k, v in commands.items()},
        "summary": summary(rows), "rows": rows})
    rec.write(args.out, indent=2)


if __name__ == "__main__":
    main()
