"""ND4J workspace memory swapped out to the side-agent's pinned pool and back (CPU backend,
host build): the workspace block and the arrays living in it come back byte for byte after
the memory was reused by another workspace cycle."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

pytestmark = pytest.mark.jvm

MiB = 1 << 20


@pytest.fixture
def nd4j(jvm):
    import jpype

    from org.nd4j.linalg.api.buffer import DataType
    from org.nd4j.linalg.api.memory.conf import WorkspaceConfiguration
    from org.nd4j.linalg.api.memory.enums import AllocationPolicy, LearningPolicy
    from org.nd4j.linalg.factory import Nd4j

    class N:
        pass

    n = N()
    n.jpype, n.DataType, n.Nd4j = jpype, DataType, Nd4j
    n.cfg = (
        WorkspaceConfiguration.builder()
        .initialSize(2 * MiB)
        .policyAllocation(AllocationPolicy.STRICT)
        .policyLearning(LearningPolicy.NONE)
        .build()
    )
    n.shape = lambda *dims: jpype.JArray(jpype.JLong)(list(dims))
    return n


def raw(address: int, nbytes: int) -> bytes:
    return ctypes.string_at(address, nbytes)


def test_workspace_block_survives_swap_round_trip(nd4j):
    from pyd4j.device.nd4j_hook import WorkspaceSwapper, workspace_region

    Nd4j, DataType = nd4j.Nd4j, nd4j.DataType
    mgr = Nd4j.getWorkspaceManager()
    ws = mgr.getAndActivateWorkspace(nd4j.cfg, "PYD4J_SWAP_A")
    a = Nd4j.rand(DataType.FLOAT, nd4j.shape(300, 500))
    b = Nd4j.rand(DataType.DOUBLE, nd4j.shape(1000, 100)).muli(7.0)
    assert a.isAttached() and b.isAttached()
    assert ws.getSpilledSize() == 0  # both arrays live inside the block
    a_vals = np.array(a.data().asFloat(), dtype=np.float32)
    b_vals = np.array(b.data().asDouble(), dtype=np.float64)
    ws.close()  # end of "iteration": the workspace is idle

    address, nbytes = workspace_region(ws)
    assert nbytes == 2 * MiB
    assert int(a.data().address()) == address  # first array sits at the block's start
    before = raw(address, nbytes)

    with WorkspaceSwapper() as swapper:
        h = swapper.register_workspace(ws)
        assert (h.address, h.nbytes) == (address, nbytes)
        swapper.swap_out(h)
        assert swapper.host_copy(h) == before

        # Another cycle of the workspace reuses (overwrites) the memory meanwhile.
        ws2 = mgr.getAndActivateWorkspace(nd4j.cfg, "PYD4J_SWAP_A")
        Nd4j.zeros(DataType.FLOAT, nd4j.shape(400, 1000)).addi(3.0)
        ws2.close()
        assert raw(address, nbytes) != before

        swapper.swap_in(h)
        assert raw(address, nbytes) == before
        np.testing.assert_array_equal(np.array(a.data().asFloat(), dtype=np.float32), a_vals)
        np.testing.assert_array_equal(np.array(b.data().asDouble(), dtype=np.float64), b_vals)
        s = swapper.stats()
        assert s["bytes_offloaded"] == s["bytes_prefetched"] == nbytes
        assert s["device_in_use"] == 0  # the memory stays ND4J's


def test_single_ndarray_buffer_round_trip(nd4j):
    from pyd4j.device.nd4j_hook import WorkspaceSwapper

    Nd4j, DataType = nd4j.Nd4j, nd4j.DataType
    x = Nd4j.rand(DataType.FLOAT, nd4j.shape(123, 77))  # detached: ordinary off-heap buffer
    want = np.array(x.data().asFloat(), dtype=np.float32)
    with WorkspaceSwapper(host_bytes=4 * MiB) as swapper:
        h = swapper.register_buffer(x)
        assert h.nbytes == 123 * 77 * 4 and h.address == int(x.data().address())
        swapper.swap_out(h, wait=False)
        swapper.wait(h)
        x.assign(-1.0)
        assert float(x.sumNumber().doubleValue()) == -123 * 77
        swapper.swap_in(h)
        np.testing.assert_array_equal(np.array(x.data().asFloat(), dtype=np.float32), want)


def test_unopened_workspace_is_refused_with_the_fix(nd4j):
    from org.nd4j.linalg.api.memory.conf import WorkspaceConfiguration

    from pyd4j.device.nd4j_hook import workspace_region

    cfg = WorkspaceConfiguration.builder().initialSize(0).build()
    ws = nd4j.Nd4j.getWorkspaceManager().createNewWorkspace(cfg, "PYD4J_SWAP_EMPTY")
    with pytest.raises(ValueError, match="has no host block yet"):
        workspace_region(ws)
