"""`pyd4j.train.fit(net, batches, memory="superneurons")` on ComputationGraphs with several inputs
or output layers, fed MultiDataSets from Python (masks included): planned training from Python
trains exactly as DL4J's own fit() (real DL4J in the session JVM)."""

from __future__ import annotations

import numpy as np
import pytest

from pyd4j.sched.graph import GraphError
from pyd4j.train import fit
from tests.train.test_refusals import network

pytestmark = pytest.mark.jvm


def batches(name: str, n: int = 24, size: int = 8, masks: bool = False) -> list[tuple]:
    rng = np.random.default_rng(3)
    f32 = np.float32
    out = []
    for start in range(0, n, size):
        if name == "two_input":
            features = [rng.random((size, 1, 12, 12), dtype=f32) - 0.5, rng.random((size, 6), dtype=f32) - 0.5]
            labels = [np.eye(5, dtype=f32)[rng.integers(0, 5, size)]]
            label_masks = [(rng.random((size, 1)) > 0.3).astype(f32)]
        else:   # policy_value: one input, two output layers
            features = [rng.random((size, 4, 8, 8), dtype=f32) - 0.5]
            labels = [np.eye(65, dtype=f32)[rng.integers(0, 65, size)], (rng.random((size, 1), dtype=f32) - 0.5)]
            label_masks = [(rng.random((size, 1)) > 0.3).astype(f32), (rng.random((size, 1)) > 0.3).astype(f32)]
        out.append((features, labels, None, label_masks) if masks else (features, labels))
    return out


@pytest.mark.parametrize("name, masks", [("two_input", False), ("policy_value", False), ("policy_value", True)])
def test_planned_fit_from_python_is_dl4j_fit(jvm, name: str, masks: bool) -> None:
    import jpype

    data = batches(name, masks=masks)
    plain, planned = network(name), network(name)
    random = jpype.JClass("org.nd4j.linalg.factory.Nd4j").getRandom()
    random.setSeed(jpype.JLong(5))
    fit(plain, data, progress=False)
    random.setSeed(jpype.JLong(5))
    result = fit(planned, data, progress=False, memory="superneurons", policy="recompute_in_memory")
    assert result.plan["batch"] == 8 and result.plan["policy"] == "recompute_in_memory"
    assert result.plan["trainer"]["iterations"] == 3 == planned.getIterationCount() == plain.getIterationCount()
    assert result.plan["trainer"]["recomputes"] > 0
    assert planned.params().equals(plain.params()) and planned.score() == plain.score()


def test_a_source_without_shapes_needs_them_named(jvm) -> None:
    data = batches("two_input")
    with pytest.raises(GraphError, match=r"pass input_shape .* one per input \['image', 'meta'\]"):
        fit(network("two_input"), iter(data), progress=False, memory="superneurons", batch_size=8)
    result = fit(network("two_input"), iter(data), progress=False, memory="superneurons", batch_size=8,
                 input_shape=[(1, 12, 12), (6,)])
    assert result.plan["trainer"]["iterations"] == 3
