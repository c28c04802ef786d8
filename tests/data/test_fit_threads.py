"""fit() from Python leaves no attached Java thread behind."""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.jvm


def _java_threads() -> list[str]:
    import jpype

    Thread = jpype.JClass("java.lang.Thread")
    return sorted(str(t.getName()) for t in Thread.getAllStackTraces().keySet() if t.isAlive())


def test_fit_leaves_no_attached_java_thread(net, xy):
    """Three fit() calls: the Java threads alive afterwards are those alive before (DL4J's own
    prefetch threads end with each epoch; the progress monitor's attached thread is detached)."""
    from pyd4j.data import NumpyBatches
    from pyd4j.train import fit

    x, y = xy
    fit(net, NumpyBatches(x, y, batch_size=64), epochs=1, progress=False)  # warm-up: ND4J's own pools start
    before = _java_threads()
    for _ in range(3):
        fit(net, NumpyBatches(x, y, batch_size=64), epochs=1, progress=False)
    deadline = time.monotonic() + 120  # threads end asynchronously: wait on the count, not a time
    while len(_java_threads()) > len(before) and time.monotonic() < deadline:
        time.sleep(0.2)
    after = _java_threads()
    assert len(after) <= len(before), {"before": before, "after": after}
