"""What DL4J 1.0.0-M2.1's layers read and keep between forward and backward, measured with ND4J.

`org.pyd4j.fixtures.LayerFacts` runs each layer type and graph vertex in a real DL4J network on
the CPU backend: it lists the arrays the layer's fields hold after its forward step and after its
backprop, overwrites its input and its output with NaN between the two to see whether backprop
reads them, measures what each step allocates in DL4J's working-memory workspace, and checks what
dropout and batch normalization do with their state. These tests pin the facts planned training
and the planner's `dl4j` framework entries are built on: a DL4J upgrade that changes one fails here.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from pyd4j.jvm.classpath import classpath
from tests.train.conftest import FIXTURES_JAR

pytestmark = [pytest.mark.jvm, pytest.mark.slow]

LAYERS = ("conv", "conv_first", "conv_same_stride2", "conv_dropout", "dense", "dense_dropout",
          "dense_after_conv", "batchnorm_cnn", "batchnorm_dense", "activation_relu",
          "activation_sigmoid", "activation_softmax", "activation_swish", "maxpool", "avgpool", "lrn", "dropout_layer", "global_max",
          "global_avg", "output", "output_dropout")

# whether backprop reads the values of the layer's input (overwritten with NaN; it never reads its own output)
READS_VALUES = {"conv": True, "conv_first": True, "conv_same_stride2": True, "conv_dropout": True,
               "dense": True, "dense_dropout": True, "dense_after_conv": True,
               "batchnorm_cnn": True, "batchnorm_dense": True, "activation_relu": True,
               "activation_sigmoid": True, "activation_softmax": True, "activation_swish": True,
               "maxpool": True, "avgpool": False, "lrn": True,
               "dropout_layer": False, "global_max": True, "global_avg": False, "output": True,
               "output_dropout": True, "add": False, "product": True, "max": True,
               "merge": False, "subset": False, "subtract": False, "average": False}
# whether backprop needs the layer's input array alive (released before backprop): average pooling
# reads no value of it, but DL4J hands it to avgpool2d_bp, which fails on a released buffer
READS_INPUT = {**READS_VALUES, "avgpool": True}
VERTICES = ("add", "product", "max", "merge", "subset", "subtract", "average")


@pytest.fixture(scope="module")
def facts() -> dict[str, dict]:
    cp = ":".join([str(FIXTURES_JAR)] + classpath())
    out = subprocess.run(["java", "-Xmx1g", "-cp", cp, "org.pyd4j.fixtures.LayerFacts"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    docs = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return {d["case"]: d for d in docs}


def held(case: dict, when: str = "forward") -> dict[str, int]:
    """Arrays the layer holds besides its input: field -> bytes."""
    return {h["field"]: h["bytes"] for h in case[f"held_after_{when}"] if not h["is_input"]}


def test_every_case_ran(facts: dict[str, dict]) -> None:
    assert set(LAYERS) | set(VERTICES) | {"dropout_state", "batchnorm_state"} <= set(facts)


def test_no_helper_on_the_cpu_backend(facts: dict[str, dict]) -> None:
    # DL4J's Java implementations run (no MKL-DNN/cuDNN helper): their arrays are what we measure
    assert all(facts[c]["helper"] is None for c in LAYERS)


def test_backprop_never_reads_the_layers_own_output(facts: dict[str, dict]) -> None:
    # Dense and Convolution recompute the pre-activation from the stored input
    assert not any(facts[c].get("backward_reads_output") for c in LAYERS)


def test_which_steps_read_their_input_and_the_trainer_agrees(facts: dict[str, dict]) -> None:
    assert {c: facts[c]["backward_reads_input"] for c in READS_VALUES} == READS_VALUES
    for c in LAYERS:
        assert facts[c]["trainer_backward_reads_input"] == READS_INPUT[c], c


def test_a_backward_said_not_to_read_its_input_runs_with_the_input_released(facts: dict[str, dict]) -> None:
    """Every claim "backward does not read X" (the trainer may close X before the backward step),
    checked by closing X between forward and backprop: backprop runs and gives the same input
    gradient and parameter gradients, bit for bit. Where backprop needs its input, releasing it
    fails (so the check can see a wrong claim)."""
    for c in (*LAYERS, *VERTICES):
        outcome = facts[c]["backward_with_input_closed"]
        if READS_INPUT[c] and c not in ("conv_dropout", "dense_dropout"):
            assert outcome.startswith("error"), (c, outcome)
        else:
            assert outcome == "same", (c, outcome)
    # input dropout with input modification forbidden (as the trainer runs): the layer keeps its
    # own dropped copy, so the producer's output may be released (the framework's input_dropout)
    for c in ("conv_dropout", "dense_dropout"):
        assert facts[c]["backward_with_input_closed"] == "same", c
    # the output layer is not activated in training: its input dropout runs inside backprop, on
    # the producer's output, which must stay alive (the framework's input_dropout does not apply)
    assert facts["output_dropout"]["backward_with_input_closed"].startswith("error")
    from pyd4j.sched.graph import Graph  # noqa: PLC0415

    g = Graph("output_dropout", 4, framework="dl4j")
    h = g.fc(g.data(6), 6)
    out = g.softmax(h)
    g.layers[out].attrs["idropout"] = 0.5
    assert h in g.deps.bwd_reads[out]


def test_no_backward_needs_its_own_output_released_or_not(facts: dict[str, dict]) -> None:
    """The dl4j framework entries say no backward step reads the node's own output: releasing it between
    forward and backprop changes nothing."""
    for c in (*LAYERS, *VERTICES):
        if c in ("output", "output_dropout"):   # not activated in training: no output
            continue
        assert facts[c]["backward_with_output_closed"] == "same", c


def test_every_layer_keeps_a_reference_to_its_given_input(facts: dict[str, dict]) -> None:
    for c in LAYERS:
        assert facts[c]["input_field_is_given_array"], c


def test_batch_norm_keeps_two_input_sized_arrays_until_backprop(facts: dict[str, dict]) -> None:
    for c, channels in (("batchnorm_cnn", 4), ("batchnorm_dense", 6)):
        f = facts[c]
        assert held(f) == {"xMu": f["x_bytes"], "xHat": f["x_bytes"], "std": 4 * channels}
        assert held(f, "backward") == {"std": 4 * channels}  # backprop drops xMu and xHat, not std
        assert sorted(f["trainer_caches"]) == ["std", "xHat", "xMu"]


def test_dropout_keeps_a_mask_of_the_inputs_size_until_backprop(facts: dict[str, dict]) -> None:
    for c in ("conv_dropout", "dense_dropout", "dropout_layer"):
        f = facts[c]
        assert held(f) == {"dropout.mask": f["x_bytes"]}, c
        assert "dropout.mask" not in held(f, "backward"), c
        assert "dropout.mask" in f["trainer_caches"], c
    s = facts["dropout_state"]
    assert s["mask_bytes_over_input"] == 1.0 and s["mask_after_backprop"] == "null"
    # the network allows input modification for every layer but the first: dropout then
    # overwrites the previous layer's output in place; forbidden, it writes a new array
    assert s["in_place_when_allowed"] and s["copy_when_modification_forbidden"]
    assert s["dropout_layer_output_is_new_when_forbidden"]
    assert facts["conv"]["input_modification_allowed"] and not facts["conv_first"]["input_modification_allowed"]
    # recomputation reproduces the mask when the random state is restored, and only then
    assert s["same_mask_for_same_random_state"] and s["new_mask_otherwise"]


def test_recomputing_a_forward_step_with_the_random_state_restored_is_exact(facts: dict[str, dict]) -> None:
    assert all(facts[c]["recompute_identical"] for c in LAYERS)


def test_batch_norm_running_statistics_change_only_through_the_update(facts: dict[str, dict]) -> None:
    s = facts["batchnorm_state"]
    assert s["params"] == ["gamma", "beta", "mean", "log10stdev"]
    # forward in training mode (even twice: a recomputation) and backprop leave them alone;
    # backprop writes their "gradient", a NoOp updater applies it: once per iteration
    assert s["params_unchanged_by_forward_twice"] and s["params_unchanged_by_backprop"]
    assert s["running_stats_have_gradient"] and s["running_mean_changed_by_update"]
    assert s["running_stats_updater"] == "NoOp"


def test_output_layer_is_not_activated_in_training_and_keeps_its_labels(facts: dict[str, dict]) -> None:
    for c in ("output", "output_dropout"):
        assert held(facts[c]) == {"labels": 4 * 3 * 4}  # N=4 rows of 3 classes, float
        assert facts[c]["y_bytes"] == 0


def test_outputs_and_gradients_are_new_arrays(facts: dict[str, dict]) -> None:
    for c in LAYERS:
        if c != "dropout_layer":
            assert not facts[c]["output_is_input"], c
        assert not facts[c]["dx_is_epsilon"], c
    for c in VERTICES:
        f = facts[c]
        assert not f["output_is_input"] and not f["output_view"], c
        assert not any(g["shares_epsilon_memory"] or g["shares_other_gradient"] or g["view"]
                       for g in f["input_gradients"]), c


def test_preprocessors_reshape_without_copying(facts: dict[str, dict]) -> None:
    f = facts["dense_after_conv"]
    assert f["preprocessor"] == "CnnToFeedForwardPreProcessor"
    assert f["preprocessed_is_view_of_input"] and f["preprocessor_backprop_is_view_of_epsilon"]


def aligned32(n: int) -> int:
    """ND4J workspaces hand out memory in 32-byte steps."""
    return -(-n // 32) * 32


def test_working_memory_of_each_step(facts: dict[str, dict]) -> None:
    """Bytes a step allocates in DL4J's working-memory workspace (freed with the scope)."""
    for c in ("conv", "conv_first", "conv_same_stride2", "conv_dropout"):
        f = facts[c]
        # forward: the im2col patch matrix; backward: the patch matrix again, its gradient and
        # the col2im buffer, plus the recomputed pre-activation (an ACTIVATIONS array: working
        # memory in backprop, as DL4J's own backprop places it), its copy and ReLU's two buffers
        assert f["ws_forward_bytes"] == f["im2col_bytes"], c
        assert f["ws_backward_bytes"] == 3 * f["im2col_bytes"] + 4 * f["y_bytes"], c
    for c in ("dense", "dense_after_conv"):   # ReLU: the pre-activation, its copy, ReLU's two buffers
        f = facts[c]
        assert f["ws_forward_bytes"] == aligned32(f["y_bytes"]), c
        assert f["ws_backward_bytes"] == 4 * aligned32(f["y_bytes"]), c
    for c in ("batchnorm_cnn", "batchnorm_dense"):
        f = facts[c]
        assert 0 <= f["ws_forward_bytes"] - 2 * f["x_bytes"] <= 512, c   # + per-channel mean/var
        assert 0 <= f["ws_backward_bytes"] - 4 * f["x_bytes"] <= 512, c
    # ActivationLayer backprops on a copy of its input; ReLU's backprop allocates one more
    assert facts["activation_relu"]["ws_forward_bytes"] == 0
    assert facts["activation_relu"]["ws_backward_bytes"] == 2 * facts["activation_relu"]["x_bytes"]
    assert facts["activation_sigmoid"]["ws_backward_bytes"] == facts["activation_sigmoid"]["x_bytes"]
    for c in ("maxpool", "avgpool"):
        assert facts[c]["ws_forward_bytes"] == 0 and facts[c]["ws_backward_bytes"] == facts[c]["y_bytes"]
    assert facts["lrn"]["ws_forward_bytes"] == 2 * facts["lrn"]["x_bytes"]
    assert facts["lrn"]["ws_backward_bytes"] == 8 * facts["lrn"]["x_bytes"]
    assert facts["dropout_layer"]["ws_backward_bytes"] == facts["dropout_layer"]["x_bytes"]
    for c in ("global_max", "global_avg"):
        f = facts[c]
        assert f["ws_forward_bytes"] == f["y_bytes"]
        assert f["ws_backward_bytes"] == f["x_bytes"] + f["y_bytes"]


# the planner's `dl4j` framework entry (pyd4j/sched/deps.json) of each measured case
PROFILE_KEY = {"conv": "CONV", "conv_first": "CONV", "conv_same_stride2": "CONV",
               "conv_dropout": "CONV", "dense": "FC", "dense_dropout": "FC", "dense_after_conv": "FC",
               "batchnorm_cnn": "BN", "batchnorm_dense": "BN", "activation_relu": "ACT",
               "activation_sigmoid": "ACT", "activation_softmax": "ACT", "activation_swish": "ACT",
               "maxpool": "POOL", "avgpool": "POOL.avg", "lrn": "LRN",
               "dropout_layer": "DROPOUT", "global_max": "POOL.global_max",
               "global_avg": "POOL.global_avg", "output": "SOFTMAX", "output_dropout": "SOFTMAX",
               "add": "JOIN", "product": "ELTWISE.prod", "max": "ELTWISE.max", "merge": "CONCAT",
               "subtract": "ELTWISE.sum", "average": "ELTWISE.sum"}
UPPER_BOUNDS = {("activation_sigmoid", "backward"), ("activation_softmax", "backward"),
                ("activation_swish", "backward"), ("max", "backward")}  # the entry covers the larger case


def test_the_planners_dl4j_profile_is_what_was_measured(facts: dict[str, dict]) -> None:
    """The planner's model of DL4J (deps.json, framework dl4j) against ND4J's measurements: what each
    backward step reads, what each step allocates in DL4J's working memory, what a forward step
    keeps for its backward step."""
    from pyd4j.sched.deps import framework_deps  # noqa: PLC0415

    fw = framework_deps("dl4j")
    for case, key in PROFILE_KEY.items():
        f, e = facts[case], fw.layers[key]
        assert "y" not in e.backward.reads, case
        assert ("x" in e.backward.reads) == READS_INPUT[case], case
        pre_output = 4 * 3 * 4 if key == "SOFTMAX" else 0   # the output layer is not activated: y_bytes 0
        sizes = {"x": f.get("x_bytes") or 0, "y": f["y_bytes"] or pre_output, "im2col": f.get("im2col_bytes") or 0}
        for step in ("forward", "backward"):
            ws = getattr(e, step).workspace
            modelled = ws.x * sizes["x"] + ws.y * sizes["y"] + ws.im2col * sizes["im2col"]
            measured = f[f"ws_{step}_bytes"]
            # ND4J hands out 32-byte granules; per-channel statistics are a few hundred bytes
            slack = 512 if ws.channels else 32 * 4
            if (case, step) in UPPER_BOUNDS:
                assert measured <= modelled + slack, (case, step, measured, modelled)
            else:
                assert abs(measured - modelled) <= slack, (case, step, measured, modelled)
    # what a forward step keeps for its backward step (saved): batch norm's xMu + xHat + std, a
    # DropoutLayer's mask; a layer with input dropout: its mask, and (input modification
    # forbidden, as the planned trainer runs) the dropped copy of its input, which its backward
    # step reads instead of the producer's output
    for case in ("batchnorm_cnn", "batchnorm_dense"):
        f, saved = facts[case], fw.layers["BN"].saved
        kept = sum(held(f).values())
        assert abs(saved.x * f["x_bytes"] - kept) <= 4 * 8, case   # + std: one float per channel
    assert fw.layers["DROPOUT"].saved.x * facts["dropout_layer"]["x_bytes"] == held(facts["dropout_layer"])["dropout.mask"]
    s = facts["dropout_state"]
    assert fw.input_dropout.saved.x == 2 and s["copy_when_modification_forbidden"]
    assert not fw.input_dropout.backward_reads_x
    for case in ("conv_dropout", "dense_dropout"):
        assert held(facts[case])["dropout.mask"] == facts[case]["x_bytes"]
