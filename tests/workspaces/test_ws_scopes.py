"""Real ND4J workspace scopes driven from Python."""

from __future__ import annotations

import numpy as np
import pytest

from pyd4j import workspaces as wsp
from pyd4j.workspaces import WorkspaceConfig, WorkspaceScopeError

pytestmark = pytest.mark.jvm


class _Nd4j:
    """Nd4j factory calls with shapes as Java long[] (JPype cannot pick an overload from ints)."""

    def __init__(self):
        import jpype

        self._cls = jpype.JClass("org.nd4j.linalg.factory.Nd4j")
        self._shape = lambda dims: jpype.JArray(jpype.JLong)(list(dims))
        self._jpype = jpype

    def rand(self, *shape):
        return self._cls.rand(self._cls.dataType(), self._shape(shape))

    def ones(self, *shape):
        return self._cls.ones(self._shape(shape))

    def zeros(self, *shape):
        return self._cls.zeros(self._shape(shape))

    def create(self, a: np.ndarray):
        flat = self._jpype.JArray(self._jpype.JDouble)(a.ravel().tolist())
        return self._cls.create(flat, self._shape(a.shape), self._cls.dataType().DOUBLE)


@pytest.fixture
def nd4j(jvm):
    yield _Nd4j()
    wsp.destroy_all()


def test_scope_allocates_inside_and_restores(nd4j):
    assert wsp.current_workspace() is None
    cfg = WorkspaceConfig(initial_size="1m", policy_learning="NONE")
    with wsp.workspace("T_LOOP", cfg) as ws:
        assert wsp.current_workspace() == "T_LOOP"
        x = nd4j.rand(32, 32)
        assert x.isAttached() and str(x.data().getParentWorkspace().getId()) == "T_LOOP"
        st = ws.stats()
        # 32*32 floats = 4096 bytes, aligned to 32 bytes by ND4J, plus nothing else
        assert st.this_cycle_allocations >= 4096
        assert st.current_size == 2**20 + int(2**20 * 0.3)  # initial size + OVERALLOCATE 30%
        assert st.scope_active
    assert wsp.current_workspace() is None
    assert "T_LOOP" in wsp.workspace_names()


def test_nested_scopes_and_leverage(nd4j):
    outer_cfg = WorkspaceConfig(initial_size="1m", policy_learning="NONE")
    inner_cfg = WorkspaceConfig(initial_size="256k", policy_learning="NONE")
    with wsp.workspace("T_OUTER", outer_cfg):
        with wsp.workspace("T_INNER", inner_cfg) as inner:
            assert wsp.current_workspace() == "T_INNER"
            a = inner.track(nd4j.ones(4, 4).muli(3))
            kept = a.leverage()
            assert kept.workspace_name == "T_OUTER"
            gone = a
        assert wsp.current_workspace() == "T_OUTER"
        assert kept.usable and not gone.usable
        assert float(kept.sumNumber().doubleValue()) == 48.0
        with pytest.raises(WorkspaceScopeError, match="T_INNER"):
            gone.sumNumber()
    assert wsp.current_workspace() is None


def test_detach_survives_and_out_of_scope_use_raises(nd4j):
    with wsp.workspace("T_DETACH", WorkspaceConfig(initial_size="64k", policy_learning="NONE")) as ws:
        a = ws.track(nd4j.create(np.arange(6.0).reshape(2, 3)))
        free = a.detach()
        assert not free.attached
    expected = np.arange(6.0).sum()
    assert float(free.sumNumber().doubleValue()) == expected
    with pytest.raises(WorkspaceScopeError, match="leverage|detach"):
        a.sumNumber()
    with pytest.raises(WorkspaceScopeError):
        wsp.check_usable(a.__getattribute__("_array"))
    with pytest.raises(WorkspaceScopeError):
        a.detach()  # too late to rescue


def test_reopened_scope_is_detected_by_generation(nd4j):
    cfg = WorkspaceConfig(initial_size="64k", policy_learning="NONE")
    with wsp.workspace("T_GEN", cfg) as ws:
        old = ws.track(nd4j.ones(8))
    with wsp.workspace("T_GEN", cfg) as ws2:
        nd4j.zeros(8)  # re-uses the very same memory
        assert ws2.java.isScopeActive()
        with pytest.raises(WorkspaceScopeError, match="re-opened"):
            old.sumNumber()


def test_conflicting_config_for_same_name_is_refused(nd4j):
    with wsp.workspace("T_CONFLICT", WorkspaceConfig(initial_size="64k", policy_learning="NONE")):
        pass
    with pytest.raises(wsp.WorkspaceConflictError, match="initial_size"):
        with wsp.workspace("T_CONFLICT", WorkspaceConfig(initial_size="128k", policy_learning="NONE")):
            pass
    wsp.destroy("T_CONFLICT")
    with wsp.workspace("T_CONFLICT", WorkspaceConfig(initial_size="128k", policy_learning="NONE")) as ws:
        assert ws.config.initial_size == 128 * 1024


def test_first_loop_learning_and_spill(nd4j):
    # FIRST_LOOP: first cycle spills everything, then the workspace is sized from it
    with wsp.workspace("T_LEARN") as ws:
        nd4j.rand(100, 100)
        first = ws.stats()
    assert first.current_size == 0 and first.spilled_bytes >= 40000
    after = wsp.stats(ws.java)
    assert after.current_size >= 40000 * 1.3  # learned + 30% overallocation
    with wsp.workspace("T_LEARN") as ws:
        nd4j.rand(100, 100)
        assert ws.stats().current_offset >= 40000  # now served from the block


def test_spill_everything_debug_mode(nd4j):
    cfg = WorkspaceConfig(initial_size="1m", policy_learning="NONE")
    with wsp.debug_mode("SPILL_EVERYTHING"):
        assert wsp.get_debug_mode() is wsp.DebugMode.SPILL_EVERYTHING
        with wsp.workspace("T_SPILL", cfg) as ws:
            nd4j.rand(64, 64)
            st = ws.stats()
    assert wsp.get_debug_mode() is wsp.DebugMode.DISABLED
    assert st.current_offset == 0 and st.spilled_bytes >= 64 * 64 * 4


def test_bypass_everything_debug_mode(nd4j):
    with wsp.debug_mode(wsp.DebugMode.BYPASS_EVERYTHING):
        with wsp.workspace("T_BYPASS", WorkspaceConfig(initial_size="1m", policy_learning="NONE")):
            x = nd4j.rand(8, 8)
            assert not x.isAttached()


def test_fail_spill_policy_raises_python_error(nd4j):
    from pyd4j.jvm import JavaError, java_errors

    cfg = WorkspaceConfig(initial_size="4k", policy_learning="NONE", policy_spill="FAIL", policy_allocation="STRICT")
    with pytest.raises(JavaError, match="Workspace is full"):
        with wsp.workspace("T_FAIL", cfg):
            with java_errors():
                nd4j.rand(100, 100)


def test_gc_knobs_round_trip(nd4j):
    before = wsp.get_gc()
    with wsp.gc_settings(periodic_gc=False, auto_gc_window_ms=321, occasional_gc_frequency_ms=7000) as now:
        assert now == wsp.GcSettings(periodic_gc=False, occasional_gc_frequency_ms=7000, auto_gc_window_ms=321)
    assert wsp.get_gc() == before
    with pytest.raises(ValueError, match="auto_gc_window_ms"):
        wsp.set_gc(auto_gc_window_ms=-5)


def test_network_workspace_mode(nd4j):
    import jpype

    B = jpype.JPackage("org").deeplearning4j.nn.conf
    # list(Layer...) with the layers: JPype would pick the varargs overload for a bare list()
    conf = B.NeuralNetConfiguration.Builder().list(B.layers.OutputLayer.Builder().nIn(4).nOut(2).build()).build()
    net = jpype.JClass("org.deeplearning4j.nn.multilayer.MultiLayerNetwork")(conf)
    net.init()
    wsp.set_workspace_mode(net, training="NONE", inference="ENABLED")
    assert wsp.get_workspace_mode(net) == {"training": wsp.WorkspaceMode.NONE, "inference": wsp.WorkspaceMode.ENABLED}
    wsp.set_workspace_mode(net, training="ENABLED")
    assert str(net.getLayerWiseConfigurations().getTrainingWorkspaceMode().name()) == "ENABLED"


def test_scope_panic_guards_raw_indarrays(nd4j):
    from pyd4j.jvm import java_errors

    cfg = WorkspaceConfig(initial_size="64k", policy_learning="NONE")
    import jpype

    executioner = jpype.JClass("org.nd4j.linalg.factory.Nd4j").getExecutioner()
    modes = jpype.JClass("org.nd4j.linalg.api.ops.executioner.OpExecutioner$ProfilingMode")
    before = executioner.getProfilingMode()
    executioner.setProfilingMode(modes.DISABLED)  # as code that turned profiling off would leave it
    with wsp.workspace("T_PANIC", cfg):
        raw = nd4j.ones(4, 4)  # not wrapped in ScopedArray
    with wsp.scope_panic():
        with wsp.workspace("T_PANIC", cfg):
            ok = nd4j.ones(4, 4)
            assert float(ok.sumNumber().doubleValue()) == 16.0  # in-scope use is fine
        with pytest.raises(WorkspaceScopeError, match="T_PANIC"):
            with wsp.scope_panic():
                raw.addi(1.0)
        with pytest.raises(WorkspaceScopeError):
            with wsp.scope_panic(), java_errors():
                raw.sumNumber()
    assert str(executioner.getProfilingMode().name()) == "DISABLED"  # restored
    executioner.setProfilingMode(before)


def test_circular_workspace_pins_oversized_allocations(nd4j):
    """Circular mode (what AsyncDataSetIterator uses): a cycle larger than the learned block is
    served by pinned allocations, kept for two more steps, and counted in pinned_bytes."""
    cfg = WorkspaceConfig(policy_reset="ENDOFBUFFER_REACHED", overallocation_limit=1.0)
    sizes = []
    for n in (32, 32, 200, 200):
        with wsp.workspace("T_CIRC", cfg) as ws:
            nd4j.rand(n, n)
            sizes.append(ws.stats())
    assert sizes[0].type == "CIRCULAR"
    assert sizes[0].spilled_bytes == 32 * 32 * 4 and sizes[0].current_size == 0  # learning cycle
    assert sizes[1].current_size > 0 and sizes[1].pinned_bytes == 0           # block learned
    assert sizes[2].pinned_bytes == 200 * 200 * 4 and sizes[2].pinned_count == 1
    assert sizes[3].pinned_bytes == 2 * 200 * 200 * 4


def _live_instances(class_name: str) -> int:
    """Instances of a class alive after a full collection, from the JVM's own class histogram
    (the GC.class_histogram diagnostic command; independent of pyd4j's bookkeeping)."""
    import jpype

    server = jpype.JClass("java.lang.management.ManagementFactory").getPlatformMBeanServer()
    name = jpype.JClass("javax.management.ObjectName")("com.sun.management:type=DiagnosticCommand")
    strings = jpype.JArray(jpype.JString)
    text = str(server.invoke(name, "gcClassHistogram", jpype.JArray(jpype.JObject)([strings([])]),
                             strings(["[Ljava.lang.String;"])))
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[3] == class_name:
            return int(parts[1])
    return 0


def _make_and_destroy(n: int, forget: bool) -> int:
    """Growth in live CpuWorkspaceDeallocators over n workspaces made, used and destroyed."""
    import jpype

    manager = jpype.JClass("org.nd4j.linalg.factory.Nd4j").getWorkspaceManager()
    cfg = WorkspaceConfig(initial_size="64k").to_java()
    counted = "org.nd4j.linalg.cpu.nativecpu.workspace.CpuWorkspaceDeallocator"
    before = _live_instances(counted)
    for _ in range(n):
        with manager.getAndActivateWorkspace(cfg, "CHURN"):
            pass
        manager.destroyWorkspace(manager.getWorkspaceForCurrentThread("CHURN"))
        if forget:
            jpype.JClass("java.lang.System").gc()  # the workspace just destroyed is collected, then forgotten
            wsp.forget_collected()
    _live_instances(counted)  # a full collection: ND4J's deallocator thread has the last ones queued
    import time

    time.sleep(0.5)
    if forget:
        wsp.forget_collected()
    return _live_instances(counted) - before


def test_nd4j_keeps_every_destroyed_workspace_and_forget_collected_drops_them(nd4j):
    """ND4J files each CPU workspace under one id and removes it under another, so each workspace ever
    made stays reachable (the soak's per-restore heap growth); forget_collected() drops them."""
    n = 40
    assert _make_and_destroy(n, forget=False) >= n - 2    # ND4J as it is: one kept per workspace
    assert _make_and_destroy(n, forget=True) <= 2         # with forget_collected: none kept
