"""numpy <-> INDArray: real ND4J ops checked against numpy, zero-copy, lifetime, bad input."""

from __future__ import annotations

import gc
import time
import weakref

import numpy as np
import pytest

pytestmark = pytest.mark.jvm

nd = pytest.importorskip("pyd4j.nd")


@pytest.fixture(scope="module")
def J(jvm):
    import jpype

    return {
        "jpype": jpype,
        "Nd4j": jpype.JClass("org.nd4j.linalg.factory.Nd4j"),
        "DataType": jpype.JClass("org.nd4j.linalg.api.buffer.DataType"),
        "NDArrayIndex": jpype.JClass("org.nd4j.linalg.indexing.NDArrayIndex"),
        "System": jpype.JClass("java.lang.System"),
        "WeakReference": jpype.JClass("java.lang.ref.WeakReference"),
        "ints": jpype.JArray(jpype.JInt),
        "longs": jpype.JArray(jpype.JLong),
    }


def L(i: int):
    """A Java long (ND4J's getDouble/getFloat overloads are ambiguous for Python ints)."""
    import jpype

    return jpype.JLong(i)


def java_gc_until(J, condition, within_s: float = 120.0, rounds: int | None = None) -> bool:
    """Run Java's and Python's GC until condition() holds (reference processing is asynchronous;
    a generous deadline, not a number of rounds, so a loaded machine only takes longer). `rounds`
    runs exactly that many collections: where the condition must stay false, e.g. while a
    reference is still held."""
    deadline = time.monotonic() + within_s
    while (time.monotonic() < deadline) if rounds is None else rounds > 0:
        if rounds is not None:
            rounds -= 1
        gc.collect()
        J["System"].gc()
        time.sleep(0.05)
        if condition():
            return True
    return False


# ---------------------------------------------------------------- zero-copy, all shared dtypes

@pytest.mark.parametrize("dtype", list(nd.SUPPORTED_DTYPES), ids=lambda d: d.name)
def test_every_shared_dtype_round_trips_without_copy(jvm, dtype):
    a = (np.arange(24) % 7).astype(dtype).reshape(2, 3, 4)
    x = nd.from_numpy(a)
    assert str(x.dataType()) == nd.SUPPORTED_DTYPES[dtype]
    assert list(x.shape()) == [2, 3, 4]
    b = nd.to_numpy(x)
    assert b.dtype == dtype
    np.testing.assert_array_equal(b, a)
    assert np.shares_memory(a, b)


@pytest.mark.parametrize("make", [
    lambda a: a,                              # C order
    np.asfortranarray,                        # F order
    lambda a: a[1:, ::2],                     # offset + step
    lambda a: a[::2, 1:4],                    # rows skipped, column window
    lambda a: np.asfortranarray(a)[1:4, 1:],  # F-order view with offset
    lambda a: a.T,                            # transposed view
], ids=["c", "f", "offset-step", "rowstep", "f-view", "transpose"])
def test_layouts_compute_like_numpy(jvm, J, make):
    base = np.arange(30, dtype=np.float64).reshape(5, 6) / 7
    a = make(base)
    x = nd.from_numpy(a)
    assert nd.is_shared(a, x)
    np.testing.assert_allclose(nd.to_numpy(x.mul(2.0)), a * 2)
    np.testing.assert_allclose(nd.to_numpy(x.add(x)), a + a)
    np.testing.assert_allclose(float(x.sumNumber().doubleValue()), a.sum())
    np.testing.assert_allclose(nd.to_numpy(x.sum(J["ints"]([0]))), a.sum(axis=0))
    np.testing.assert_allclose(nd.to_numpy(x.mmul(x.transpose())), a @ a.T)
    np.testing.assert_allclose(nd.to_numpy(x.dup("c")), a)


def test_in_place_updates_are_seen_from_both_sides(jvm):
    a = np.zeros((3, 4), dtype=np.float32)
    x = nd.from_numpy(a)
    x.addi(1.5)                                  # ND4J writes, numpy sees
    np.testing.assert_array_equal(a, np.full((3, 4), 1.5, np.float32))
    a[1, 2] = 7                                  # numpy writes, ND4J sees
    assert float(x.getFloat(L(6))) == 7.0
    b = nd.to_numpy(x)                           # a numpy view of the same memory
    b *= 2
    np.testing.assert_array_equal(a[1], [3, 3, 14, 3])
    view = a[:, 1::2]                            # strided view updated in place by ND4J
    nd.from_numpy(view).muli(10.0)
    np.testing.assert_array_equal(a[1], [3, 30, 14, 30])


def test_nd4j_results_and_views_become_numpy_without_copy(jvm, J):
    Nd4j, NDArrayIndex = J["Nd4j"], J["NDArrayIndex"]
    expected = np.arange(1, 25, dtype=np.float64).reshape(4, 6)
    x = Nd4j.linspace(1, 24, 24, J["DataType"].DOUBLE).reshape("c", J["longs"]([4, 6]))
    np.testing.assert_allclose(nd.to_numpy(x), expected)
    x = nd.from_numpy(expected).dup()            # ND4J-owned memory with exact values
    np.testing.assert_array_equal(nd.to_numpy(x), expected)
    view = x.get(NDArrayIndex.interval(1, 3), NDArrayIndex.interval(2, 5))
    v = nd.to_numpy(view)
    np.testing.assert_array_equal(v, expected[1:3, 2:5])
    v[0, 0] = -1                                 # writes land in x
    assert float(x.getDouble(J["longs"]([1, 2]))) == -1.0
    np.testing.assert_array_equal(nd.to_numpy(x.transpose()), nd.to_numpy(x).T)
    np.testing.assert_array_equal(nd.to_numpy(x.dup("f")), nd.to_numpy(x))


def test_copy_true_copies_both_ways(jvm):
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    x = nd.from_numpy(a, copy=True)
    a[0, 0] = 100
    assert int(x.getDouble(L(0))) == 0
    b = nd.to_numpy(x, copy=True)
    x.addi(1)
    np.testing.assert_array_equal(b, [[0, 1, 2], [3, 4, 5]])
    assert not np.shares_memory(a, b)


def test_scalar_and_empty_arrays(jvm):
    s = nd.from_numpy(np.array(2.5))
    assert int(s.rank()) == 0 and float(s.getDouble(L(0))) == 2.5
    assert nd.to_numpy(s).shape == ()
    e = nd.from_numpy(np.zeros((0, 3), np.float32))
    assert bool(e.isEmpty()) and list(e.shape()) == [0, 3]
    back = nd.to_numpy(e)
    assert back.shape == (0, 3) and back.dtype == np.float32


# ---------------------------------------------------------------- lifetime

def test_nd4j_keeps_numpy_memory_alive_then_lets_it_go(jvm, J):
    a = np.arange(100_000, dtype=np.float64)
    alive = weakref.ref(a)
    x = nd.from_numpy(a)
    view = x.get(J["NDArrayIndex"].interval(10, 20))   # a Java-side view keeps it alive too
    del a
    assert java_gc_until(J, lambda: False, rounds=3) is False
    assert alive() is not None                           # x still references the memory
    assert float(x.sumNumber().doubleValue()) == float(np.arange(100_000).sum())
    del x
    java_gc_until(J, lambda: False, rounds=3)
    np.testing.assert_array_equal(nd.to_numpy(view), np.arange(10, 20))
    del view
    assert java_gc_until(J, lambda: alive() is None), "numpy array still held after ND4J dropped it"


def test_numpy_keeps_nd4j_array_alive_then_lets_it_go(jvm, J):
    x = J["Nd4j"].linspace(0, 99_999, 100_000, J["DataType"].DOUBLE)
    java_ref = J["WeakReference"](x)
    b = nd.to_numpy(x)
    expected = b.copy()
    np.testing.assert_allclose(expected, np.arange(100_000))
    del x
    java_gc_until(J, lambda: False, rounds=3)
    assert java_ref.get() is not None
    J["Nd4j"].rand(J["DataType"].DOUBLE, J["longs"]([1000, 1000]))     # churn ND4J memory
    np.testing.assert_array_equal(b, expected)
    del b
    assert java_gc_until(J, lambda: java_ref.get() is None), "INDArray still held after numpy dropped it"


def test_round_trips_do_not_grow_memory(jvm, J):
    """A leak grows with the number of round trips; allocator, JIT and GC noise does not. So the
    test measures the growth outside the JVM's committed heap after each of several equal batches
    (each ended by a full GC, which is what frees a shared numpy buffer: JPype lets it go when
    Java collects its DirectByteBuffer) and judges the median step, not one total that a late GC
    on a loaded machine can inflate."""
    psutil = pytest.importorskip("psutil")
    import gc
    import time
    import weakref

    import jpype
    process = psutil.Process()
    memory = jpype.JClass("java.lang.management.ManagementFactory").getMemoryMXBean()
    system = jpype.JClass("java.lang.System")
    template = np.random.default_rng(0).random(1024).astype(np.float32)   # 4 KiB per round trip
    batch = 20_000                                   # a full leak would add 80 MB per batch

    def jvm_committed() -> int:
        """Heap and non-heap the JVM has committed: it may grow with churn up to -Xmx (set by
        whichever test started this shared JVM), which is not a leak of round trips."""
        return int(memory.getHeapMemoryUsage().getCommitted()) + int(memory.getNonHeapMemoryUsage().getCommitted())

    def released_after_gc(deadline_s: float = 60.0) -> None:
        """Waits until a buffer shared after the batch has been let go by JPype (Java collected its
        DirectByteBuffer and JPype's reference queue released the numpy array): the event that frees
        the batch's memory, with a generous deadline for a loaded machine."""
        sentinel = template.copy()
        gone = weakref.ref(sentinel)
        nd.from_numpy(sentinel)
        del sentinel
        end = time.monotonic() + deadline_s
        while gone() is not None:
            assert time.monotonic() < end, f"a shared numpy buffer was not released within {deadline_s:.0f} s of full GCs"
            gc.collect()
            system.gc()
            time.sleep(0.05)

    def outside_heap_after(n: int) -> int:
        for _ in range(n):
            b = nd.to_numpy(nd.from_numpy(template.copy()))
        np.testing.assert_array_equal(b, template)
        del b
        released_after_gc()
        return process.memory_info().rss - jvm_committed()

    outside_heap_after(batch)                        # warm up JIT, heap and caches
    levels = [outside_heap_after(batch) for _ in range(5)]
    steps = sorted(b - a for a, b in zip(levels, levels[1:]))
    median_step = (steps[1] + steps[2]) / 2
    assert median_step < 16 * 2**20, (
        f"memory outside the JVM's heap grew by a median {median_step / 2**20:.1f} MiB per "
        f"{batch} round trips (steps {[round(s / 2**20, 1) for s in steps]} MiB); a leak of every "
        f"array would be {batch * template.nbytes / 2**20:.0f} MiB")


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize("array", [
    np.zeros(3, dtype=np.complex128),
    np.array(["a", "b"]),
    np.array([object(), None]),
    np.zeros(2, dtype="datetime64[s]"),
    np.zeros(2, dtype=[("x", "f4"), ("y", "i4")]),
], ids=["complex", "str", "object", "datetime", "structured"])
def test_unsupported_dtype_is_a_clear_type_error(jvm, array):
    with pytest.raises(nd.UnsupportedDtypeError) as err:
        nd.from_numpy(array)
    message = str(err.value)
    assert str(array.dtype) in message or array.dtype.str in message
    assert "float32" in message and "astype" in message
    assert isinstance(err.value, TypeError)


def test_nd4j_type_numpy_lacks_is_a_clear_type_error(jvm, J):
    x = J["Nd4j"].ones(J["DataType"].BFLOAT16, J["longs"]([2, 2]))
    with pytest.raises(nd.UnsupportedDtypeError, match="BFLOAT16"):
        nd.to_numpy(x)


@pytest.mark.parametrize("make, words", [
    (lambda a: a[::-1], ["negative", "(-24, 8)"]),
    (lambda a: np.broadcast_to(a[:1], (4, 3)), ["read-only"]),
    (lambda a: np.lib.stride_tricks.as_strided(a, (4, 3), (0, 8)), ["zero"]),
    (lambda a: a.astype(">f8"), ["byte order", ">f8"]),
    (lambda a: _read_only(a), ["read-only"]),
], ids=["reversed", "broadcast", "zero-stride", "byteswapped", "read-only"])
def test_arrays_nd4j_cannot_share_need_an_explicit_copy(jvm, make, words):
    base = np.arange(12, dtype=np.float64).reshape(4, 3)
    a = make(base)
    with pytest.raises(nd.CopyRequiredError) as err:
        nd.from_numpy(a)
    for word in words:
        assert word in str(err.value)
    assert "copy=True" in str(err.value)
    for copy in (True, None):
        x = nd.from_numpy(a, copy=copy)
        np.testing.assert_array_equal(nd.to_numpy(x), a)
        assert not nd.is_shared(a, x)


def _read_only(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    a.flags.writeable = False
    return a


def test_workspace_arrays_are_not_viewed(jvm, J):
    import jpype

    manager = J["Nd4j"].getWorkspaceManager()
    ws = manager.getAndActivateWorkspace("pyd4j-test-nd")
    try:
        x = J["Nd4j"].linspace(1, 6, 6, J["DataType"].FLOAT)
        assert bool(x.isAttached())
        with pytest.raises(nd.CopyRequiredError, match="workspace"):
            nd.to_numpy(x)
        b = nd.to_numpy(x, copy=True)
    finally:
        ws.close()
    np.testing.assert_array_equal(b, np.arange(1, 7, dtype=np.float32))
    assert jpype.isJVMStarted()


def test_to_numpy_needs_an_indarray(jvm):
    with pytest.raises(TypeError, match="from_numpy"):
        nd.to_numpy(np.zeros(3))
