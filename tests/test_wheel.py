"""The wheel: `make wheel` builds it, a fresh virtual environment installs it, and `pyd4j profile`,
`report` and `tune` work there on a Maven-built DL4J job with nothing of the checkout (no Maven
build of pyd4j, no sources on the path): the agent jar comes from the wheel, ND4J from the job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pyd4j.jvm import classpath, examples_jar

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.slow, pytest.mark.jvm]


def run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 900,
        codes: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess:
    p = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode in codes, (argv, p.stdout[-2000:], p.stderr[-4000:])
    return p


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """(bin directory of a fresh venv holding only the wheel and its dependencies, its environment)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYD4J_CLASSPATH", "VIRTUAL_ENV")}
    run(["make", "wheel"], ROOT, env)
    wheels = sorted((ROOT / "dist").glob("pyd4j-*.whl"))
    assert len(wheels) == 1, wheels
    venv = tmp_path_factory.mktemp("wheel") / "venv"
    run([sys.executable, "-m", "venv", str(venv)], ROOT, env)
    run([str(venv / "bin" / "pip"), "install", "-q", "-c", str(ROOT / "constraints.txt"), str(wheels[0])], ROOT, env)
    return venv / "bin", env


def test_wheel_profiles_reports_and_tunes_a_job(installed, tmp_path):
    bin_dir, env = installed
    where = run([str(bin_dir / "python"), "-c", "import pyd4j; from pyd4j.jvm.classpath import HELPER_JAR; "
                 "print(pyd4j.__file__); print(HELPER_JAR)"], tmp_path, env).stdout.split()
    assert all(str(bin_dir.parent) in p and str(ROOT) not in p for p in where), where  # nothing from the checkout

    job_cp = os.pathsep.join([examples_jar(), *classpath()[1:]])  # the job's own classpath (ND4J, DL4J)
    job = ["java", "-cp", job_cp, "org.pyd4j.examples.TrainLeNetSynthetic", "6", "16", "1"]
    long_job = ["java", "-cp", job_cp, "org.pyd4j.examples.TrainLeNetSynthetic", "60", "16", "1"]
    doc = json.loads(run([str(bin_dir / "pyd4j"), "profile", "--json", "--out", "run", "--", *long_job], tmp_path,
                         env).stdout)
    assert doc["exit_code"] == 0 and doc["samples"] > 0 and doc["iterations"] == 60, doc
    assert doc["peaks"]["rss"] and doc["peaks"]["heap_used"]
    # the leak check (scipy's trend tests) judges the 60-iteration run from the wheel alone
    code = ("import sys; from pyd4j.profile.timeline import Timeline; from pyd4j.profile.leak_verdicts import leak_verdicts\n"
            "v = leak_verdicts(Timeline.load(sys.argv[1])); print(' '.join(x.status for x in v))")
    statuses = run([str(bin_dir / "python"), "-c", code, str(tmp_path / "run")], tmp_path, env).stdout.split()
    assert statuses and set(statuses) <= {"leak", "no-leak", "not-enough-data"} and "leak" not in statuses, statuses

    rep = json.loads(run([str(bin_dir / "pyd4j"), "report", "--json", "--out", "rep", "run"], tmp_path, env).stdout)
    assert (tmp_path / rep["files"]["html"]).stat().st_size > 0 and (tmp_path / "rep" / "memory.png").stat().st_size > 0

    # a 6-iteration job is too short to rule a leak out: tune recommends, re-runs, and says "not
    # verified" (exit 3) for that reason alone, never "verified"
    tuned = json.loads(run([str(bin_dir / "pyd4j"), "tune", "--json", "--out", "tune", "--", *job], tmp_path, env,
                           codes=(0, 3)).stdout)
    assert tuned["after"]["exit_code"] == 0 and tuned["after"]["iterations"] == 6, tuned
    assert tuned["outcome"] == "verified" or "not-enough-data" in tuned["after"]["findings"], tuned
    assert any(a.startswith("-Xmx") for a in tuned["recommended"])
    assert all(a in tuned["after"]["jvm_memory_flags"] for a in tuned["recommended"] if a.startswith("-Xm"))


def test_wheel_imports_every_module_and_runs_the_leak_check(installed, tmp_path):
    """Every module of the installed wheel imports with only the declared dependencies, and the
    leak check's trend (scipy) judges a steadily rising series as rising."""
    bin_dir, env = installed
    code = ("import importlib, pkgutil, numpy as np, pyd4j\n"
            "mods = [m.name for m in pkgutil.walk_packages(pyd4j.__path__, 'pyd4j.')\n"
            "        if not m.name.startswith('pyd4j.serve')]  # the serve extra's HTTP side is not installed here\n"
            "for m in mods: importlib.import_module(m)\n"
            "from pyd4j.profile.leak_verdicts import fit_trend\n"
            "x = np.arange(60.0); t = fit_trend(x, 1000.0 + 50.0 * x, 'iteration')\n"
            "print(len(mods), t.slope, t.p_value)")
    count, slope, p_value = run([str(bin_dir / "python"), "-c", code], tmp_path, env).stdout.split()
    assert int(count) > 60 and float(slope) == 50.0 and float(p_value) < 1e-6
