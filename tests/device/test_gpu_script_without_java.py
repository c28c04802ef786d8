"""benchmarks/agent_gpu.py runs on a GPU machine with Python, CUDA and CuPy but no Java: nothing on
its path imports the JVM bridge. Checked here through its host pipeline (`--host`, the same code
on the host build of the side-agent) and its no-GPU exit, with no java on PATH and no JAVA_HOME."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Runs the script as __main__, then reports which JVM bridges were imported on the way.
_RUN = """
import os, runpy, sys
sys.argv = ["agent_gpu.py", *sys.argv[1:]]
sys.path.insert(0, os.path.dirname({script!r}))   # as `python benchmarks/agent_gpu.py` has it
try:
    runpy.run_path({script!r}, run_name="__main__")
except SystemExit as e:
    if e.code not in (None, 0):
        raise
print("BRIDGES=" + ",".join(m for m in ("jpype", "_jpype", "py4j") if m in sys.modules))
"""


def _run(tmp_path: Path, *args: str) -> tuple[str, dict]:
    bin_dir = tmp_path / "bin"  # PATH with python only: no java, no nvidia-smi
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python").unlink(missing_ok=True)
    (bin_dir / "python").symlink_to(sys.executable)
    out = tmp_path / "result.json"
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "PYD4J_CLASSPATH")}
    env["PATH"] = str(bin_dir)
    env["PYD4J_NATIVE_LIB"] = str(ROOT / "native" / "build" / "libpyd4j_agent.so")
    p = subprocess.run([sys.executable, "-c", _RUN.format(script=str(ROOT / "benchmarks" / "agent_gpu.py")),
                        *args, "--out", str(out)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-3000:])
    return p.stdout.strip().splitlines()[-1], json.loads(out.read_text())


def test_no_gpu_exit_without_java(tmp_path):
    bridges, doc = _run(tmp_path)
    assert bridges == "BRIDGES="
    assert doc["gpu"] is None and doc["status"].startswith("no GPU") and "nothing measured" in doc["status"]


@pytest.mark.slow
def test_host_pipeline_without_java(tmp_path):
    bridges, doc = _run(tmp_path, "--host", "--steps", "1")
    assert bridges == "BRIDGES=", bridges
    assert doc["status"] == "ok" and doc["library"] == "host"
    training = doc["training"]["native"]
    assert training["grads_equal_unconstrained"] is True, training
    assert training["measured_peak_bytes"] <= training["planned_peak_bytes"] * 1.1
