"""`pyd4j.train.fit(net, data, memory="superneurons", budget=...)`: planned training from Python
(real DL4J in the session JVM)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pyd4j.data import NumpyBatches
from pyd4j.train import fit
from tests.train.conftest import NETWORKS

pytestmark = pytest.mark.jvm


def lenet():
    import jpype

    conf = jpype.JClass("org.deeplearning4j.nn.conf.MultiLayerConfiguration").fromJson((NETWORKS / "lenet.json").read_text())
    net = jpype.JClass("org.deeplearning4j.nn.multilayer.MultiLayerNetwork")(conf)
    net.init()
    return net


@pytest.fixture(scope="module")
def xy():
    rng = np.random.default_rng(1)
    x = rng.random((48, 784), dtype=np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 48)]
    return x, y


def test_no_budget_is_liveness_and_trains_exactly_like_fit(jvm, xy) -> None:
    import jpype

    x, y = xy
    plain, planned = lenet(), lenet()
    random = jpype.JClass("org.nd4j.linalg.factory.Nd4j").getRandom()
    random.setSeed(jpype.JLong(5))
    fit(plain, NumpyBatches(x, y, 16, shuffle=False), progress=False)
    random.setSeed(jpype.JLong(5))
    result = fit(planned, NumpyBatches(x, y, 16, shuffle=False), progress=False, memory="superneurons")
    assert result.plan["policy"] == "liveness" and result.plan["budget_bytes"] is None
    assert result.plan["trainer"]["iterations"] == 3 == planned.getIterationCount()
    assert planned.params().equals(plain.params())
    assert result.plan["trainer"]["peak_live_bytes"] > 0


def test_a_budget_picks_the_fastest_plan_that_fits(jvm, xy) -> None:
    x, y = xy
    result = fit(lenet(), NumpyBatches(x, y, 16, shuffle=False), progress=False, memory="superneurons",
                 budget="64m")
    assert result.plan["predicted"]["device_peak_bytes"] <= 64 << 20
    # ample room: the fastest plan moves nothing and recomputes nothing
    assert result.plan["trainer"]["offloads"] == 0 == result.plan["trainer"]["recomputes"]


def test_a_budget_below_the_minimum_is_refused_before_training(jvm, xy) -> None:
    x, y = xy
    net = lenet()
    before = net.params().dup()
    with pytest.raises(ValueError, match=r"smallest peak is \d+ bytes \(policy \w+\)"):
        fit(net, NumpyBatches(x, y, 16), progress=False, memory="superneurons", budget="100k")
    assert net.params().equals(before) and net.getIterationCount() == 0


def test_bad_memory_modes_are_refused(jvm, xy) -> None:
    x, y = xy
    with pytest.raises(ValueError, match="memory='fast'; use 'superneurons'"):
        fit(lenet(), NumpyBatches(x, y, 16), progress=False, memory="fast")
    with pytest.raises(ValueError, match="add memory='superneurons'"):
        fit(lenet(), NumpyBatches(x, y, 16), progress=False, budget="1g")
