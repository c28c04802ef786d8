"""The planned trainer's offload tiers on real ND4J (CPU backend): DiskTier (memory-mapped file)
and PinnedHostTier (the side-agent's pinned pool, host build).

Contents are checked byte for byte against the bytes the test wrote into ND4J's memory itself;
memory is checked with the process's resident set; byte counters against hand-worked numbers
(the disk tier rounds slots to 4096-byte pages, the pinned pool to 256 bytes). The
resident-set checks run in a fresh child process (`rss_child.py`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from tests.train.tiers_common import DTYPES, SHAPES, TIERS, MiB, address, assert_same, raw_bytes
from tests.train.tiers_common import nd, tiers  # noqa: F401  (fixtures)

pytestmark = pytest.mark.jvm


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
