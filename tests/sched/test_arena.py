"""The first-fit arena by hand: placement, merging, no compaction, the open top."""

from __future__ import annotations

import pytest

from pyd4j.sched.arena import ArenaFull, FirstFit

U = 256


def test_first_fit_places_by_hand() -> None:
    a = FirstFit()
    assert [a.alloc(k, U) for k in (1, 2, 3)] == [0, U, 2 * U]
    a.free(2)  # hole [U, 2U)
    assert a.alloc(4, 2 * U) == 3 * U  # does not fit the hole: on top
    assert a.alloc(5, 100) == U  # fits it (aligned to U)
    a.free(1)
    a.free(5)  # [0, 2U) merged
    assert a.alloc(6, 2 * U) == 0
    assert a.high_water == 5 * U and a.live_bytes == 5 * U
    a.free(4)  # top block: the open range comes down to 3U
    assert a.top == 3 * U and a.alloc(7, 3 * U) == 3 * U and a.high_water == 6 * U
    a.rename(7, 8)
    assert a.blocks[8] == (3 * U, 3 * U) and 7 not in a.blocks


def test_a_full_arena_names_the_fragmentation() -> None:
    a = FirstFit(capacity=4 * U)
    for k in range(4):
        a.alloc(k, U)
    a.free(0)
    a.free(2)  # 2U free in two pieces
    with pytest.raises(ArenaFull, match="largest free range 256 bytes: fragmentation") as e:
        a.alloc(9, 2 * U)
    assert e.value.live == 2 * U and a.largest_free() == U
    with pytest.raises(ValueError, match="already allocated"):
        a.alloc(1, U)
    with pytest.raises(ValueError, match="not allocated"):
        a.free(0)
