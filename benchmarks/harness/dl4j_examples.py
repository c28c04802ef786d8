"""deeplearning4j-examples jobs, compiled unchanged from a checkout the user gives (the examples are DL4J's
own, Apache 2.0, and are not vendored here), and a job profiled and sized as a user would."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pyd4j.jvm.classpath import classpath
from pyd4j.memory.container import ContainerResult, run_limited
from pyd4j.memory.estimate import Estimate, EstimateError, estimate
from pyd4j.memory.flags import FlagSet, flags

PACKAGE = "org.deeplearning4j.examples."
SOURCES = "dl4j-examples/src/main/java"
CLI = "import sys; from pyd4j.cli import main; main(sys.argv[1:], prog_name='pyd4j')"
GNU_TIME = "/usr/bin/time"


def commit_of(checkout: Path) -> str:
    """The checkout's commit, where it is a git work tree (else what the user said it is)."""
    p = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True)
    return p.stdout.strip() if p.returncode == 0 else "unknown (not a git work tree)"


def compile_jobs(checkout: Path, jobs: list[str], out: Path, extra: tuple[Path, ...] = ()) -> None:
    """javac the jobs (and the sources they use) from the checkout against pyd4j's class path, with `extra`
    sources of our own beside them (a launcher)."""
    src = checkout / SOURCES
    files = [src / (PACKAGE + job).replace(".", "/") for job in jobs]
    missing = [str(f) + ".java" for f in files if not f.with_suffix(".java").exists()]
    if missing:
        raise SystemExit(f"not in the checkout: {', '.join(missing)}; give --checkout a deeplearning4j-examples checkout")
    out.mkdir(parents=True, exist_ok=True)
    cp = os.pathsep.join(str(p) for p in classpath())
    p = subprocess.run(["javac", "-nowarn", "-encoding", "UTF-8", "-d", str(out), "-sourcepath", str(src), "-cp", cp,
                        *map(str, extra), *[str(f.with_suffix(".java")) for f in files]], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"javac failed:\n{p.stderr[-3000:]}")


def pyd4j(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    """The `pyd4j` command of this environment."""
    return subprocess.run([sys.executable, "-c", CLI, *args], capture_output=True, text=True, timeout=timeout)


def run_timed(command: list[str], limit: int, fs: FlagSet, timeout: float,
              cwd: str | None = None) -> tuple[ContainerResult, int | None]:
    """`command` with `fs`'s environment in a cgroup limited to `limit` bytes, under GNU time where present:
    (run_limited's result, VmHWM in bytes or None)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as rss:
        timed = [GNU_TIME, "-f", "%M", "-o", rss.name, *command] if Path(GNU_TIME).exists() else command
        r = run_limited(timed, limit, timeout=timeout, cwd=cwd, env={**os.environ, **fs.environment})
        text = rss.read().strip().splitlines()
    return r, (int(text[-1]) * 1024 if text and text[-1].isdigit() else None)


def profiled_flags(job_class: str, classes: Path, out: Path,
                   timeout: float) -> tuple[dict[str, Any], FlagSet | None, list[str], Estimate | None]:
    """`pyd4j profile` the job as it is, then `pyd4j flags` for the network it saved: (row, flags, job, estimate);
    flags None where a step failed (the row says which)."""
    cp = os.pathsep.join([str(classes), *(str(p) for p in classpath())])
    job = [shutil.which("java") or "java", "-cp", cp, PACKAGE + job_class]
    run_dir = out / job_class.rsplit(".", 1)[-1]
    t0 = time.monotonic()
    p = pyd4j(["profile", "--json", "--no-report", "--out", str(run_dir), "--", *job], timeout)
    row: dict = {"job": PACKAGE + job_class, "profile_seconds": round(time.monotonic() - t0, 1)}
    try:
        prof = json.loads(p.stdout)
    except json.JSONDecodeError:
        return {**row, "status": "profile failed", "error": p.stderr[-800:]}, None, job, None
    row.update(profile_exit_code=prof.get("exit_code"), profile_iterations=prof.get("iterations"),
               profile_peak_rss_bytes=prof["peaks"].get("rss"), networks=len(prof.get("networks", [])))
    nets = [n for n in prof.get("networks", []) if "flags" in n]
    if not nets:
        return {**row, "status": "no network saved", "error": str(prof.get("networks"))}, None, job, None
    net = nets[-1]
    row.update(kind=net["kind"], batch=net["batch"], inputs=net["inputs"])
    try:   # what `pyd4j flags --model network-1.json --batch B` computes
        est = estimate(net["path"], net["batch"])
        fs = flags(est, refuse=False)
    except EstimateError as err:
        return {**row, "status": "flags failed", "error": str(err)[-800:]}, None, job, None
    return row, fs, job, est
