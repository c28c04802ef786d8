"""ND4J from Python threads: the first ND4J use may come from any thread, and fit() leaves no
attached Java thread behind. First-use cases run in child processes: the session's JVM has
initialized ND4J long ago."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

pytestmark = pytest.mark.jvm

FIRST_USE = """
import json, sys, threading
import jpype, numpy as np
import pyd4j.jvm

def nd4j_sum(out):
    try:
        Thread = jpype.JClass("java.lang.Thread")
        out["loader_before"] = Thread.currentThread().getContextClassLoader() is not None
        Nd4j = jpype.JClass("org.nd4j.linalg.factory.Nd4j")
        a = Nd4j.linspace(1, 10, 10, jpype.JClass("org.nd4j.linalg.api.buffer.DataType").DOUBLE)
        out["sum"] = float(a.sumNumber().doubleValue())
    except Exception as e:  # the failure being tested for
        out["error"] = f"{type(e).__name__}: {e}"

result = {}
if sys.argv[1] == "start-on-main":
    pyd4j.jvm.start()
    t = threading.Thread(target=nd4j_sum, args=(result,))
else:  # the JVM itself started from a thread
    def start_and_use(out):
        pyd4j.jvm.start()
        nd4j_sum(out)
    t = threading.Thread(target=start_and_use, args=(result,))
t.start(); t.join()
main = {}
nd4j_sum(main)
print(json.dumps({"thread": result, "main": main}))
"""


@pytest.mark.parametrize("where", ["start-on-main", "start-in-thread"])
def test_first_nd4j_use_from_a_thread(where):
    """JPype attaches Python threads without a context class loader (`loader_before` is False on
    a thread, the premise of the bug); ND4J must work there and on the main thread afterwards."""
    p = subprocess.run([sys.executable, "-c", FIRST_USE, where], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ))
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(p.stdout.strip().splitlines()[-1])
    expected = float(np.arange(1, 11).sum())
    assert doc["thread"].get("sum") == expected, doc
    assert doc["main"].get("sum") == expected, doc
    if where == "start-on-main":
        assert doc["thread"]["loader_before"] is False  # raw JPype attach: no loader, yet ND4J worked


def test_detach_ends_the_attached_java_thread(jvm):
    """pyd4j.jvm.core.detach(): a Python thread that used Java leaves no Java thread when it ends."""
    import threading

    from pyd4j.jvm.core import detach

    def use_java(then_detach: bool) -> None:
        import jpype

        jpype.JClass("java.lang.System").nanoTime()
        if then_detach:
            detach()

    def count_after(then_detach: bool) -> int:
        base = len(_java_threads())
        t = threading.Thread(target=use_java, args=(then_detach,))
        t.start()
        t.join()
        deadline = time.monotonic() + 60
        while len(_java_threads()) > base and time.monotonic() < deadline and then_detach:
            time.sleep(0.1)
        return len(_java_threads()) - base

    assert count_after(then_detach=False) == 1  # the premise: JPype leaves the attached thread
    assert count_after(then_detach=True) == 0


def _java_threads() -> list[str]:
    import jpype

    Thread = jpype.JClass("java.lang.Thread")
    return sorted(str(t.getName()) for t in Thread.getAllStackTraces().keySet() if t.isAlive())
