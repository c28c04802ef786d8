"""pyd4j.dl4j.fitmem without a JVM: DL4J's fit() memory of small networks counted by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyd4j.dl4j.graph import graph_from_dl4j_json
from pyd4j.dl4j.fitmem import batchnorm_input_bytes, epsilon_bytes, fit_bytes, fit_terms, learning_bytes, updater_state_elements
from pyd4j.dl4j.updater_state import UnknownUpdater

NETWORKS = Path(__file__).resolve().parents[2] / "examples" / "networks"
MLP_PARAMS = 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10


def _mlp(batch: int = 64, updater: str | None = None):
    doc = json.loads((NETWORKS / "mlp.json").read_text())
    if updater:
        for conf in doc["confs"]:
            conf["layer"]["iupdater"] = {"@class": f"org.nd4j.linalg.learning.config.{updater}"}
    return graph_from_dl4j_json(doc, batch)


def test_mlp_by_hand():
    g = _mlp(64)
    t = {x.name: x for x in fit_terms(g)}
    assert (t["parameters"].fixed_bytes, t["gradients"].fixed_bytes) == (MLP_PARAMS * 4, MLP_PARAMS * 4)
    assert t["updater_state"].fixed_bytes == 2 * MLP_PARAMS * 4          # Adam: m and v
    assert t["activations"].per_sample_bytes == round((512 + 256 + 10) * 4 * 1.05)
    assert t["working_memory"].per_sample_bytes == round(4 * 512 * 4 * 1.02)
    assert t["epsilons"].per_sample_bytes == round((784 + 512) * 4 * 1.02)
    assert t["batchnorm_backlog"].per_sample_bytes == 0
    assert learning_bytes(g) == (4 * 512 + 784 + 512 + 512 + 256 + 10) * 4 * 64
    assert fit_bytes(g) == sum(x.bytes_at(64) for x in t.values())


def test_batchnorm_backlog_by_hand():
    """deep_cnn_bn at batch 2: six batch normalizations, each after a convolution, on 32x32x32, 32x32x32,
    64x16x16, 64x16x16, 128x8x8, 128x8x8 inputs; two arrays of each input per iteration, two iterations."""
    doc = json.loads((NETWORKS / "deep_cnn_bn.json").read_text())
    g = graph_from_dl4j_json(doc, 2, (3, 32, 32))
    inputs = (2 * 32 * 32 * 32 + 2 * 64 * 16 * 16 + 2 * 128 * 8 * 8) * 4
    assert batchnorm_input_bytes(g) == inputs * 2
    t = {x.name: x for x in fit_terms(g)}
    assert t["batchnorm_backlog"].per_sample_bytes == 2 * 2 * inputs


@pytest.mark.parametrize(("updater", "per"), [("Sgd", 0), ("Nesterovs", 1), ("AMSGrad", 3)])
def test_updater_state_follows_the_updater(updater, per):
    assert updater_state_elements(_mlp(8, updater)) == per * MLP_PARAMS


def test_unknown_updater_is_named():
    with pytest.raises(UnknownUpdater, match="'MyUpdater'"):
        fit_terms(_mlp(8, "MyUpdater"))


def test_graph_epsilons_are_the_most_held_at_once():
    """two_input at batch 4, backward in reverse order: fc's gradient (512 B) is replaced by merge's (768),
    merge hands img_fc 512 and meta_fc 256; img_fc's backward leaves img_pool's 4608 with meta_fc's 256;
    img_pool's leaves img_conv's 18432 with meta_fc's 256 still held -- the most at once."""
    doc = json.loads((NETWORKS / "two_input.json").read_text())
    g = graph_from_dl4j_json(doc, 4, [(1, 12, 12), (6,)])
    assert epsilon_bytes(g) == 4 * 8 * 12 * 12 * 4 + 4 * 16 * 4
