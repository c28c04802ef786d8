"""The dependency model: framework table, lookups, overrides, and what it says about a graph."""

from __future__ import annotations

import pytest

from pyd4j.sched import deps
from pyd4j.sched.graph import Graph
from pyd4j.sched.plan import Kind, aligned, tid

# The SuperNeurons release code's register_backward_dependency calls, minus the layer's own
# gradient buffers it writes (b_data = dx, weight/bias grads = dw): src/layer/*.cpp.
RELEASE_BACKWARD_READS = {
    "CONV": {"x", "dy", "w"},  # weight, dEdD_n, t_in (+ dEdD_c, weight_grad, buffers)
    "FC": {"x", "dy", "w"},  # t_in, dEdD_n, weight
    "POOL": {"x", "y", "dy"},  # t_out, t_in, dEdD_n
    "ACT": {"x", "y", "dy"},  # t_out, t_in, dEdD (dx is dEdD itself)
    "BN": {"x", "dy", "w"},  # t_in, dEdD_n, gamma
    "LRN": {"x", "y", "dy"},  # f_out, f_in, dEdD
    "DROPOUT": {"dy"},  # dEdD, dropout_buff
    "SOFTMAX": {"x", "y"},  # t_out, label, t_in
    "CONCAT": {"dy"},
    "JOIN": {"dy"},
    "FORK": {"dy"},
}


@pytest.mark.parametrize("key, reads", sorted(RELEASE_BACKWARD_READS.items()))
def test_cudnn_profile_is_the_release_codes_backward_sets(key: str, reads: set[str]) -> None:
    entry = deps.framework_deps("cudnn").layers[key]
    assert set(entry.backward.reads) == reads
    assert "y" not in entry.backward.reads or key in ("POOL", "ACT", "LRN", "SOFTMAX")


def test_profiles_release_or_keep_dw_and_name_their_state() -> None:
    cudnn, dl4j = deps.framework_deps("cudnn"), deps.framework_deps("dl4j")
    assert not cudnn.keep_dw and dl4j.keep_dw
    assert set(cudnn.layers["BN"].state) == {"running_mean", "running_var"}
    # DL4J keeps no persistent state besides its parameters: BN's xMu/xHat/std and dropout masks
    # live from a forward step to its backward step (saved)
    assert not any(e.state for e in dl4j.layers.values())
    assert dl4j.layers["DROPOUT"].saved.x == 1 and dl4j.layers["BN"].saved.x == 2
    assert dl4j.input_dropout.saved.x == 2 and not dl4j.input_dropout.backward_reads_x
    assert deps.framework_names() == ["cudnn", "dl4j"]
    with pytest.raises(deps.DepsError, match="unknown framework 'caffe'.*cudnn"):
        deps.framework_deps("caffe")


def small(framework: str) -> Graph:
    g = Graph("t", 2, framework=framework)
    x = g.data(3, 4, 4)
    c = g.conv(x, 4, 3, 1, 1, name="c")
    a = g.act(c, fused=True, name="a")
    b = g.bn(a, name="b")
    r = g.act(b, name="r")
    j = g.join([r, a], name="j")
    dr = g.dropout(j, name="d")
    g.softmax(g.fc(dr, 3, name="f"), name="s")
    return g


def test_graph_deps_under_cudnn() -> None:
    g = small("cudnn")
    d = g.deps
    ids = {layer.name: layer.id for layer in g.layers}
    c, a, b, r, j, dr, f, s = (ids[k] for k in "cabrjdfs")
    assert d.bwd_reads[c] == (0,) and d.bwd_dy[c] and d.bwd_dw[c]  # x, not y
    assert d.bwd_reads[a] == (c, a)  # ACT reads x and y
    assert d.bwd_reads[j] == () and d.bwd_reads[dr] == ()
    assert d.bwd_reads[s] == (f, s)
    assert d.fwd_inplace == [-1] * len(g)  # cuDNN layers here write new outputs
    # JOIN writes r's gradient over its own (it is the first to contribute); a's gradient has
    # two contributions (join, bn): JOIN comes first in the backward pass, so it may too,
    # but only one input per step is written in place
    assert d.bwd_inplace[j] == (r, tid(j, Kind.DY))
    assert d.bwd_inplace[r] == (b, tid(r, Kind.DY))
    assert d.bwd_inplace[a] == (c, tid(a, Kind.DY))
    assert d.bwd_inplace[s] == (f, tid(s, Kind.Y))
    assert d.state_bytes[b] == aligned(2 * 4 * 4)  # running mean + variance, 4 channels
    assert d.state_bytes[dr] == aligned(g.layers[dr].out_bytes // 8)
    assert not d.keep_dw and d.ws_bwd == [0] * len(g)


def test_graph_deps_under_dl4j() -> None:
    g = small("dl4j")
    d = g.deps
    ids = {layer.name: layer.id for layer in g.layers}
    c, a, b, r, j, s, f = (ids[k] for k in "cabrjsf")
    assert d.fwd_inplace[a] == c  # the conv's activation is applied in place
    assert d.fwd_inplace[r] == -1  # an ActivationLayer of its own keeps its input
    assert d.bwd_reads[r] == (b,) and d.bwd_reads[s] == (f,)  # the output layer reads its input
    assert d.bwd_inplace[j] is None  # ElementWiseVertex copies the gradient
    im2col = 3 * 9 * 4 * 4 * 2 * 4
    fw = deps.framework_deps("dl4j")
    assert fw.layers["CONV"].forward.workspace.of(g, g.layers[c]) == im2col
    assert fw.layers["CONV"].backward.workspace.of(g, g.layers[c]) == 4 * g.layers[c].out_bytes + 3 * im2col
    # DL4J's working-memory workspace keeps the largest step's size: every step holds it
    assert fw.scratch == "held"
    assert set(d.ws_fwd) == set(d.ws_bwd) == set(d.ws_rc) == {aligned(4 * g.layers[c].out_bytes + 3 * im2col)}
    assert d.state_bytes == [0] * len(g)  # nothing resident besides parameters
    x_b = g.layers[a].out_bytes
    assert d.saved_bytes[b] == aligned(2 * x_b + 4 * 4)  # xMu, xHat, std
    assert d.saved_bytes[ids["d"]] == aligned(g.layers[j].out_bytes)  # the mask
    assert d.nbytes[5 * len(g) + b] == d.saved_bytes[b]
    assert d.inplace_owner()[c] == a
    # a second reader of the conv output forbids the in-place activation
    g2 = Graph("t2", 2, framework="dl4j")
    x = g2.data(3, 4, 4)
    c2 = g2.conv(x, 3, 3, 1, 1)
    a2 = g2.act(c2, fused=True)
    g2.softmax(g2.fc(g2.join([a2, c2]), 3))
    assert g2.deps.fwd_inplace[a2] == -1


def test_overrides_replace_one_step_and_are_validated(tmp_path) -> None:
    doc = {"frameworks": {"dl4j": {"layers": {"POOL": {"backward": {
        "reads": ["x", "y", "dy"], "writes": ["dx"], "workspace": {"y": 1}}}}}}}
    p = deps.framework_deps("dl4j", doc)
    assert p.layers["POOL"].backward.reads == {"x", "y", "dy"}
    assert p.layers["POOL"].forward == deps.framework_deps("dl4j").layers["POOL"].forward
    assert deps.framework_deps("dl4j").layers["POOL"].backward.reads == {"x", "dy"}  # table untouched
    g = small("cudnn").with_framework(p)
    assert g.framework is p and g.deps.framework is p
    assert g.profile is p   # the attribute's old name
    bad = {"frameworks": {"dl4j": {"layers": {"POOL": {"backward": {"reads": ["dx"]}}}}}}
    with pytest.raises(deps.DepsError, match="POOL backward: reads \\['dx'\\]"):
        deps.framework_deps("dl4j", bad)
    f = tmp_path / "o.json"
    f.write_text('{"frameworks": {"cudnn": {"keep_dw": true}}}')
    assert deps.framework_deps("cudnn", f).keep_dw
    f.write_text('{"profiles": {"cudnn": {"keep_dw": true}}}')   # the key's old name, in documents users have
    assert deps.framework_deps("cudnn", f).keep_dw


def test_missing_entry_names_the_layer_and_the_fix() -> None:
    p = deps.FrameworkDeps("bare", "", False, {"DATA": deps.framework_deps("cudnn").layers["DATA"]})
    g = Graph("t", 1, framework=p)
    g.data(3, 2, 2)
    g.conv(0, 2, 1, name="c1")
    with pytest.raises(deps.DepsError, match="no entry for CONV layer 'c1'.*deps.json"):
        g.deps
