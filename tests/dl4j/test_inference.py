"""What a network holds for inference: `pyd4j estimate --mode infer` (DL4J's inference workspaces
measured at two small batches, extended as a line) against what a served model holds at a larger
batch, measured (real DL4J in the session JVM)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from pyd4j import workspaces
from pyd4j.memory.estimate import estimate
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
