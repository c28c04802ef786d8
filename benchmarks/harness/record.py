"""Where and how a result was measured: the `run` record every result file carries under fixed keys
(machine, load, command line, commit and date), validated against one schema before it is written."""

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

from pydantic import BaseModel, ConfigDict, model_validator

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
FIXTURES = ROOT / "tests" / "fixtures" / "java" / "target"
SCHEMA = 1


class Amendment(BaseModel):
    """A later command that rewrote part of a result file (a summary recomputed, predictions redone)."""

    model_config = ConfigDict(extra="forbid")
    command: list[str]
    commit: str
    dirty: bool | None
    date_utc: str


class RunRecord(BaseModel):
    """The fixed keys of every result file's `run`. A record `reconstructed` from git for a file written
    before the harness existed knows its command and commit only; measured ones know the rest too."""

    model_config = ConfigDict(extra="forbid")
    schema_version: int
    benchmark: str
    command: list[str]
    commit: str
    dirty: bool | None = None
    started_utc: str | None = None
    finished_utc: str | None = None
    seconds: float | None = None
    machine: dict[str, Any] = {}
    load_average_start: list[float] | None = None
    load_average_end: list[float] | None = None
    committed_utc: str | None = None   # reconstructed: the date of the commit that last changed the file
    reconstructed: bool = False
    note: str | None = None
    amended: list[Amendment] = []

    @model_validator(mode="after")
    def measured_knows_its_run(self) -> RunRecord:
        if not self.command or not self.commit:
            raise ValueError("a run record names its command and commit")
        if not self.reconstructed:
            missing = [k for k in ("started_utc", "load_average_start") if getattr(self, k) is None]
            if missing or not self.machine:
                raise ValueError(f"a measured run record lacks {', '.join(missing) or 'machine'}")
        return self


class ResultFile(BaseModel):
    """A result file: its `run` record and whatever the benchmark measured."""

    model_config = ConfigDict(extra="allow")
    run: RunRecord


def git(*args: str) -> str:
    """git's answer in the project's folder; "" where there is no git or no repository (a copy of the tree)."""
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def commit() -> str:
    """The commit measured: git's HEAD, else $PYD4J_COMMIT (a copy of the tree run elsewhere), else "unknown"."""
    return git("rev-parse", "HEAD") or os.environ.get("PYD4J_COMMIT", "unknown")


def machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")}


def portable(text: str) -> str:
    """`text` without this machine's paths: the project's made relative, the home directory as ~."""
    return text.replace(str(ROOT) + "/", "").replace(str(Path.home()) + "/", "~/")


def command_line() -> list[str]:
    """The command that is running, as one would type it again from the project's folder; an argument
    that is a path outside the project (a scratch folder of configurations) is written DIR."""
    script = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else None
    first = portable(str(script)) if script and script.exists() else (sys.argv[0] if sys.argv else "")
    return ["python", first, *("DIR" if portable(a).startswith("/") else portable(a) for a in sys.argv[1:])]


def _utc() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def validate(doc: dict[str, Any]) -> None:
    ResultFile.model_validate(doc)


def short_commit() -> str:
    return git("rev-parse", "--short", "HEAD")


def write_json(path: str | Path, doc: dict[str, Any], indent: int = 1, hidden: dict[str, str] | None = None) -> Path:
    """Validate `doc` and write it at once (a temporary file renamed: a reader never sees half of it),
    without this machine's paths (the project's, the home directory, and each folder of `hidden` written
    as its label)."""
    validate(doc)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    text = json.dumps(doc, indent=indent, default=str)
    for folder, label in (hidden or {}).items():
        text = text.replace(folder.rstrip("/") + "/", label + "/")
    tmp.write_text(portable(text) + "\n")
    tmp.replace(path)
    return path


def _dirty() -> bool | None:
    """Whether tracked files differ from the commit (None: no git to ask)."""
    if not git("rev-parse", "HEAD"):
        return None
    return bool(git("status", "--porcelain", "--untracked-files=no"))


class Recorder:
    """One benchmark run: `doc` holds the results under its `run` record; `write` adds the end of the run
    and validates. Scripts that write as they go call `write` after each row. `Recorder.amending(path)`
    is a later command that changes a result file it reads (a summary recomputed, rows added): the file's
    `run` stays its measurement's, and the command is added under `amended`."""

    def __init__(self, benchmark: str, doc: dict[str, Any] | None = None) -> None:
        self.t0 = time.monotonic()
        self.amendment: dict[str, Any] | None = None
        self.hidden: dict[str, str] = {}   # folders of this run written as a label (its temporary folder)
        self.doc: dict[str, Any] = doc if doc is not None else {"run": {
            "schema_version": SCHEMA, "benchmark": benchmark, "command": command_line(),
            "commit": commit(), "dirty": _dirty(), "started_utc": _utc(), "finished_utc": None,
            "seconds": None, "machine": machine(), "load_average_start": _load(), "load_average_end": None}}

    @classmethod
    def amending(cls, path: str | Path, doc: dict[str, Any] | None = None) -> Recorder:
        """The result file at `path` (or `doc`, read from it already), to be changed and written back."""
        doc = doc if doc is not None else json.loads(Path(path).read_text())
        rec = cls(doc["run"]["benchmark"], doc)
        rec.amendment = {"command": command_line(), "commit": commit(), "dirty": _dirty(),
                         "date_utc": _utc()}
        doc["run"].setdefault("amended", []).append(rec.amendment)
        return rec

    def hide(self, folder: str | Path, label: str = "<runs>") -> Path:
        """Write `folder` (the run's temporary folder) as `label` in the results; returns it."""
        self.hidden[str(folder)] = label
        return Path(folder)

    @property
    def run(self) -> dict[str, Any]:
        return self.doc["run"]

    def write(self, path: str | Path, indent: int = 1) -> Path:
        if self.amendment is not None:
            self.amendment["date_utc"] = _utc()
        else:
            self.run.update(finished_utc=_utc(), seconds=round(time.monotonic() - self.t0, 1),
                            load_average_end=_load())
        return write_json(path, self.doc, indent, self.hidden)


def amend(path: str | Path, doc: dict[str, Any], indent: int = 1) -> Path:
    """Write back `doc`, read from the result file `path` and changed by this command (see `Recorder.amending`)."""
    return Recorder.amending(path, doc).write(path, indent)
