"""The Python digits example really trains: the same MLP as the Java example, fed from numpy."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "python" / "digits.py"


def _example():
    spec = importlib.util.spec_from_file_location("digits_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_exported_digits_match_scikit_learn():
    """The committed CSV is scikit-learn's bundled digits, with a fixed stratified 80/20 split."""
    from sklearn.datasets import load_digits

    d = _example().load()
    ref = load_digits()
    assert len(d["x_train"]) == 1437 and len(d["x_test"]) == 360
    got = np.concatenate([d["x_train"], d["x_test"]]) * 16
    want = ref.data.astype(np.float32)
    # same multiset of (image, label) rows
    key = lambda x, y: sorted(map(tuple, np.column_stack([x, y]).astype(int).tolist()))  # noqa: E731
    labels = np.concatenate([d["y_train"], d["y_test"]]).argmax(1)
    assert key(got, labels) == key(want, ref.target)
    # stratified: every class in the test split
    assert set(d["y_test"].argmax(1)) == set(range(10))


@pytest.mark.jvm
@pytest.mark.slow
def test_python_fed_mlp_reaches_95_percent_on_digits(jvm):
    import jpype

    env = jpype.JClass("org.nd4j.linalg.factory.Nd4j").getEnvironment()
    threads = env.maxThreads()
    env.setMaxThreads(1)  # CI machines are small and shared; OpenMP spinning costs more than it gives
    try:
        summary = _example().train("mlp", epochs=15, batch_size=64, prefetch=4, progress=False)
    finally:
        env.setMaxThreads(threads)
    assert summary["samples"] == 15 * 1437
    assert summary["test_accuracy"] >= 0.95, summary
