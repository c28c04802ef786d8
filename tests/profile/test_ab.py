"""The A/B engine's statistics (pyd4j.profile.ab), checked against scipy's exact Mann-Whitney test
and hand-made samples; the job runners are fakes that return listed speeds (our logic only)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import mannwhitneyu

from pyd4j.profile.ab import ABError, NoProgress, RunFailed, _critical_rank, _u_distribution, compare, judge, ratio_interval


@pytest.mark.parametrize("n,m", [(3, 3), (4, 4), (5, 4), (6, 6), (8, 8)])
def test_u_distribution_matches_scipy_exact_p_values(n, m):
    # P(U <= u) from our counts equals scipy's exact one-sided p-value for data whose U is u.
    counts = _u_distribution(n, m)
    assert sum(counts) == math.comb(n + m, n)
    cdf = np.cumsum([float(c) for c in counts]) / float(sum(counts))
    rng = np.random.default_rng(n * 100 + m)
    for _ in range(12):
        x, y = rng.normal(size=n), rng.normal(size=m) + rng.normal()
        u = int(sum(xi > yj for xi in x for yj in y))
        p = mannwhitneyu(x, y, alternative="less", method="exact").pvalue
        assert cdf[u] == pytest.approx(p, rel=1e-9)


def test_interval_inverts_the_exact_test():
    # Every ratio inside the 95% interval is a shift the exact two-sided test does not reject at 5%;
    # ratios just outside are rejected: the interval is the test's own, not an approximation.
    rng = np.random.default_rng(3)
    before = list(10 * np.exp(rng.normal(0, 0.05, 6)))
    after = list(12 * np.exp(rng.normal(0, 0.05, 6)))
    est, low, high = ratio_interval(before, after)
    assert low < est < high

    def p_for(ratio):
        return mannwhitneyu(np.log(after) - math.log(ratio), np.log(before), method="exact").pvalue

    assert p_for(est) > 0.05
    assert p_for(low * 1.001) > 0.05 and p_for(high / 1.001) > 0.05
    assert p_for(low / 1.01) < 0.05 and p_for(high * 1.01) < 0.05


def test_three_runs_a_side_can_never_exclude_one():
    # With 3+3 runs the smallest two-sided exact p is 0.1: no 95% interval exists (hand-worked: 2/20).
    assert _critical_rank(3, 3, 0.95) == 0
    est, low, high = ratio_interval([10, 10.1, 9.9], [20, 20.2, 19.8])
    assert est == pytest.approx(2.0, rel=0.02) and low == 0.0 and math.isinf(high)
    # With 4+4 it can (2/70 = 0.029 < 0.05): the interval is the extreme pairwise ratios' inner pair.
    assert _critical_rank(4, 4, 0.95) == 1


def test_hand_made_samples_verdicts():
    before = [10.0, 10.1, 9.9, 10.05]
    faster = judge(before, [13.0, 13.1, 12.9, 13.05])
    assert faster.verdict == "faster"
    assert faster.ratio == pytest.approx(13.025 / 10.025)
    # with 4+4 and k=1 the interval is [min pairwise ratio, max pairwise ratio]
    assert faster.interval[0] == pytest.approx(12.9 / 10.1) and faster.interval[1] == pytest.approx(13.1 / 9.9)
    assert judge(before, [7.0, 7.1, 6.9, 7.05]).verdict == "slower"
    assert judge(before, [10.02, 10.0, 9.95, 10.08]).verdict == "same"
    # overlapping noisy samples: no verdict
    assert judge([10, 12, 9, 11], [11, 9.5, 12.5, 10]).verdict == "undecided"


def test_bad_speeds_are_refused_with_the_values():
    with pytest.raises(ABError, match="positive"):
        ratio_interval([10, 0, 9], [10, 11, 12])
    with pytest.raises(ABError, match="no before runs"):
        ratio_interval([], [1.0])


def _fake_runner(values):
    """A fake job: returns the listed speeds in order (isolates the alternation and stopping logic)."""
    it = iter(values)
    calls = []

    def run():
        v = next(it)
        calls.append(v)
        if isinstance(v, str):
            raise RunFailed(v)
        return v
    run.calls = calls
    return run


def test_fake_runs_alternate_and_stop_once_the_interval_excludes_one():
    order = []
    b = _fake_runner([10, 10.2, 9.8, 10.1, 10, 10])
    a = _fake_runner([15, 15.2, 14.8, 15.1, 15, 15])
    c = compare(lambda: order.append("b") or b(), lambda: order.append("a") or a(), min_runs=4, max_runs=8)
    assert order == ["b", "a"] * 4
    assert c.verdict == "faster" and c.runs == 8


def test_fake_runs_spend_the_budget_when_undecided():
    b = _fake_runner([10, 12, 9, 11, 10.5, 11.5, 9.5, 10.2, 99])
    a = _fake_runner([11, 9.5, 12.5, 10, 10.4, 11.4, 9.6, 10.3, 99])
    c = compare(b, a, min_runs=4, max_runs=6)
    assert c.verdict == "undecided" and len(c.before) == 6 and len(c.after) == 6
    assert "budget" in c.reason


def test_fake_broken_change_ends_the_comparison_as_broken():
    c = compare(_fake_runner([10, 10, 10]), _fake_runner([11, "exit code 134"]), min_runs=4)
    assert c.verdict == "broken" and c.failed == ["exit code 134"]


def test_fake_reuses_before_runs_and_catches_up_first():
    order = []
    a = _fake_runner([15, 15.2, 14.8, 15.1])
    b = _fake_runner([])
    c = compare(lambda: order.append("b") or b(), lambda: order.append("a") or a(),
                before_runs=[10, 10.2, 9.8, 10.1])
    assert order == ["a"] * 4 and c.verdict == "faster"


def test_fake_change_too_slow_to_measure_is_slower_not_broken():
    def after():
        raise NoProgress("trained too few iterations to measure a speed")
    c = compare(_fake_runner([10, 10]), after)
    assert c.verdict == "slower" and "too few iterations" in c.reason
