"""How `tune --speed` spends its runs, on fake runs (no JVM): A/Bs that stop for futility as well as
success, candidates in order of the gain the probe bounds, a total budget of runs stated in the
document, and the partial document a signal leaves."""

from __future__ import annotations

import itertools
import signal

import pytest

from pyd4j.profile import ab
from pyd4j.profile.signals import Stopped
from pyd4j.profile.speed import Measured, Probe, Setup, tune_speed
from pyd4j.profile.speed_search import Budget, by_expected_gain, expected_gain
from pyd4j.profile.speed_setup import Change


def runner_of(values):
    it = iter(values)
    return lambda: next(it)


def test_futile_when_the_interval_allows_no_worthwhile_gain():
    # after 4+4 runs the change is at best ~1% faster: the band of a setting worth keeping is 3%
    before = [10.0, 10.05, 9.95, 10.02, 10.0, 10.0, 10.0, 10.0]
    after = [10.05, 10.0, 10.02, 9.98, 10.0, 10.0, 10.0, 10.0]
    c = ab.compare(runner_of(before), runner_of(after), min_runs=4, max_runs=8, futility=True)
    assert c.verdict in ("futile", "same") and c.runs == 8
    c = ab.compare(runner_of([10, 12, 9, 11] * 2), runner_of([9.5, 11, 8.5, 10.4] * 2), min_runs=4, max_runs=8,
                   futility=True)
    # the estimate is below 1 after the least runs: more runs would at best prove a gain within their noise
    assert c.verdict == "futile" and c.runs == 8 and "not above 1" in c.reason
    # without futility the same runs spend the run budget
    c = ab.compare(runner_of([10, 12, 9, 11] * 2), runner_of([9.5, 11, 8.5, 10.4] * 2), min_runs=4, max_runs=8)
    assert c.verdict == "undecided" and c.runs == 16


def test_success_still_stops_first():
    c = ab.compare(runner_of([10, 10.2, 9.8, 10.1]), runner_of([15, 15.2, 14.8, 15.1]), futility=True)
    assert c.verdict == "faster" and c.runs == 8


def test_a_spent_budget_ends_the_comparison_undecided_before_its_next_run():
    calls = []
    left = iter([None, None, None, "3 runs after the probe"])
    c = ab.compare(lambda: calls.append("b") or 10.0, lambda: calls.append("a") or 12.0,
                   out_of_budget=lambda: next(left))
    assert calls == ["b", "a", "b"] and c.verdict == "undecided" and c.budget_spent == "3 runs after the probe"
    assert "budget" in c.reason


def test_budget_counts_runs_and_minutes():
    b = Budget(runs=2)
    assert b.out() is None
    b.ran(10.0)
    b.ran(12.0)
    assert b.out() == "2 runs after the probe" and b.to_dict()["runs_used"] == 2
    t = Budget(seconds=60.0)
    t.started -= 50.0          # 50 s used, a run takes 20 s: the next would pass 60 s
    t.ran(20.0)
    assert "minutes" in (t.out() or "")


def test_candidates_in_order_of_the_gain_the_probe_bounds():
    probe = Probe(10.0, True, "", nd4j={"max_threads": 8}, gc_share=0.30, explicit_gc_share=0.05,
                  time_split={"share": {"data": 0.5}})
    cands = [Change("threads=2", "8", "2", ""), Change("omp_wait_policy", "", "", ""),
             Change("heap", "", "", ""), Change("prefetch", "", "", ""), Change("explicit_gc", "", "", "")]
    ordered, why = by_expected_gain(cands, probe)
    # prefetch removes up to 50% of the time (2x), GC outside System.gc() 25% (1.33x), threads 8 -> 2 (2x ** 0.5)
    assert [c.setting for c in ordered] == ["prefetch", "threads=2", "heap", "explicit_gc", "omp_wait_policy"]
    assert why["prefetch"]["expected"] == pytest.approx(2.0)
    assert expected_gain(Change("heap", "", "", ""), probe)[0] == pytest.approx(1 / 0.75)
    assert "prior" in why["omp_wait_policy"]["why"]


def _fake_runner(speeds):
    """Speeds by the setup's label; a little noise so an A/B can decide."""
    noise = itertools.cycle([1.0, 1.01, 0.99, 1.005])

    def run(setup: Setup, side: str) -> Measured:
        return Measured(speeds.get(setup.label(), 10.0) * next(noise), True, "")
    return run


def test_fake_tune_speed_within_a_run_budget_states_what_it_did_not_try(tmp_path):
    job = ["java", "-cp", "x.jar", "Main"]
    # unset threads on 2 cores: threads=2, threads=1 and OMP_WAIT_POLICY are the candidates
    speeds = {"threads=1=OMP_NUM_THREADS=1": 30.0}
    doc = tune_speed(job, tmp_path / "t", runner=_fake_runner(speeds), env={}, n_cores=2, ram_bytes=8 << 30,
                     budget=Budget(runs=10), max_runs=8)
    b = doc["budget"]
    assert b["runs"] == 10 and b["runs_used"] <= 10 and b["spent"] == "10 runs after the probe"
    tried = [t["setting"] for t in doc["speed"]["tried"]]
    assert set(tried) | set(b["untried"]) == {"threads=2", "threads=1", "omp_wait_policy"}
    assert b["untried"], doc["speed"]["tried"]
    assert doc["speed"]["runs"] == b["runs_used"] + 1    # the probe, then the budget's runs
    assert all(t["budget_spent"] is None for t in doc["speed"]["tried"][:-1])


def test_fake_tune_speed_stopped_by_a_signal_keeps_a_partial_document(tmp_path):
    job = ["java", "-cp", "x.jar", "Main"]
    calls = []

    def runner(setup: Setup, side: str) -> Measured:
        calls.append(side)
        if len(calls) == 4:
            raise Stopped(signal.SIGTERM)
        return Measured(10.0, True, "")

    with pytest.raises(Stopped) as err:
        tune_speed(job, tmp_path / "t", runner=runner, env={}, n_cores=2, ram_bytes=8 << 30)
    doc = err.value.doc
    assert doc["partial"] is True and doc["stopped_by"] == "SIGTERM" and doc["exit_code"] == 143
    assert doc["speed"]["verdict"] == "stopped" and doc["speed"]["changes"] == []
    assert doc["probe"]["iterations_per_s"] == 10.0 and doc["speed"]["runs"] == 3
