"""The one runner every benchmark records its results with: machine, load, command line, commit and
date under fixed keys (`run`), results validated against one schema before they are written, and the
shared ways to get what benchmarks measure on (DL4J's zoo built by DL4J's own code).

    from harness import Recorder
    rec = Recorder("inference_footprint")
    ... rec.doc["models"][name] = row; rec.write(path)

Scripts import this module and the package, never each other.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results"
FIXTURES = ROOT / "tests" / "fixtures" / "java" / "target"
SCHEMA = 1


class RunRecord(BaseModel):
    """Where and how a result was measured: the fixed keys of every result file's `run`."""

    model_config = ConfigDict(extra="forbid")
    schema_version: int
    benchmark: str
    command: list[str]
    commit: str
    dirty: bool
    started_utc: str
    finished_utc: str | None
    seconds: float | None
    machine: dict[str, Any]
    load_average_start: list[float]
    load_average_end: list[float] | None


class ResultFile(BaseModel):
    model_config = ConfigDict(extra="allow")
    run: RunRecord


def _git(*args: str) -> str:
    out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
    return out.stdout.strip()


def machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")}


class Recorder:
    """One benchmark run: `doc` holds the results; `write` adds the end of the run and validates."""

    def __init__(self, benchmark: str) -> None:
        self.t0 = time.monotonic()
        self.doc: dict[str, Any] = {"run": {
            "schema_version": SCHEMA, "benchmark": benchmark, "command": [Path(sys.executable).name, *sys.argv],
            "commit": _git("rev-parse", "HEAD"), "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
            "started_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"), "finished_utc": None,
            "seconds": None, "machine": machine(), "load_average_start": [round(x, 2) for x in os.getloadavg()],
            "load_average_end": None}}

    def write(self, path: str | Path) -> Path:
        run = self.doc["run"]
        run.update(finished_utc=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                   seconds=round(time.monotonic() - self.t0, 1),
                   load_average_end=[round(x, 2) for x in os.getloadavg()])
        ResultFile.model_validate(self.doc)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.doc, indent=1) + "\n")
        tmp.replace(path)
        return path


def zoo_classpath() -> str:
    from pyd4j.jvm.classpath import classpath

    return ":".join([str(FIXTURES / "pyd4j-fixtures.jar"), str(FIXTURES / "zoo-lib" / "*")] + classpath())


def build_zoo(models: list[str], folder: Path, timeout: float = 1200) -> dict[str, dict[str, Any]]:
    """DL4J's zoo models built by DL4J's code (`org.pyd4j.fixtures.ZooNets`) at the smallest square input
    each builds at, as `<model>.json` with its `<model>.input.json` in `folder`: {model: {"size", "kind"} or
    {"error"}}. Models already in the folder are not built again."""
    folder.mkdir(parents=True, exist_ok=True)
    todo = [m for m in models if not (folder / f"{m}.json").exists()]
    if todo:
        out = subprocess.run(["java", "-Xmx4g", "-cp", zoo_classpath(), "org.pyd4j.fixtures.ZooNets", str(folder), *todo],
                             capture_output=True, text=True, timeout=timeout, env=dict(os.environ, OMP_NUM_THREADS="1"))
        rows = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
        built = {r["model"]: r for r in rows}
    else:
        built = {}
    return {m: ({"size": built.get(m, {}).get("size"), "kind": built.get(m, {}).get("kind")}
                if (folder / f"{m}.json").exists() else {"error": built.get(m, {}).get("error", "not built")})
            for m in models}
