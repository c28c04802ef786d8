"""Rows per output() call (pyd4j.serve.sizing) and the workspace footprint measured at load.

The choice's logic is tested with fake timings (a scripted clock, named as such); on real DL4J the
slice is fixed, so that no test depends on how fast the machine is, and `auto` is checked only for
what holds whatever the timings were.
"""

from __future__ import annotations

import numpy as np
import pytest

from pyd4j.serve import sizing

NETWORKS = "examples/networks"


class FakeTimings:
    """A clock that advances by a scripted time per call of `run(rows)`: the whole batch takes
    `seconds_whole`, a slice `slowdown[rows]` times that; `later[rows] = (k, factor)`: from its k-th
    call on, that slice takes `factor` times the whole batch instead."""

    def __init__(self, max_batch: int, seconds_whole: float, slowdown: dict[int, float],
                 later: dict[int, tuple[int, float]] | None = None) -> None:
        self.now, self.calls = 0.0, []
        self.max_batch, self.whole, self.slowdown, self.later = max_batch, seconds_whole, slowdown, later or {}

    def clock(self) -> float:
        return self.now

    def run(self, rows: int) -> None:
        factor = 1.0 if rows == self.max_batch else self.slowdown[rows]
        if rows in self.later and self.calls.count(rows) >= self.later[rows][0]:
            factor = self.later[rows][1]
        self.calls.append(rows)
        self.now += self.whole * factor


def test_candidates_halve_down_to_one_row():
    assert sizing.candidates(32) == [16, 8, 4, 2, 1]
    assert sizing.candidates(100) == [50, 25, 13, 7, 4, 2, 1]
    assert sizing.candidates(1) == []


def test_fake_timings_keep_the_smallest_slice_within_the_tolerance():
    t = FakeTimings(32, 0.1, {16: 1.0, 8: 1.04, 4: 1.2, 2: 2.0, 1: 4.0})
    s = sizing.measure(t.run, 32, clock=t.clock)
    assert (s.rows, s.stopped, s.how) == (8, "slower", "measured")
    assert [(st.rows, st.kept, st.confirms) for st in s.steps] == [(16, True, False), (8, True, False),
                                                                   (4, False, False), (8, True, True)]
    assert s.steps[1].ratio == pytest.approx(1.04) and s.steps[2].ratio == pytest.approx(1.2)
    assert s.steps[1].median_pair_ratio == pytest.approx(1.04)
    # pairs alternate which side runs first: whole, 16, 16, whole, whole, 16, ...; 0.1 s calls get
    # as many pairs as fit in STEP_SECONDS (20), 1 s calls the minimum
    assert t.calls[3:7] == [32, 16, 16, 32]
    assert t.calls.count(16) == 1 + int(sizing.STEP_SECONDS / 0.2)
    slow = FakeTimings(32, 1.0, {16: 1.0, 8: 2.0})
    sizing.measure(slow.run, 32, clock=slow.clock, time_limit_s=100.0)
    assert slow.calls.count(16) == 2 * (1 + sizing.PAIRS)   # measured, then confirmed


def test_fake_timings_a_slice_not_confirmed_goes_back_to_the_one_before():
    first = 1 + int(sizing.STEP_SECONDS / 0.2)            # the calls of 8 when it is first measured
    t = FakeTimings(32, 0.1, {16: 1.0, 8: 1.0, 4: 1.5}, later={8: (first, 1.3)})
    s = sizing.measure(t.run, 32, clock=t.clock)
    assert s.rows == 16
    assert [(st.rows, st.kept, st.confirms) for st in s.steps] == [(16, True, False), (8, True, False),
                                                                   (4, False, False), (8, False, True)]


def test_fake_timings_stop_at_one_row_or_at_the_time_limit():
    fast = FakeTimings(8, 0.01, {4: 1.0, 2: 1.0, 1: 1.0})
    assert (sizing.measure(fast.run, 8, clock=fast.clock).rows, "one row") == (1, "one row")
    slow = FakeTimings(32, 2.0, {16: 1.0, 8: 1.0, 4: 1.0, 2: 1.0, 1: 1.0})
    s = sizing.measure(slow.run, 32, time_limit_s=40.0, clock=slow.clock)
    # two untimed+timed whole calls (4 s), then a candidate costs 11 whole-batch times with five
    # pairs (22 s) or 7 with three (14 s): 16 with five pairs, 8 with three, then no room for 4 nor
    # to confirm 8: the choice goes back to 16
    assert (s.rows, s.stopped, len(s.steps)) == (16, "time limit", 2)
    assert slow.calls.count(16) == 1 + sizing.PAIRS and slow.calls.count(8) == 1 + sizing.MIN_PAIRS
    assert slow.now <= 40.0
    one = FakeTimings(1, 0.1, {})
    assert sizing.measure(one.run, 1, clock=one.clock).rows == 1


@pytest.mark.jvm
def test_a_fixed_slice_holds_the_workspaces_to_its_footprint(jvm, tmp_path):
    """lenet at max batch 32 in slices of 8: the workspaces measured at load are what any later
    request leaves resident (32 rows, or any number of rows in any order), a quarter of a whole
    call's, and the outputs are output() on 8 rows at a time, equal to one call to float32 rounding."""
    import pyd4j.nd as nd
    from pyd4j.serve.model import ServedModel
    from pyd4j import workspaces

    workspaces.destroy_all()
    m = ServedModel("lenet", f"{NETWORKS}/lenet.json", tmp_path)
    fp = m.load(32, 8)
    assert (fp.slice_rows, m.sizing.how) == (8, "fixed")
    assert 0 < fp.workspace_bytes < 0.35 * fp.whole_workspace_bytes
    rng = np.random.default_rng(3)
    x = rng.random((32, 784), dtype=np.float32)
    got = m.infer([x])[0]
    assert workspaces.held_bytes() <= fp.workspace_bytes
    for rows in rng.integers(1, 33, size=12):
        m.infer([x[:rows]])
        assert workspaces.held_bytes() <= fp.workspace_bytes
    whole = nd.to_numpy(m.net.output(nd.from_numpy(x)), copy=True)
    np.testing.assert_allclose(got, whole, rtol=1e-5, atol=1e-7)
    chunks = np.concatenate([nd.to_numpy(m.net.output(nd.from_numpy(np.ascontiguousarray(x[i:i + 8]))), copy=True)
                             for i in range(0, 32, 8)])
    np.testing.assert_array_equal(got, chunks)
    m.close()


@pytest.mark.jvm
def test_whole_batch_footprint_is_measured_after_the_workspaces_settle(jvm, tmp_path):
    """DL4J's second activation workspace allocates a call later than the first: measured after one
    call, the footprint missed it (deep_cnn_bn: 21 of 64 MB). Whatever runs after load stays within it."""
    from pyd4j.serve.model import ServedModel
    from pyd4j import workspaces

    workspaces.destroy_all()
    m = ServedModel("deep_cnn_bn", f"{NETWORKS}/deep_cnn_bn.json", tmp_path)
    fp = m.load(4, "whole")
    assert fp.slice_rows == 4 and fp.workspace_bytes == fp.whole_workspace_bytes
    x = np.random.default_rng(5).random((4, *m.inputs[0].shape[1:]), dtype=np.float32)
    for rows in (4, 1, 4, 3, 4, 4):
        m.infer([x[:rows]])
        assert workspaces.held_bytes() <= fp.workspace_bytes
    m.close()


@pytest.mark.jvm
@pytest.mark.slow
def test_auto_sizing_on_real_dl4j_reports_a_consistent_choice(jvm, tmp_path):
    """Whatever the timings: the rows chosen are the last kept candidate once measured again (or the one before
    it, where that second measurement failed or found no time), and fewer rows hold fewer bytes."""
    from pyd4j.serve.model import ServedModel
    from pyd4j import workspaces

    workspaces.destroy_all()
    m = ServedModel("lenet", f"{NETWORKS}/lenet.json", tmp_path)
    fp = m.load(16)
    s = m.sizing
    assert s.how == "measured" and s.stopped in ("slower", "one row", "time limit")
    chain = [16] + [st.rows for st in s.steps if st.kept and not st.confirms]
    confirmed = any(st.confirms and st.kept and st.rows == chain[-1] for st in s.steps)
    assert fp.slice_rows == (chain[-1] if confirmed or len(chain) == 1 else chain[-2])
    tried = [st for st in s.steps if not st.confirms]
    assert all(st.kept for st in tried[:-1])   # candidates end at the first one slower than the whole batch
    if fp.slice_rows < 16:
        assert fp.workspace_bytes < fp.whole_workspace_bytes
    m.close()
