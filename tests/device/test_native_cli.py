"""`pyd4j plan --execute --backend ...`: plans run for real; measured peak equals planned."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from pyd4j.cli import main


@pytest.mark.parametrize("backend", ["native", "host"])
def test_plan_execute_reports_measured_equal_planned(backend):
    args = ["plan", "--model", "resnet50", "--batch", "1", "--image", "32", "--policy", "baseline",
            "--policy", "superneurons", "--execute", "--backend", backend, "--json"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    ex = doc["execute"]
    assert ex["backend"] == backend
    assert set(ex["policies"]) == {"baseline", "superneurons"}
    for p, e in ex["policies"].items():
        assert e["measured_peak_bytes"] == e["planned_peak_bytes"] == doc["policies"][p]["device_peak_bytes"]
        assert e["grads_equal_reference"] and e["max_abs_grad_diff"] == 0.0
        assert e["bytes_offloaded"] == doc["policies"][p]["bytes_offloaded"]
    assert ex["policies"]["superneurons"]["planned_peak_bytes"] < ex["policies"]["baseline"]["planned_peak_bytes"]
