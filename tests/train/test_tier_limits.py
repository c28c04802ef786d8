"""The offload tiers' limits and endings, on real ND4J (CPU backend): a fragmented disk file still fills
to its limit, a full pinned pool names the sizes and the fix, bad keys and arguments are refused
with the value and the fix, and closing a tier leaves no file, descriptor or thread behind.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.train.tiers_common import TIERS, KiB, MiB, raises, raw_bytes, wait_until
from tests.train.tiers_common import nd, tiers  # noqa: F401  (fixtures)

pytestmark = pytest.mark.jvm


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
