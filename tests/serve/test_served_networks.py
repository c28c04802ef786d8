"""Networks the generator of tests/dl4j drew that the server once failed to load: an embedding layer's
index input (the footprint was measured on random inputs, and DL4J refuses a negative index), and a
graph whose DL4J memory report cannot be built (the model failed to load because the estimate printed
beside its measured footprint failed). Real DL4J; the models are written as `conf.toJson()` with
their input sidecar, as a user hands them to `pyd4j serve`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.dl4j import netbuild
from tests.dl4j.netcheck import sidecar

pytestmark = pytest.mark.jvm

BASE = {"dtype": "FLOAT", "updater": "Adam", "lr": 0.01, "seed": 7, "batch": 3}
EMBEDDING = {"kind": "multilayer", **BASE, "inputs": [{"kind": "index", "vocab": 5}],
             "layers": [{"class": "EmbeddingLayer", "nIn": 5, "nOut": 3, "act": "IDENTITY"},
                        {"class": "OutputLayer", "nOut": 2, "loss": "MCXENT", "act": "SOFTMAX", "labels": "onehot"}],
             "labels": [["ff", 2]]}
TIME_DISTRIBUTED = {
    "kind": "graph", **BASE, "inputs": [{"kind": "rnn", "size": 2, "steps": 4}],
    "layers": [{"class": "TimeDistributed", "layer": {"class": "DenseLayer", "nOut": 3, "act": "TANH", "bias": True},
                "name": "td", "inputs": ["in0"]},
               {"class": "RnnOutputLayer", "nOut": 2, "loss": "MSE", "act": "IDENTITY", "labels": "real",
                "name": "out", "inputs": ["td"]}],
    "outputs": ["out"], "labels": [["rnn", 2, 4]]}


def written(spec: dict, folder: Path, name: str) -> Path:
    path = folder / f"{name}.json"
    path.write_text(str(netbuild.configuration(spec).toJson()))
    (folder / f"{name}.input.json").write_text(json.dumps({"inputs": sidecar(spec)}))
    return path


def test_an_embedding_network_loads_and_answers_at_its_largest_batch(jvm, tmp_path: Path) -> None:
    import numpy as np

    from pyd4j.serve.model import ServedModel

    m = ServedModel("emb", written(EMBEDDING, tmp_path, "emb"), tmp_path / "spill")
    fp = m.load(32, slice_rows="whole")
    assert fp.total_bytes == fp.params_bytes + fp.workspace_bytes + fp.io_bytes
    assert fp.params_bytes == (5 * 3 + 3 * 2 + 2) * 4   # embedding W (no bias), output W and b, float32
    assert fp.estimate_bytes is not None and fp.estimate_bytes > fp.params_bytes   # never below the parameters
    (y,) = m.infer([np.array([[4.0]] * 32, dtype=np.float32)])   # the largest index the layer takes
    assert y.shape == (32, 2) and np.allclose(y.sum(axis=1), 1.0, atol=1e-5)


def test_fake_estimate_failure_the_model_is_served_all_the_same_and_says_why(jvm, tmp_path: Path, monkeypatch) -> None:
    """The estimate is printed beside the measured footprint, never instead of it: a model pyd4j cannot
    estimate still serves (the estimate's failure is faked; its network is real)."""
    from pyd4j.memory.estimate import EstimateError
    from pyd4j.serve.model import ServedModel

    def fails(*args, **kwargs):
        raise EstimateError("no estimate for this network (faked)")
    monkeypatch.setattr("pyd4j.serve.model.estimate", fails)
    path = written(TIME_DISTRIBUTED, tmp_path, "td")
    fp = ServedModel("td", path, tmp_path / "spill").load(8, slice_rows="whole")
    assert fp.estimate_bytes is None and "no estimate for this network (faked)" in fp.estimate_error
    assert fp.io_bytes == 8 * (2 * 4 + 2 * 4) * 4 and fp.to_dict()["estimate_bytes"] is None
