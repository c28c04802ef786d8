"""The budget's accounting and choice of victims, without a JVM: the evictor here is a stand-in that
records what it was asked to evict and reports it done (the name says so: fake_evictor)."""

from __future__ import annotations

import threading

import pytest

from pyd4j.serve.budget import Budget, NoRoomError, OverBudgetError


def _budget(limit, at_once=False, idle_s=0.0):
    """A budget whose fake evictor records each request, and with at_once reports the eviction done
    right away (from inside the budget's lock, which is re-entrant, as a worker would later)."""
    asked: list[str] = []

    def fake_evictor(name: str) -> None:
        asked.append(name)
        if at_once:
            budget.evicted(name)

    budget = Budget(limit, fake_evictor, idle_s)
    return budget, asked


def _load(budget, name, size):
    budget.begin_load(name, budget.limit or 0)
    budget.loaded(name, size)


def _run(budget, name):
    action = budget.begin(name)
    if action == "restore":
        budget.restored(name)
    budget.end(name)
    return action


def test_fake_evictor_lru_victim_and_sum_under_budget():
    budget, asked = _budget(100, at_once=True)
    _load(budget, "a", 40)
    _load(budget, "b", 40)                   # a load holds the whole budget until measured: a goes
    assert asked == ["a"] and budget.resident_bytes() == 40
    assert _run(budget, "a") == "restore"    # 40 + 40 fits: nothing evicted
    assert _run(budget, "b") == "run" and asked == ["a"]
    _load(budget, "c", 40)                   # a, then b (least recently used first)
    assert asked == ["a", "a", "b"]
    assert _run(budget, "a") == "restore"    # c + a = 80
    assert _run(budget, "b") == "restore"    # 120 > 100: c, used before a, goes
    assert asked[-1] == "c" and budget.resident_bytes() == 80
    assert budget.peak_resident <= 100
    assert budget.entry("a").restores == 2 and budget.entry("a").evictions == 2


def test_fake_evictor_busy_model_is_evicted_after_its_batch():
    budget, asked = _budget(50)
    _load(budget, "a", 40)
    assert budget.begin("a") == "run"        # a busy
    _load_b = threading.Thread(target=_load, args=(budget, "b", 40))
    _load_b.start()
    while not asked:
        _load_b.join(0.01)
    assert asked == ["a"] and budget.entry("a").state == "evicting"
    budget.end("a")
    assert budget.begin("a") == "evict"      # a's next batch evicts first
    budget.evicted("a")
    _load_b.join(10)
    assert not _load_b.is_alive() and budget.entry("b").state == "resident"
    assert budget.peak_resident <= 50


def test_model_larger_than_budget_is_refused_with_its_size():
    budget, _ = _budget(100)
    budget.begin_load("big", 100)
    with pytest.raises(OverBudgetError) as err:
        budget.loaded("big", 150)
    assert err.value.args[0] == 150
    assert budget.resident_bytes() == 0


def test_no_limit_never_evicts():
    budget, asked = _budget(None)
    for i in range(5):
        _load(budget, str(i), 10**9)
    assert asked == [] and budget.resident_bytes() == 5 * 10**9


def test_fake_evictor_idle_time_protects_a_recently_used_model_and_names_it():
    budget, asked = _budget(50, at_once=True, idle_s=3600)
    _load(budget, "a", 40)
    _load(budget, "b", 40)                    # a only loaded, never used: not protected, evicted
    assert asked == ["a"]
    assert _run(budget, "b") == "run"         # b used just now: inside its idle time
    with pytest.raises(NoRoomError) as err:
        budget.begin("a", timeout=0.2)        # a needs b's room; b may not go for an hour
    assert asked == ["a"] and budget.entry("b").state == "resident"
    msg = str(err.value)
    assert "'a'" in msg and "'b'" in msg and "budget of 50 bytes" in msg and "3600 s" in msg
    assert 3500 <= err.value.retry_after <= 3600


def test_fake_evictor_idle_time_passed_then_evicts():
    budget, asked = _budget(50, at_once=True, idle_s=0.3)
    _load(budget, "a", 40)
    _load(budget, "b", 40)
    assert _run(budget, "b") == "run"
    assert budget.begin("a", timeout=30) == "restore"   # waited until b had been idle 0.3 s, then b went
    assert asked == ["a", "b"] and budget.resident_bytes() == 40
