"""What a network holds for inference: `pyd4j estimate --mode infer` (DL4J's inference workspaces
measured at batch 1 and a second batch, extended as a line) against what a served model holds at a larger
batch, measured (real DL4J in the session JVM)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from pyd4j import workspaces
from pyd4j.memory.estimate import EstimateError, estimate
from tests.train.conftest import NETWORKS

pytestmark = pytest.mark.jvm


@pytest.mark.parametrize("name", ["lenet", "resnet_graph", "lstm"])
def test_inference_estimate_predicts_the_served_footprint(jvm, name: str) -> None:
    from pyd4j.serve.model import ServedModel

    workspaces.destroy_all()
    m = ServedModel(name, NETWORKS / f"{name}.json", Path(tempfile.mkdtemp()))
    measured = m.load(32, slice_rows="whole")
    e = estimate(NETWORKS / f"{name}.json", 32, mode="infer")
    predicted = e.offheap_bytes - e.term_bytes("prefetch_buffers")
    assert e.term_bytes("parameters") == measured.params_bytes
    # an LSTM's workspaces grow a little faster than the line from batches 1 and 2 past batch 8 (0.88 at 32)
    assert abs(e.term_bytes("inference_workspaces") / measured.workspace_bytes - 1) <= 0.15, (e.terms, measured)
    assert abs(predicted / measured.total_bytes - 1) <= 0.15
    m.net = None
    workspaces.destroy_all()


def test_the_probe_leaves_no_workspace_on_the_calling_thread(jvm) -> None:
    """The probe runs on a thread of its own: the caller's workspaces are not touched."""
    workspaces.destroy_all()
    e = estimate(NETWORKS / "deep_cnn_bn.json", 8, mode="infer")
    assert e.term_bytes("inference_workspaces") > 0
    assert workspaces.held_bytes() == 0


# a network the generator drew (tests/dl4j/netgraph): an embedding of 4 whose inference workspaces hold
# 64 bytes at batches 1 and 2 alike (ND4J rounds allocations up), then 32 bytes per sample from batch 3
TINY = {"kind": "graph", "dtype": "FLOAT", "updater": "AMSGrad", "lr": 0.01, "seed": 6065, "batch": 3,
        "inputs": [{"kind": "index", "vocab": 2}],
        "layers": [{"class": "EmbeddingLayer", "nIn": 2, "nOut": 4, "act": "IDENTITY", "name": "embedding0",
                    "inputs": ["in0"]},
                   {"class": "LossLayer", "loss": "POISSON", "act": "SIGMOID", "labels": "count", "name": "loss1",
                    "inputs": ["embedding0"]}],
        "outputs": ["loss1"], "labels": [["ff", 4]]}


def test_a_tiny_networks_estimate_is_not_flattened_by_rounded_workspaces(jvm, tmp_path) -> None:
    """A line through batches 1 and 2 alone had no slope here: 0.43x of the footprint at batch 32."""
    from pyd4j.serve.model import ServedModel
    from tests.dl4j import netbuild
    from tests.dl4j.netcheck import sidecar

    path = tmp_path / "tiny.json"
    path.write_text(str(netbuild.configuration(TINY).toJson()))
    (tmp_path / "tiny.input.json").write_text(json.dumps({"inputs": sidecar(TINY)}))
    workspaces.destroy_all()
    m = ServedModel("tiny", path, tmp_path / "spill")
    measured = m.load(32, slice_rows="whole")
    m.net = None
    workspaces.destroy_all()
    e = estimate(path, 32, mode="infer")
    predicted = e.offheap_bytes - e.term_bytes("prefetch_buffers")
    assert measured.workspace_bytes > 32 * 16   # it grows with the batch
    assert abs(predicted / measured.total_bytes - 1) <= 0.15, (e.terms, measured)


# a generated network DL4J's NetworkMemoryReport refuses ("expected FeedForward input type" at its
# TimeDistributed layer), which output() runs
NO_REPORT = {"kind": "graph", "dtype": "FLOAT", "updater": "NoOp", "lr": 0.01, "seed": 16655, "batch": 6,
             "inputs": [{"kind": "rnn", "size": 2, "steps": 4}],
             "layers": [{"class": "TimeDistributed", "layer": {"class": "DenseLayer", "nOut": 4, "act": "TANH", "bias": True},
                         "name": "timedistributed0", "inputs": ["in0"]},
                        {"class": "LastTimeStepVertex", "maskInput": "in0", "name": "lasttimestepvertex1",
                         "inputs": ["timedistributed0"]},
                        {"class": "CenterLossOutputLayer", "nOut": 4, "loss": "MCXENT", "act": "SOFTMAX",
                         "labels": "onehot", "name": "centerlossoutput2", "inputs": ["lasttimestepvertex1"]}],
             "outputs": ["centerlossoutput2"], "labels": [["ff", 4]], "mask": False}


def test_an_inference_estimate_needs_no_dl4j_memory_report(jvm, tmp_path) -> None:
    """Inference measures what it predicts; DL4J's report is only its cross-check, so a network whose
    report DL4J cannot build still gets an estimate (the server printed none beside it)."""
    from pyd4j.serve.model import ServedModel
    from tests.dl4j import netbuild
    from tests.dl4j.netcheck import sidecar

    path = tmp_path / "td.json"
    path.write_text(str(netbuild.configuration(NO_REPORT).toJson()))
    (tmp_path / "td.input.json").write_text(json.dumps({"inputs": sidecar(NO_REPORT)}))
    with pytest.raises(EstimateError, match="cannot build a memory report"):
        estimate(path, 8, mode="train")
    workspaces.destroy_all()
    m = ServedModel("td", path, tmp_path / "spill")
    measured = m.load(32, slice_rows="whole")
    m.net = None
    workspaces.destroy_all()
    assert measured.estimate_bytes is not None, measured.estimate_error
    e = estimate(path, 32, mode="infer")
    assert e.term_bytes("parameters") == measured.params_bytes > 0
    assert any("memory report" in note for note in e.notes)
    assert abs(measured.estimate_bytes / measured.total_bytes - 1) <= 0.15, (e.terms, measured)
