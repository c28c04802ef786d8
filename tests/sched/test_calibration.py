"""The K40c compute efficiency in devices.json is the one benchmarks/calibration.py fits, and the
figures it was fitted on stay within 25% of the published measurements."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from pyd4j.sched.costmodel import CostModel

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "calibration.py"


@pytest.fixture(scope="module")
def calibration():
    if str(SCRIPT.parent) not in sys.path:   # benchmark scripts import their harness package
        sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("calibration", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_fitted_efficiency_is_reproduced_and_within_25_percent(calibration) -> None:
    rows = calibration.entries()
    eff, ratios = calibration.fit(rows)
    assert CostModel.for_device("k40c").efficiency == eff
    assert set(ratios) == {"resnet50 b16", "resnet152 b16"}
    assert all(0.75 <= r <= 1.25 for r in ratios.values()), ratios
    for device, pub, g in rows:  # the published figures the script compares
        assert pub["source"].startswith("https://")
        if "ms" in pub:
            assert pub["img_s"] == pytest.approx(calibration.published(pub), abs=0.01)
