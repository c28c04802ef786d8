"""The package's layers are a checked contract: `lint-imports` (import-linter, configured in
pyproject.toml) keeps every layer importing only the layers below it -- leaf modules, then `jvm`, `nd`,
then sched/data/workspaces, memory (its fit() model is the planner's), profile/train/serve/device, spark, and commands/cli -- with no two
packages of one layer importing each other, so no import circle passes; it keeps `pyd4j.sched`
free of DL4J, memory, jpype and py4j (it plans without a JVM); and no package imports in a circle.
Every contract pyproject.toml declares must be kept."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept():
    lint = Path(sys.executable).parent / "lint-imports"
    p = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    declared = len(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"])
    assert declared >= 3, f"pyproject.toml declares {declared} import contracts"
    assert f"Contracts: {declared} kept, 0 broken." in p.stdout, p.stdout[-2000:]
