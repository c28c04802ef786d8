"""What DL4J 1.0.0-M2.1's layers read and keep between forward and backward, measured with ND4J.

`org.pyd4j.fixtures.LayerFacts` runs each layer type and graph vertex in a real DL4J network on
the CPU backend: it lists the arrays the layer's fields hold after its forward step and after its
backprop, overwrites its input and its output with NaN between the two to see whether backprop
reads them, measures what each step allocates in DL4J's working-memory workspace, and checks what
dropout and batch normalization do with their state. These tests pin the facts planned training
and the planner's `dl4j` profile are built on: a DL4J upgrade that changes one fails here.
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
          "activation_sigmoid", "maxpool", "avgpool", "lrn", "dropout_layer", "global_max",
          "global_avg", "output", "output_dropout")

# whether backprop reads the values of the layer's input (it never reads its own output)
READS_INPUT = {"conv": True, "conv_first": True, "conv_same_stride2": True, "conv_dropout": True,
               "dense": True, "dense_dropout": True, "dense_after_conv": True,
               "batchnorm_cnn": True, "batchnorm_dense": True, "activation_relu": True,
               "activation_sigmoid": True, "maxpool": True, "avgpool": False, "lrn": True,
               "dropout_layer": False, "global_max": True, "global_avg": False, "output": True,
               "output_dropout": True, "add": False, "product": True, "max": True,
               "merge": False, "subset": False}


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
    assert set(LAYERS) | {"add", "product", "max", "merge", "subset", "dropout_state",
                          "batchnorm_state"} <= set(facts)


def test_no_helper_on_the_cpu_backend(facts: dict[str, dict]) -> None:
    # DL4J's Java implementations run (no MKL-DNN/cuDNN helper): their arrays are what we measure
    assert all(facts[c]["helper"] is None for c in LAYERS)


def test_backprop_never_reads_the_layers_own_output(facts: dict[str, dict]) -> None:
    # Dense and Convolution recompute the pre-activation from the stored input
    assert not any(facts[c].get("backward_reads_output") for c in LAYERS)


def test_which_steps_read_their_input_and_the_trainer_agrees(facts: dict[str, dict]) -> None:
    assert {c: facts[c]["backward_reads_input"] for c in READS_INPUT} == READS_INPUT
    for c in LAYERS:
        assert facts[c]["trainer_backward_reads_input"] == READS_INPUT[c], c


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
    for c in ("add", "product", "max", "merge", "subset"):
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
