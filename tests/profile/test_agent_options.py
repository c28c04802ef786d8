"""`-Dpyd4j.agent=` options with bad values: the agent refuses to start and says why (naming the
option and the value); `pyd4j profile` reports that reason, not a guess, and exits 1 (nothing was
measured). Real JVMs (the fixtures' Idle job, no ND4J); each case counts in the corpus summary."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.profile.conftest import idle_command
from tests.test_cli_corpus import RESULTS

CASES = [("interval=abc", "interval=abc is not a whole number"), ("interval=0", "interval=0 ms"),
         ("live=-1", "live=-1 s"), ("live=soon", "live=soon is not a whole number"),
         ("sites=-5", "sites=-5 bytes"), ("live_share=2", "live_share=2.0"), ("live_share=half", "live_share=half"),
         ("live_max_heap=0", "live_max_heap=0 MiB"), ("interval=" + "9" * 30, "is not a whole number")]


@pytest.mark.parametrize(("option", "reason"), CASES, ids=[c[0][:20] for c in CASES])
def test_a_refused_agent_option_is_named_and_the_run_is_not_a_success(tmp_path, option, reason):
    key = f"-Dpyd4j.agent= bad option value | {option}"
    RESULTS[key] = False
    p = subprocess.run([sys.executable, "-m", "pyd4j.cli", "profile", "--json", "--no-report", "--out",
                        str(tmp_path / "run"), "--", *idle_command(300, f"-Dpyd4j.agent={option}")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr[-3000:]
    (finding,) = [f for f in json.loads(p.stdout)["findings"] if f["kind"] == "no-data"]
    assert "refused its options" in finding["title"] and reason in finding["title"], finding
    assert "it never started" not in json.dumps(finding)
    RESULTS[key] = True
