"""`pyd4j doctor` in a child process, as a user runs it: one JSON document, real ND4J, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.jvm


def doctor(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyd4j.cli", "doctor", *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **(env or {})})


def test_json_reports_real_nd4j_on_cpu_and_ok():
    result = doctor("--json")
    assert result.returncode == 0, result.stderr[-2000:]
    doc = json.loads(result.stdout)               # the whole of stdout is one JSON document
    assert doc["ok"] is True
    assert doc["nd4j"]["version"] == "1.0.0-M2.1"
    assert doc["nd4j"]["backend"] == "CPU"
    assert doc["java"]["version"] and doc["java"]["major"] >= 11
    assert doc["memory"]["physical_bytes"] == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert "cgroup_limit_bytes" in doc["memory"]
    assert doc["blas"]["vendor"]
    assert doc["interop"] == {"mmul_matches_numpy": True, "zero_copy": True}
    assert doc["cpu"]["best_classifier"].startswith("linux-")
    assert all(check["ok"] for check in doc["checks"])


def test_missing_jars_make_it_fail_with_the_fix(tmp_path):
    result = doctor("--json", env={"PYD4J_CLASSPATH": str(tmp_path / "nothing-here.jar")})
    assert result.returncode == 1
    doc = json.loads(result.stdout)
    assert doc["ok"] is False
    assert doc["classpath"]["found"] is False
    assert "PYD4J_CLASSPATH" in doc["classpath"]["error"]
    failed = [c["name"] for c in doc["checks"] if not c["ok"]]
    assert failed == ["classpath"]


def test_table_for_people():
    result = doctor()
    assert result.returncode == 0, result.stderr[-2000:]
    assert "1.0.0-M2.1 on CPU" in result.stdout
    assert "zero-copy" in result.stdout
