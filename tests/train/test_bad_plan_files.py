"""The Java one-liner, `PlannedTrainer.fit(net, iterator, "plan.json")`, on bad plan files (real
DL4J in the session JVM): truncated, empty, of another network, with negative sizes or batch 0,
a FIFO or a directory as the path. Each is refused before any training -- the parameters are
unchanged -- with an error that names the file; none hangs (the FIFO has no writer).

Each case counts in the CLI corpus's summary (tests/test_cli_corpus.py RESULTS)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from tests.test_cli_corpus import RESULTS
from tests.train.test_refusals import network, plan_file

pytestmark = pytest.mark.jvm


def _mutate(good: dict, how: str) -> dict | str | bytes:
    doc = json.loads(json.dumps(good))
    if how == "negative y_bytes":
        doc["nodes"][2]["y_bytes"] = -4096
    elif how == "negative shape":
        doc["nodes"][2]["shape"] = [4, -512]
    elif how == "batch 0":
        doc["network"]["batch"] = 0
    elif how == "negative batch":
        doc["network"]["batch"] = -4
    elif how == "negative record":
        doc["records"][0] = ["FORWARD", -1]
    elif how == "another network, same layers":  # the MLP's layers, other sizes
        doc["nodes"][1]["shape"] = [4, 100]
    elif how == "schema 3":
        doc["schema"] = 3
    elif how == "nodes dropped":
        doc["nodes"] = doc["nodes"][:2]
    return doc


CASES = ["truncated", "empty", "whitespace", "not JSON", "JSON array", "FIFO", "directory", "missing",
         "negative y_bytes", "negative shape", "batch 0", "negative batch", "negative record",
         "another network, same layers", "schema 3", "nodes dropped", "plan of another network"]


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> tuple[Path, dict]:
    path = Path(plan_file(tmp_path_factory.mktemp("good"), "mlp", batch=4, policy="liveness"))
    return path, json.loads(path.read_text())


def _write(tmp_path: Path, how: str, good: tuple[Path, dict]) -> Path:
    path = tmp_path / "bad.plan.json"
    text = good[0].read_text()
    if how == "truncated":
        path.write_text(text[: len(text) // 2])
    elif how == "empty":
        path.write_text("")
    elif how == "whitespace":
        path.write_text("\n  \n")
    elif how == "not JSON":
        path.write_bytes(b"\xff\xfe plan")
    elif how == "JSON array":
        path.write_text("[1, 2, 3]")
    elif how == "FIFO":
        os.mkfifo(path)
    elif how == "directory":
        path.mkdir()
    elif how == "missing":
        pass
    elif how == "plan of another network":
        return Path(plan_file(tmp_path, "lenet", batch=4))
    else:
        path.write_text(json.dumps(_mutate(good[1], how)))
    return path


def _batches():
    """One batch of 4 random MLP inputs (784 features, 10 classes), as a DL4J iterator."""
    import jpype

    from pyd4j.nd import from_numpy

    rng = np.random.default_rng(0)
    ds = jpype.JClass("org.nd4j.linalg.dataset.DataSet")(
        from_numpy(rng.random((4, 784), dtype=np.float32)), from_numpy(np.eye(10, dtype=np.float32)[:4].copy()))
    return jpype.JClass("org.deeplearning4j.datasets.iterator.utilty.ListDataSetIterator")(
        jpype.JClass("java.util.Collections").singletonList(ds), 4)


@pytest.mark.parametrize("how", CASES)
def test_the_one_liner_refuses_a_bad_plan_file_naming_it(jvm, tmp_path, good, how):
    import jpype

    key = f"PlannedTrainer.fit with a bad plan file: {how}"
    RESULTS[key] = False
    path = _write(tmp_path, how, good)
    net = network("mlp")
    before = np.array(net.params().toDoubleVector())
    it = _batches()
    with pytest.raises(jpype.JException) as err:
        jpype.JClass("org.pyd4j.train.PlannedTrainer").fit(net, it, str(path))
    message = str(err.value.getMessage())
    assert str(path) in message, message
    assert len(message) > 40 and "Exception" not in message.split(":")[0][-9:], message
    assert np.array_equal(np.array(net.params().toDoubleVector()), before), "trained under a bad plan"
    RESULTS[key] = True


def test_the_good_plan_trains(jvm, tmp_path, good):
    """The control: the same one-liner with the good file trains (the parameters move)."""
    import jpype

    net = network("mlp")
    before = np.array(net.params().toDoubleVector())
    it = _batches()
    stats = jpype.JClass("org.pyd4j.train.PlannedTrainer").fit(net, it, str(good[0]))
    assert stats is not None
    assert not np.array_equal(np.array(net.params().toDoubleVector()), before)
