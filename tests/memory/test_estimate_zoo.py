"""`pyd4j estimate` on a zoo model whose DL4J memory report is incomplete: YOLO2 (deeplearning4j-zoo
1.0.0-M2.1, built by DL4J's code). Its Yolo2OutputLayer's report has no training working memory, so
DL4J's own NetworkMemoryReport throws a NullPointerException when asked for it; the estimate, whose
training figure is pyd4j's model, must still come out, and say which cross-check row it left out."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.train.test_zoo_planned import java_classpath

pytestmark = [pytest.mark.jvm, pytest.mark.slow]


@pytest.fixture(scope="module")
def yolo2(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("zoo-yolo2")
    run = subprocess.run(["java", "-Xmx3g", "-Dpyd4j.probe.batch=1", "-cp", java_classpath(),
                          "org.pyd4j.fixtures.ZooNets", str(out), "YOLO2"],
                         capture_output=True, text=True, timeout=1200, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    return out / "YOLO2.json"


def test_estimate_survives_dl4js_incomplete_report(jvm, yolo2: Path) -> None:
    from org.deeplearning4j.nn.conf import ComputationGraphConfiguration

    from pyd4j.commands.estimate import command

    r = CliRunner().invoke(command, ["--model", str(yolo2), "--batch", "2", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    # the model's terms are there; parameters as DL4J counts them (its configuration, not its report)
    conf = ComputationGraphConfiguration.fromJson(yolo2.read_text())
    params = sum(int(conf.getVertices().get(n).numParams(True)) for n in conf.getVertices().keySet())
    assert doc["breakdown"]["parameters"] == 4 * params
    assert doc["breakdown"]["working_memory"] > 0 and doc["breakdown"]["activations"] > 0
    # the report's row that DL4J cannot give is left out, and the estimate says so
    gap = [n for n in doc["notes"] if "cannot give" in n]
    assert len(gap) == 1 and "WORKING_MEMORY" in gap[0] and "NullPointerException" in gap[0]
    assert "working_memory" not in {t["name"] for t in doc["report_terms"]}
    assert "parameters" in {t["name"] for t in doc["report_terms"]}
    # the table a user reads says it too, below the tables
    human = CliRunner().invoke(command, ["--model", str(yolo2), "--batch", "2"])
    assert human.exit_code == 0, human.output
    assert f"note: {gap[0]}" in human.output
