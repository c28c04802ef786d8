"""The agent tracks the job's networks by identity without keeping them alive
(org.pyd4j.agent.WeakIdentitySet, used by the agent's Hooks): real JVM, real collections."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.jvm


def test_identity_not_equality_and_dropped_objects_are_collected(jvm):
    import jpype

    seen = jpype.JClass("org.pyd4j.agent.WeakIdentitySet")()
    a, b = jpype.JClass("java.lang.String")("same"), jpype.JClass("java.lang.String")("same")
    assert seen.add(a) and not seen.add(a) and seen.contains(a)
    assert not seen.contains(b) and seen.add(b)           # equal but another object
    kept = jpype.JClass("java.util.ArrayList")()
    assert seen.add(kept) and seen.size() == 3
    for _ in range(200):
        seen.add(jpype.JClass("java.lang.Object")())      # nothing else holds these
    del a, b
    gc = jpype.JClass("java.lang.System")
    for _ in range(50):
        gc.gc()
        if seen.size() <= 3:
            break
    assert seen.size() <= 3 and seen.contains(kept), seen.size()   # the 200 dropped ones are gone
