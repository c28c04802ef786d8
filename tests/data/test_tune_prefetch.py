"""Prefetch tuning: throughput per depth on a real network, and the `tune-prefetch` command."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pyd4j.data import NumpyBatches
from pyd4j.prefetch_tuning import tune_prefetch

pytestmark = pytest.mark.jvm
ROOT = Path(__file__).resolve().parents[2]


def test_tune_prefetch_measures_each_depth(net, xy):
    x, y = xy
    report = tune_prefetch(net, NumpyBatches(x, y, 50), depths=[4, 1, 2], epochs=1, repeats=2, tolerance=0.05)
    assert [r.depth for r in report.results] == [1, 2, 4]
    assert all(len(r.runs) == 2 and r.samples_per_s > 0 for r in report.results)
    best = max(r.samples_per_s for r in report.results)
    chosen = next(r for r in report.results if r.depth == report.recommended)
    assert chosen.samples_per_s >= 0.95 * best
    # nothing shallower is also within tolerance
    assert all(r.samples_per_s < 0.95 * best for r in report.results if r.depth < report.recommended)
    assert report.results[2].queue_bytes == 4 * 50 * (8 + 3) * 4
    assert json.loads(json.dumps(report.to_dict()))["recommended"] == report.recommended


def test_cli_json(jvm):
    from pyd4j.cli import main

    result = CliRunner().invoke(main, ["tune-prefetch", "--depths", "1,2", "--repeats", "1", "--batch", "128",
                                       "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["model"] == "digits-mlp" and doc["samples"] == 1437
    assert {r["depth"] for r in doc["results"]} == {1, 2} and doc["recommended"] in (1, 2)


def test_committed_digits_configs_match_the_python_example(jvm):
    """examples/data/digits_*.json (used by tune-prefetch) are the networks examples/python/digits.py builds."""
    spec = importlib.util.spec_from_file_location("digits_example", ROOT / "examples" / "python" / "digits.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name in ("mlp", "lenet"):
        built = json.loads(str(module.NETS[name](42).getLayerWiseConfigurations().toJson()))
        committed = json.loads((ROOT / "examples" / "data" / f"digits_{name}.json").read_text())
        assert built == committed
