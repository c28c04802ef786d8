"""examples/quickstart.py (what `make demo` runs) works end to end and checks itself against numpy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.jvm

QUICKSTART = Path(__file__).resolve().parents[1] / "examples" / "quickstart.py"


def test_quickstart_runs_and_agrees_with_numpy():
    result = subprocess.run([sys.executable, str(QUICKSTART)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "shares numpy's memory: True" in result.stdout
    assert "matches numpy's lstsq" in result.stdout
