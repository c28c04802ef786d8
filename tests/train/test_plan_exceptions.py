"""A plan that cannot run is never a quiet unplanned fit(): the Java one-liner throws a typed
exception before training, and a plan whose records cannot be replayed stops the iteration naming
the record (real DL4J in the session JVM)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.train.test_refusals import network, plan_file

pytestmark = pytest.mark.jvm


def lenet_batches(n: int = 2, size: int = 8):
    import jpype

    from pyd4j.nd import from_numpy

    rng = np.random.default_rng(0)
    data_set = jpype.JClass("org.nd4j.linalg.dataset.DataSet")
    batches = jpype.JClass("java.util.ArrayList")()
    for _ in range(n):
        x = rng.random((size, 784), dtype=np.float32)
        y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, size)]
        batches.add(data_set(from_numpy(x, copy=True), from_numpy(y, copy=True)))
    return jpype.JClass("org.deeplearning4j.datasets.iterator.ExistingDataSetIterator")(batches)


def test_the_one_liner_throws_for_a_plan_it_cannot_run_and_trains_nothing(jvm, tmp_path: Path) -> None:
    import jpype

    net = network("lenet")
    before = net.params().dup()
    refused = jpype.JClass("org.pyd4j.train.PlanRefusedException")
    with pytest.raises(refused) as err:
        jpype.JClass("org.pyd4j.train.PlannedTrainer").fit(net, lenet_batches(), plan_file(tmp_path, "mlp", batch=8))
    problems = [str(p) for p in err.value.problems()]
    assert len(problems) == 1 and "write the plan from this network's configuration" in problems[0]
    assert net.params().equals(before) and net.getIterationCount() == 0   # nothing trained unplanned


def test_a_plan_without_one_output_layers_backward_step_is_a_bad_plan(jvm, tmp_path: Path) -> None:
    import jpype

    path = Path(plan_file(tmp_path, "policy_value", batch=4))
    doc = json.loads(path.read_text())
    value = next(n["id"] for n in doc["nodes"] if n["name"] == "value")
    doc["records"] = [r for r in doc["records"] if not (r[0] == "BACKWARD" and r[1] == value)]
    path.write_text(json.dumps(doc))
    net = network("policy_value")
    trainer = jpype.JClass("org.pyd4j.train.PlannedTrainer").attach(
        net, jpype.JClass("org.pyd4j.train.PlanFile").read(str(path)), None)
    from pyd4j.nd import from_numpy

    arrays = jpype.JArray(jpype.JClass("org.nd4j.linalg.api.ndarray.INDArray"))
    rng = np.random.default_rng(0)
    net.setInputs(arrays([from_numpy(rng.random((4, 4, 8, 8), dtype=np.float32), copy=True)]))
    net.setLabels(arrays([from_numpy(np.full((4, 65), 1 / 65, dtype=np.float32), copy=True),
                          from_numpy(np.zeros((4, 1), dtype=np.float32), copy=True)]))
    try:
        with pytest.raises(jpype.JClass("org.pyd4j.train.BadPlanException"),
                           match=r"record \d+ \(BACKWARD value_fc\): BACKWARD value_fc has no gradient of its output"):
            trainer.computeGradientAndScore()
    finally:
        trainer.close()
