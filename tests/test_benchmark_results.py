"""Every result file in benchmarks/results records the command and commit that made it, under the harness's
one schema: a figure can be traced to the run behind it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from benchmarks.harness import ResultFile, RunRecord

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def result_files() -> list[Path]:
    """The project's result files: those git tracks (every file in the folder outside a git checkout)."""
    out = subprocess.run(["git", "ls-files", "benchmarks/results"], cwd=ROOT, capture_output=True, text=True)
    names = [n for n in out.stdout.splitlines() if n.endswith(".json")] if out.returncode == 0 else []
    return [ROOT / n for n in names] or sorted(RESULTS.glob("*.json"))


FILES = result_files()


def test_there_are_result_files() -> None:
    assert len(FILES) > 40


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_result_file_records_its_run(path: Path) -> None:
    doc = json.loads(path.read_text())
    run = ResultFile.model_validate(doc).run
    assert run.command[0] == "python" and run.command[1].startswith("benchmarks/"), run.command
    assert (ROOT / run.command[1]).exists(), f"{path.name}: its command names {run.command[1]}, not a script"
    assert len(run.commit) == 40 and int(run.commit, 16) >= 0
    assert run.benchmark == Path(run.command[1]).stem
    assert str(ROOT) not in path.read_text()   # no path of the checkout that ran it


def test_schema_refuses_a_measured_run_without_its_load() -> None:
    run = {"schema_version": 1, "benchmark": "tiers", "command": ["python", "benchmarks/tiers.py"],
           "commit": "0" * 40, "dirty": False, "started_utc": "2026-12-07T00:00:00+00:00", "machine": {"cpus": 2}}
    with pytest.raises(ValidationError, match="load_average_start"):
        RunRecord.model_validate(run)
    RunRecord.model_validate({**run, "load_average_start": [1.0, 1.0, 1.0]})
    # a record reconstructed from git knows only its command and commit
    RunRecord.model_validate({k: run[k] for k in ("schema_version", "benchmark", "command", "commit")}
                             | {"reconstructed": True})


def test_schema_refuses_a_run_without_command_or_unknown_keys() -> None:
    base = {"schema_version": 1, "benchmark": "tiers", "commit": "0" * 40, "reconstructed": True}
    with pytest.raises(ValidationError):
        RunRecord.model_validate(base)
    with pytest.raises(ValidationError):
        RunRecord.model_validate({**base, "command": ["python", "benchmarks/tiers.py"], "load_avg": 1.0})
    with pytest.raises(ValidationError):
        ResultFile.model_validate({"summary": {}})
