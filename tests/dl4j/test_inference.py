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


def loaded(spec: dict, folder: Path, name: str, batch: int):
    """A generated network written as `conf.toJson()` with its input sidecar and loaded by the server at
    `batch` in whole calls: (its configuration path, the served model)."""
    from pyd4j.serve.model import ServedModel
    from tests.dl4j import netbuild
    from tests.dl4j.netcheck import sidecar

    path = folder / f"{name}.json"
    path.write_text(str(netbuild.configuration(spec).toJson()))
    (folder / f"{name}.input.json").write_text(json.dumps({"inputs": sidecar(spec)}))
    workspaces.destroy_all()
    m = ServedModel(name, path, folder / "spill")
    m.load(batch, slice_rows="whole")
    return path, m


def served(spec: dict, folder: Path, name: str):
    """The same at batch 32, released after: (its configuration path, its measured footprint)."""
    path, m = loaded(spec, folder, name, 32)
    m.net = None
    workspaces.destroy_all()
    return path, m.footprint


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
    path, measured = served(TINY, tmp_path, "tiny")
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
    path, measured = served(NO_REPORT, tmp_path, "td")
    with pytest.raises(EstimateError, match="cannot build a memory report"):
        estimate(path, 8, mode="train")
    assert measured.estimate_bytes is not None, measured.estimate_error
    e = estimate(path, 32, mode="infer")
    assert e.term_bytes("parameters") == measured.params_bytes > 0
    assert any("memory report" in note for note in e.notes)
    assert abs(measured.estimate_bytes / measured.total_bytes - 1) <= 0.15, (e.terms, measured)


# a generated graph of three outputs whose inference workspaces grow at calls 2, 3, 5 and 9
LATE_LEARNER = {"kind": "graph", "dtype": "FLOAT", "updater": "default", "lr": 0.01, "seed": 2, "batch": 2,
                "inputs": [{"kind": "cnnflat", "channels": 3, "height": 6, "width": 3}],
                "layers": [{"class": "ZeroPaddingLayer", "padding": [0, 1, 1, 1], "name": "zeropadding0", "inputs": ["in0"]},
                           {"class": "Cropping2D", "cropping": [0, 1, 1, 0], "name": "cropping2d1", "inputs": ["in0"]},
                           {"class": "Deconvolution2D", "nOut": 4, "act": "TANH", "kernel": [1, 1], "stride": [1, 1],
                            "padding": [0, 0], "mode": "Truncate", "out": [7, 5], "name": "deconvolution2d2",
                            "inputs": ["zeropadding0"]},
                           {"class": "L2NormalizeVertex", "name": "l2normalizevertex3", "inputs": ["deconvolution2d2"]},
                           {"class": "ElementWiseVertex", "op": "Max", "name": "elementwisevertex4",
                            "inputs": ["zeropadding0", "zeropadding0", "zeropadding0"]},
                           {"class": "L2Vertex", "name": "l2vertex5", "inputs": ["elementwisevertex4", "zeropadding0"]},
                           {"class": "OutputLayer", "nOut": 2, "loss": "NEGATIVELOGLIKELIHOOD", "act": "SOFTMAX",
                            "labels": "onehot", "name": "output6", "inputs": ["cropping2d1"]},
                           {"class": "CnnLossLayer", "loss": "MSE", "act": "IDENTITY", "labels": "real", "name": "cnnloss7",
                            "inputs": ["l2normalizevertex3"]},
                           {"class": "LossLayer", "loss": "MSE", "act": "IDENTITY", "labels": "real", "name": "loss8",
                            "inputs": ["l2vertex5"]}],
                "outputs": ["output6", "cnnloss7", "loss8"], "labels": [["ff", 2], ["cnn", 4, 7, 5], ["ff", 1]]}


def test_workspaces_that_learn_one_after_another_are_settled_at_their_last_size(jvm, tmp_path) -> None:
    """Three equal calls in a row after 8 took this graph's 1.2 KB for settled; from the 9th call its
    workspaces hold 2.1 KB. Settled is what 24 more calls leave, and the estimate at batch 1 is it."""
    from pyd4j.dl4j.inference import example_inputs, output, settled_workspace_bytes

    path, m = loaded(LATE_LEARNER, tmp_path, "late", 1)
    x = example_inputs([s.shape[1:] for s in m.inputs], 1, m.params_dtype)
    workspaces.destroy_all()
    settled, _ = settled_workspace_bytes(lambda: output(m.net, m.kind, x))
    later = []
    for _ in range(24):
        output(m.net, m.kind, x)
        later.append(workspaces.held_bytes())
    workspaces.destroy_all()
    assert settled == max(later), (settled, later)
    e = estimate(path, 1, mode="infer")
    assert e.term_bytes("inference_workspaces") == settled
    m.net = None


# a generated network without parameters whose one-row output is a view: its activation workspace holds
# nothing at one row and a copy of the output at any other batch
RNN_LOSS = {"kind": "multilayer", "dtype": "DOUBLE", "updater": "Nesterovs", "lr": 0.1, "seed": 3, "batch": 2,
            "inputs": [{"kind": "rnn", "size": 1, "steps": 3}],
            "layers": [{"class": "RnnLossLayer", "loss": "MEAN_SQUARED_LOGARITHMIC_ERROR", "act": "SIGMOID",
                        "labels": "positive"}],
            "labels": [["rnn", 1, 3]], "mask": False}


def test_a_served_footprint_is_learnt_at_the_largest_batch_not_at_one_row(jvm, tmp_path) -> None:
    """The server's first call (one row, for the output shapes) left a workspace that learnt 0 bytes and
    stayed empty at batch 32 (its copies went outside it, uncounted): the footprint was half the estimate."""
    _, measured = served(RNN_LOSS, tmp_path, "rnnloss")
    assert measured.params_bytes == 0
    # a copy of the output, 32 rows of 3 steps (float64 by the sidecar's data type, or float32)
    assert measured.workspace_bytes >= 32 * 3 * 4, measured
    assert abs(measured.estimate_bytes / measured.total_bytes - 1) <= 0.15, measured
