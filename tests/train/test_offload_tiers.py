"""The planned trainer's offload tiers on real ND4J (CPU backend): DiskTier (memory-mapped file)
and PinnedHostTier (the side-agent's pinned pool, host build).

Contents are checked byte for byte against the bytes the test wrote into ND4J's memory itself;
memory is checked with the process's resident set; byte counters against hand-worked numbers
(the disk tier rounds slots to 4096-byte pages, the pinned pool to 256 bytes). The
resident-set checks run in a fresh child process (`rss_child.py`).
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from math import prod
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.jvm

KiB, MiB = 1 << 10, 1 << 20
UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
DTYPES = ["FLOAT", "DOUBLE", "HALF", "BFLOAT16", "INT", "LONG", "SHORT", "BYTE", "UBYTE", "BOOL",
          "UINT16", "UINT32", "UINT64"]
SHAPES = [((), "c"), ((7,), "c"), ((33, 17), "c"), ((33, 17), "f"), ((4, 5, 6), "f"),
          ((2, 3, 4, 5), "c"), ((0, 3), "c")]
TIERS = ["disk", "pinned"]


class Nd:
    """ND4J calls with Java long[] shapes, and raw access to an array's bytes."""

    def __init__(self) -> None:
        import jpype

        self.jpype = jpype
        self.Nd4j = jpype.JClass("org.nd4j.linalg.factory.Nd4j")
        self.DataType = jpype.JClass("org.nd4j.linalg.api.buffer.DataType")
        self.NDArrayIndex = jpype.JClass("org.nd4j.linalg.indexing.NDArrayIndex")
        self.DiskTier = jpype.JClass("org.pyd4j.train.DiskTier")
        self.PinnedHostTier = jpype.JClass("org.pyd4j.train.PinnedHostTier")
        self.Paths = jpype.JClass("java.nio.file.Paths")

    def longs(self, dims) -> object:
        return self.jpype.JArray(self.jpype.JLong)(list(dims))

    def tier(self, kind: str, max_bytes: int, directory=None):
        if kind == "disk":
            if directory is None:
                return self.DiskTier(max_bytes)
            return self.DiskTier(self.Paths.get(str(directory)), max_bytes)
        return self.PinnedHostTier(max_bytes)

    def filled(self, dtype: str, shape, order: str, rng: np.random.Generator):
        """A new ND4J array whose memory holds random bytes, and the same elements in numpy
        (as unsigned integers of the element's width, so every bit pattern compares)."""
        dt = self.DataType.valueOf(dtype)
        width = int(dt.width())
        x = self.Nd4j.create(dt, self.longs(shape), order)
        n = prod(shape)
        raw = rng.integers(0, 2, n, dtype=np.uint8).tobytes() if dtype == "BOOL" else rng.bytes(n * width)
        if n:
            ctypes.memmove(address(x), raw, n * width)
        ref = np.frombuffer(raw, UINT[width]).reshape(shape, order=order.upper())
        return x, ref

    def finite(self, dtype: str, shape, rng: np.random.Generator):
        """A c-order array of finite values (for views that ND4J itself must copy)."""
        x = self.Nd4j.create(self.DataType.valueOf(dtype), self.longs(shape), "c")
        vals = rng.integers(-1000, 1000, prod(shape)).astype({"FLOAT": np.float32, "DOUBLE": np.float64,
                                                              "INT": np.int32, "LONG": np.int64}[dtype])
        ctypes.memmove(address(x), vals.tobytes(), vals.nbytes)
        return x, vals.reshape(shape)


def address(x) -> int:
    return int(x.data().addressPointer().address())


def raw_bytes(x) -> bytes:
    n = int(x.length()) * int(x.dataType().width())
    return ctypes.string_at(address(x), n) if n else b""


@contextmanager
def raises(cls, match: str | None = None):
    """pytest.raises for a Java exception, translated as pyd4j translates it for users."""
    from pyd4j.jvm import java_errors

    with pytest.raises(cls, match=match) as info, java_errors():
        yield info


def wait_until(cond, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def assert_same(y, ref: np.ndarray, order: str, dtype: str, what: str) -> None:
    assert tuple(y.shape()) == ref.shape, what
    assert str(y.ordering()) == order, what
    assert str(y.dataType()) == dtype, what
    assert not y.isAttached(), f"{what}: the array from take must be detached"
    assert raw_bytes(y) == np.ascontiguousarray(ref).tobytes(order=order.upper()), what


@pytest.fixture
def nd(jvm):
    return Nd()


@pytest.fixture
def tiers():
    """Tiers a test opens; closed even when it fails."""
    opened = []
    yield opened
    for t in opened:
        t.close()


# -- contents ------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", TIERS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip_is_byte_exact_for_every_shape_and_order(nd, tiers, kind, dtype):
    rng = np.random.default_rng(DTYPES.index(dtype))
    tier = nd.tier(kind, 4 * MiB)
    tiers.append(tier)
    refs, sources = {}, []
    for key, (shape, order) in enumerate(SHAPES):
        x, ref = nd.filled(dtype, shape, order, rng)
        tier.offload(key, x)
        refs[key] = (ref, order)
        sources.append(x)
    for key, x in enumerate(sources):
        tier.awaitOffloaded(key)
        x.close()  # what comes back can only be the tier's copy
    for key in refs:
        if key % 2:
            tier.prefetch(key)
    for key, (ref, order) in refs.items():
        y = tier.take(key)
        assert_same(y, ref, order, dtype, f"{kind} {dtype} {ref.shape} '{order}'")
        y.close()
        tier.release(key)
    assert tier.stats().bytesHeld == 0


@pytest.mark.parametrize("kind", TIERS)
def test_views_come_back_as_their_values_contiguous(nd, tiers, kind):
    """Contiguous views (a row, a transpose) are copied where they lie; strided ones (a column,
    a block, a permutation) go through a contiguous copy first. All come back exact."""
    rng = np.random.default_rng(7)
    tier = nd.tier(kind, 4 * MiB)
    tiers.append(tier)
    I = nd.NDArrayIndex
    for dtype in ["FLOAT", "DOUBLE", "INT", "LONG"]:
        base, ref = nd.finite(dtype, (6, 10), rng)
        cube, cref = nd.finite(dtype, (3, 4, 5), rng)
        views = {
            "row": (base.getRow(2), ref[2]),
            "transpose": (base.transpose(), ref.T),
            "column": (base.getColumn(3), ref[:, 3]),
            "block": (base.get(I.interval(1, 4), I.interval(2, 7)), ref[1:4, 2:7]),
            "permute": (cube.permute(2, 0, 1), cref.transpose(2, 0, 1)),
        }
        for key, (name, (v, want)) in enumerate(views.items()):
            tier.offload(key, v)
            tier.awaitOffloaded(key)
            order = str(v.ordering())
            y = tier.take(key)
            assert tuple(y.shape()) == want.shape, name
            assert str(y.ordering()) == order, name
            got = np.frombuffer(raw_bytes(y), want.dtype).reshape(want.shape, order=order.upper())
            np.testing.assert_array_equal(got, want, err_msg=f"{kind} {dtype} {name}")
            y.close()
            tier.release(key)
        base.close()
        cube.close()
    assert tier.stats().bytesHeld == 0


@pytest.mark.parametrize("kind", TIERS)
def test_sources_closed_after_await_and_memory_reused_do_not_matter(nd, tiers, kind):
    rng = np.random.default_rng(3)
    tier = nd.tier(kind, 16 * MiB)
    tiers.append(tier)
    refs = []
    for key in range(8):
        x, ref = nd.filled("FLOAT", (256, 1000 + key), "c", rng)
        tier.offload(key, x)
        tier.awaitOffloaded(key)
        x.close()  # what the trainer does: the memory goes back at once
        refs.append(ref)
    scribble = [nd.filled("FLOAT", (256, 1000), "c", rng)[0] for _ in range(8)]  # reuse it
    for key, ref in enumerate(refs):
        y = tier.take(key)
        assert_same(y, ref, "c", "FLOAT", f"key {key}")
        y.close()
    for s in scribble:
        s.close()


@pytest.mark.parametrize("kind", TIERS)
def test_take_inside_a_workspace_returns_a_detached_array(nd, tiers, kind):
    from pyd4j import workspaces as wsp
    from pyd4j.workspaces import WorkspaceConfig

    rng = np.random.default_rng(5)
    tier = nd.tier(kind, 4 * MiB)
    tiers.append(tier)
    cfg = WorkspaceConfig(initial_size="8m", policy_learning="NONE")
    try:
        with wsp.workspace("TIER_WS", cfg):
            x, ref = nd.filled("DOUBLE", (100, 50), "f", rng)
            assert x.isAttached()
            tier.offload(1, x)
            tier.awaitOffloaded(1)
        with wsp.workspace("TIER_WS", cfg):
            nd.filled("DOUBLE", (100, 50), "f", rng)  # the workspace's memory is reused
            y = tier.take(1)
        assert_same(y, ref, "f", "DOUBLE", "taken inside a workspace")
        y.close()
    finally:
        wsp.destroy_all()


# -- counters ------------------------------------------------------------------------------

@pytest.mark.parametrize("kind, per_slot", [("disk", 2 * 4096), ("pinned", 17 * 256)])
def test_counters_match_hand_worked_sizes(nd, tiers, kind, per_slot):
    """Three arrays of 1025 floats (4100 bytes): two 4096-byte pages each on disk, 17 blocks
    of 256 bytes (4352) each in the pinned pool."""
    rng = np.random.default_rng(11)
    tier = nd.tier(kind, 1 * MiB)
    tiers.append(tier)
    for key in range(3):
        x, _ = nd.filled("FLOAT", (1025,), "c", rng)  # 4100 bytes
        tier.offload(key, x)
        tier.awaitOffloaded(key)
        x.close()
    s = tier.stats()
    assert (s.bytesHeld, s.peakBytesHeld, s.bytesOffloaded) == (3 * per_slot, 3 * per_slot, 3 * 4100)
    tier.take(0).close()
    tier.take(0).close()  # a checkpoint read twice
    tier.release(0)
    s = tier.stats()
    assert (s.bytesHeld, s.peakBytesHeld, s.bytesPrefetched) == (2 * per_slot, 3 * per_slot, 2 * 4100)
    assert s.copyNanos > 0 and s.waitNanos >= 0
    assert 0.0 <= s.hiddenShare() <= 1.0


# -- memory really returns -----------------------------------------------------------------

@pytest.fixture(scope="module")
def rss_report(tmp_path_factory) -> dict:
    """Resident-set sizes around large offloads, measured in a fresh process: this test
    process's allocator keeps memory that earlier tests freed, and would hand it out again
    without the resident set changing."""
    directory = tmp_path_factory.mktemp("rss_disk_tier")
    out = subprocess.run([sys.executable, str(Path(__file__).with_name("rss_child.py")), str(directory)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    report["dir_left"] = os.listdir(directory)
    return report


N_BIG, BIG = 4, 64 * MiB


def test_disk_offload_and_close_return_the_memory(rss_report):
    """Four 64 MiB arrays offloaded and closed: the resident set falls by (nearly) their size,
    because the file's pages are unmapped after each copy, not kept resident."""
    r = rss_report["disk"]
    total = N_BIG * BIG
    assert r["r1"] - r["r0"] > 0.9 * total, "the arrays were not resident to begin with"
    assert r["r1"] - r["r2"] >= 0.75 * total, f"RSS fell by {(r['r1'] - r['r2']) / MiB:.0f} MiB only"
    assert r["held"] == r["file_length"] == total  # the file keeps its length for the next iteration
    assert r["exact"] == [True] * N_BIG
    assert r["r3"] - r["r2"] < 0.25 * total  # taken, closed, tier closed: nothing stays
    assert rss_report["dir_left"] == []


def test_pinned_offload_frees_the_source_and_close_frees_the_pool(rss_report):
    """Host build: the sources' memory returns when they are closed (their bytes now sit in the
    pool), and the pool's returns when the tier closes."""
    r = rss_report["pinned"]
    total = N_BIG * BIG
    assert r["r1"] - r["r2"] >= 0.75 * total, f"closing the sources returned {(r['r1'] - r['r2']) / MiB:.0f} MiB"
    assert r["held"] == total and r["exact"] == [True]
    assert r["r2"] - r["r3"] >= 0.75 * total, f"closing the tier returned {(r['r2'] - r['r3']) / MiB:.0f} MiB"


# -- many keys, threads, reuse -------------------------------------------------------------

@pytest.mark.parametrize("kind", TIERS)
def test_many_keys_in_flight_take_before_prefetch_repeat_and_reuse(nd, tiers, kind):
    rng = np.random.default_rng(21)
    tier = nd.tier(kind, 64 * MiB)
    tiers.append(tier)
    refs = {}
    for key in range(64):  # all in flight at once: no await between them
        x, ref = nd.filled(["FLOAT", "DOUBLE", "HALF", "BYTE"][key % 4], (int(rng.integers(1, 300)), 37),
                           "cf"[key % 2], rng)
        tier.offload(key, x)
        refs[key] = (x, ref)
    for key in range(0, 64, 3):
        tier.prefetch(key)  # read-ahead may overtake the writes: it is ordered after them
    for key in sorted(refs, reverse=True):
        x, ref = refs[key]
        tier.awaitOffloaded(key)
        x.close()
        y = tier.take(key)
        assert_same(y, ref, "cf"[key % 2], str(x.dataType()), f"key {key}")
        if key % 5 == 0:
            y2 = tier.take(key)  # taken twice: a second fresh array, same bytes
            assert address(y2) != address(y)
            assert raw_bytes(y2) == raw_bytes(y)
            y2.close()
        y.close()
    for key in range(0, 64, 2):
        tier.release(key)
    for key in range(0, 64, 2):  # released keys take new arrays
        x, ref = nd.filled("LONG", (key + 1, 3), "c", rng)
        tier.offload(key, x)
        refs[key] = (x, ref)
    for key in range(64):
        y = tier.take(key)
        want = refs[key][1]
        assert raw_bytes(y) == np.ascontiguousarray(want).tobytes(order=str(y.ordering()).upper()), key
        y.close()
        tier.release(key)
        if key % 2 == 0:
            refs[key][0].close()
    assert tier.stats().bytesHeld == 0


@pytest.mark.parametrize("kind", TIERS)
def test_threads_driving_their_own_keys(nd, tiers, kind):
    tier = nd.tier(kind, 64 * MiB)
    tiers.append(tier)
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            rng = np.random.default_rng(100 + t)
            for round_ in range(4):
                mine = {}
                for k in range(8):
                    key = t * 1000 + k
                    x, ref = nd.filled("FLOAT", (64, 64 + k), "c", rng)
                    tier.offload(key, x)
                    mine[key] = (x, ref)
                for key, (x, ref) in mine.items():
                    tier.awaitOffloaded(key)
                    x.close()
                    tier.prefetch(key)
                for key, (_, ref) in mine.items():
                    y = tier.take(key)
                    assert raw_bytes(y) == ref.tobytes(), f"thread {t} round {round_} key {key}"
                    y.close()
                    tier.release(key)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not any(th.is_alive() for th in threads), "a worker hung"
    assert not errors, errors[0]
    s = tier.stats()
    assert s.bytesHeld == 0
    assert s.bytesOffloaded == s.bytesPrefetched == 4 * 4 * sum(64 * (64 + k) * 4 for k in range(8))


@pytest.mark.parametrize("kind", TIERS)
def test_release_without_await_or_take_waits_for_the_copies(nd, tiers, kind):
    """A plan may drop a key it offloaded: release waits for the key's copies, so the source
    can be closed right after it and the slot's next array is not mixed with the old one."""
    rng = np.random.default_rng(81)
    tier = nd.tier(kind, 8 * MiB)
    tiers.append(tier)
    for round_ in range(6):
        x, _ = nd.filled("DOUBLE", (512, 512), "c", rng)  # 2 MiB
        tier.offload(7, x)
        if round_ % 2:
            tier.prefetch(7)  # a read-back nobody takes: the tier closes it
        tier.release(7)
        x.close()
    y_src, ref = nd.filled("DOUBLE", (512, 512), "c", rng)
    tier.offload(7, y_src)
    y = tier.take(7)
    assert_same(y, ref, "c", "DOUBLE", "the slot's new array")
    y.close()
    tier.release(7)
    y_src.close()
    s = tier.stats()
    assert s.bytesHeld == 0 and s.bytesOffloaded == 7 * 512 * 512 * 8


def test_disk_slots_span_gaps_so_a_fragmented_file_still_fills_to_its_limit(nd, tiers, tmp_path):
    from pyd4j.jvm.errors import JavaIllegalStateError

    rng = np.random.default_rng(31)
    slot = 64 * KiB
    tier = nd.tier("disk", 8 * slot, tmp_path)
    tiers.append(tier)
    for key in range(8):
        x, _ = nd.filled("FLOAT", (slot // 4,), "c", rng)
        tier.offload(key, x)
        tier.awaitOffloaded(key)
        x.close()
    for key in range(0, 8, 2):
        tier.release(key)  # four separate 64 KiB gaps
    big, ref = nd.filled("UBYTE", (4 * slot,), "c", rng)
    tier.offload(100, big)  # fits only across the gaps
    tier.awaitOffloaded(100)
    big.close()
    assert tier.fileLength() == 8 * slot
    y = tier.take(100)
    assert raw_bytes(y) == ref.tobytes()
    y.close()
    one, _ = nd.filled("BYTE", (1,), "c", rng)
    with raises(JavaIllegalStateError) as err:
        tier.offload(101, one)
    msg = str(err.value)
    assert "4096 bytes" in msg and f"{8 * slot} of its {8 * slot}-byte limit" in msg
    assert "maxBytes" in msg
    one.close()


# -- errors --------------------------------------------------------------------------------

def test_pinned_pool_full_names_sizes_and_fix(nd, tiers):
    from pyd4j.jvm.errors import JavaIllegalStateError

    rng = np.random.default_rng(41)
    tier = nd.tier("pinned", 256 * KiB)
    tiers.append(tier)
    x, _ = nd.filled("FLOAT", (40 * KiB,), "c", rng)  # 160 KiB
    tier.offload(1, x)
    tier.awaitOffloaded(1)
    y, _ = nd.filled("FLOAT", (40 * KiB,), "c", rng)
    with raises(JavaIllegalStateError) as err:
        tier.offload(2, y)
    msg = str(err.value)
    assert "163840 bytes" in msg and "hostPoolBytes" in msg and "largest free block" in msg
    tier.offload(3, nd.filled("FLOAT", (10,), "c", rng)[0])  # the failed key left nothing behind
    tier.release(1)
    tier.offload(2, y)  # fits now
    tier.awaitOffloaded(2)
    x.close()
    y.close()


@pytest.mark.parametrize("kind", TIERS)
def test_unknown_duplicate_and_closed_keys_are_refused_clearly(nd, kind):
    from pyd4j.jvm.errors import JavaIllegalArgumentError, JavaIllegalStateError

    rng = np.random.default_rng(51)
    tier = nd.tier(kind, MiB)
    x, _ = nd.filled("FLOAT", (10, 10), "c", rng)
    for call in (tier.awaitOffloaded, tier.prefetch, tier.take, tier.release):
        with raises(JavaIllegalArgumentError, match="key 9 is not in the .* offload\\(9, array\\) first"):
            call(9)
    tier.offload(4, x)
    with raises(JavaIllegalStateError, match="key 4 already holds .* release\\(4\\)"):
        tier.offload(4, x)
    tier.awaitOffloaded(4)
    tier.close()
    tier.close()  # idempotent
    for call in (lambda: tier.offload(5, x), lambda: tier.take(4), lambda: tier.release(4)):
        with raises(JavaIllegalStateError, match="is closed; open a new"):
            call()
    assert tier.stats().bytesHeld == 0
    closed_src, _ = nd.filled("FLOAT", (3,), "c", rng)
    closed_src.close()
    other = nd.tier(kind, MiB)
    try:
        with raises(JavaIllegalArgumentError, match="already closed"):
            other.offload(1, closed_src)
    finally:
        other.close()
    x.close()


def test_bad_construction_arguments_name_the_value(nd, tmp_path):
    from pyd4j.jvm.errors import JavaIllegalArgumentError

    with raises(JavaIllegalArgumentError, match="maxBytes=0"):
        nd.tier("disk", 0)
    with raises(JavaIllegalArgumentError, match="does not exist"):
        nd.tier("disk", MiB, tmp_path / "missing")
    with raises(JavaIllegalArgumentError, match="hostPoolBytes=100"):
        nd.tier("pinned", 100)


def test_pinned_library_override_names_the_bad_path(nd):
    from pyd4j.jvm.errors import JavaIllegalStateError

    System = nd.jpype.JClass("java.lang.System")
    System.setProperty("pyd4j.agent.library", "/nonexistent/libpyd4j_agent.so")
    try:
        with raises(JavaIllegalStateError, match="-Dpyd4j.agent.library=/nonexistent/libpyd4j_agent.so does not name a file"):
            nd.tier("pinned", MiB)
    finally:
        System.clearProperty("pyd4j.agent.library")
    nd.tier("pinned", MiB).close()  # the source tree's build again


def test_backend_mismatch_fake_flags_are_refused(nd):
    """Isolates the check (no CUDA here): each agent build against the other backend."""
    from pyd4j.jvm.errors import JavaIllegalStateError

    lib = nd.Paths.get("libpyd4j_agent.so")
    with raises(JavaIllegalStateError, match="CUDA build, but ND4J runs on its CPU backend.*DiskTier"):
        nd.PinnedHostTier.checkBackends(True, True, lib)
    with raises(JavaIllegalStateError, match="host build, but ND4J runs on its CUDA backend"):
        nd.PinnedHostTier.checkBackends(False, False, lib)
    nd.PinnedHostTier.checkBackends(False, True, lib)
    nd.PinnedHostTier.checkBackends(True, False, lib)


# -- close: files and threads --------------------------------------------------------------

def _open_fds_to(path: str) -> list[str]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(path):
            out.append(target)
    return out


def _java_threads(nd, prefix: str) -> set[str]:
    Thread = nd.jpype.JClass("java.lang.Thread")
    return {str(t.getName()) for t in Thread.getAllStackTraces().keySet() if str(t.getName()).startswith(prefix)}


def _native_threads(name: str) -> int:
    n = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                n += f.read().strip() == name
        except OSError:
            continue
    return n


def test_disk_file_never_outlives_the_tier_and_its_threads_stop(nd, tmp_path):
    rng = np.random.default_rng(61)
    before = _java_threads(nd, "pyd4j-disk-tier-")
    tier = nd.tier("disk", 4 * MiB, tmp_path)
    path = str(tier.file())
    assert os.path.dirname(path) == str(tmp_path)
    x, ref = nd.filled("INT", (1000, 100), "c", rng)
    tier.offload(1, x)
    tier.awaitOffloaded(1)
    tier.prefetch(1)
    # Unlinked at once: nothing in the directory even while the tier holds data, so not even
    # a killed JVM can leave the file behind; the open descriptor keeps it alive.
    assert os.listdir(tmp_path) == []
    assert _open_fds_to(path) == [f"{path} (deleted)"]
    assert len(_java_threads(nd, "pyd4j-disk-tier-") - before) == 2
    tier.close()  # with a key still held and a read-back not taken
    assert _open_fds_to(path) == []
    wait_until(lambda: _java_threads(nd, "pyd4j-disk-tier-") <= before, "the tier's threads to end")
    assert os.listdir(tmp_path) == []
    x.close()


def test_pinned_close_stops_the_agents_copy_threads(nd):
    rng = np.random.default_rng(71)
    before = _native_threads("pyd4j-copy")
    tier = nd.tier("pinned", 4 * MiB)
    x, _ = nd.filled("FLOAT", (1000,), "c", rng)
    tier.offload(1, x)
    tier.take(1).close()  # both copy threads have run (and named themselves) by now
    assert _native_threads("pyd4j-copy") == before + 2  # the offload and prefetch streams
    tier.close()
    assert _native_threads("pyd4j-copy") == before
    x.close()
