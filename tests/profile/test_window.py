"""The measurement window's rules on made-up timelines (no JVM): --window values, warm-up and the rate
after it, when memory is flat, for what a windowed run sizes flags, and the A/B runs' window."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyd4j.profile import flatness, window
from pyd4j.profile.flatness import plateau, sizing_scope
from pyd4j.profile.timeline import Timeline
from pyd4j.profile.window import AUTO, RunWindow, WindowError, WindowSpec, parse_window, rate_after, speed_window, \
    warmup_iterations

MIB = 1 << 20


def made_up(seconds: float, rate: float, *, native=lambda s: 100 * MIB, held=lambda s: 8 * MIB, warm_s: float = 0.0,
            live=None, stopped_by: str | None = "window", exit_code: int = 0, start_ms: float = 1e12) -> Timeline:
    """A timeline of `seconds` of training at `rate` iterations/s (half that during the first `warm_s`),
    a sample every 100 ms; `native(s)` / `held(s)` the memory at second s; `live(s)` a live point's heap
    (every 5 s from second 5) or none."""
    samples, iters = [], 0.0
    heap = 64 * MIB
    for i in range(int(seconds * 10) + 1):
        s = i / 10.0
        iters += (rate / 2 if s < warm_s else rate) / 10.0 if i else 0.0
        samples.append({"t": start_ms + s * 1000, "iterations": int(iters), "rss": heap + 40 * MIB + native(s),
                        "heap_rss": heap, "heap_committed": heap, "nonheap_committed": 40 * MIB, "nonheap_used": 38 * MIB,
                        "nd4j_live": held(s), "javacpp_total": 0})
    lives = [] if live is None else [{"t": start_ms + s * 1000, "heap_live": live(s), "iterations": int(s * rate),
                                      "nd4j_live": held(s), "javacpp_total": 0} for s in range(5, int(seconds), 5)]
    meta = {"returncode": exit_code, "interrupted": stopped_by is not None, "stopped_by": stopped_by}
    return Timeline(Path("."), {"jvm_start": start_ms - 2000}, samples, [], [], [], [], None, meta, live_points=lives)


def test_window_values_and_their_errors():
    assert parse_window("auto") == AUTO and parse_window("FULL").full
    assert parse_window("2000") == WindowSpec("iterations", 2000.0)
    assert parse_window("90s") == WindowSpec("seconds", 90.0) and parse_window("5m").value == 300.0
    assert parse_window("1.5h").value == 5400.0
    for bad in ("0", "-3", "12x", "0s", "", "5 minutes"):
        with pytest.raises(WindowError) as err:
            parse_window(bad)
        assert repr(bad) in str(err.value) or bad in str(err.value)
        assert "--window" in str(err.value)


def test_each_window_becomes_the_agents_options(tmp_path):
    stop = tmp_path / "window.stop"
    assert RunWindow(parse_window("500")).agent_options(stop) == ["window_iterations=500"]
    assert RunWindow(parse_window("90s")).agent_options(stop) == ["window_ms=90000"]
    assert RunWindow(AUTO).agent_options(stop) == [f"stop_file={stop}"]
    assert RunWindow(AUTO, "speed", iterations=70, warmup=10).agent_options(stop) == ["window_iterations=70"]
    assert RunWindow(WindowSpec("full")).agent_options(stop) == []


def test_warm_up_ends_where_the_rate_reaches_the_steady_one():
    t = made_up(40, 20.0, warm_s=5.0)
    warm = warmup_iterations(t)
    # 5 s at 10/s: iteration 50, then the steady 20/s (warm-up ends at the block after, 2 s blocks)
    assert 50 <= warm <= 90, warm
    assert rate_after(t, warm) == pytest.approx(20.0, rel=0.03)
    assert t.iterations_per_second() < 19.0   # from the first iteration, warm-up included


def test_speed_window_from_the_probe():
    probe = made_up(40, 20.0, warm_s=5.0)
    w = speed_window(AUTO, probe)
    warm = warmup_iterations(probe)
    # the warm-up twice over, then SPEED_MEASURE_S seconds of iterations at the probe's rate
    assert w.warmup == 2 * warm and w.iterations == w.warmup + int(20.0 * window.SPEED_MEASURE_S)
    assert speed_window(parse_window("30"), probe).iterations is None            # the user's 30 iterations
    assert speed_window(parse_window("30"), probe).warmup == 10                   # a third of them at most
    assert speed_window(WindowSpec("full"), probe) is None


def test_flat_memory_sizes_for_the_whole_job():
    t = made_up(90, 20.0, live=lambda s: 30 * MIB)
    assert plateau(t).flat
    scope = sizing_scope(t)
    assert scope.whole_job and scope.ended == "window", scope
    assert "leak slower than" in scope.leak_resolution


def test_rising_native_memory_is_not_flat_and_is_said():
    t = made_up(90, 20.0, native=lambda s: 100 * MIB + s * MIB, live=lambda s: 30 * MIB)   # +1 MiB a second
    p = plateau(t)
    assert not p.flat and p.rising[0].startswith("native memory +")
    assert p.drift == pytest.approx(3600 * MIB, rel=0.05)
    scope = sizing_scope(t)
    assert not scope.whole_job and "not shown flat" in scope.why
    assert any("drifted about" in n for n in scope.notes)


def test_a_rise_that_levelled_off_early_is_flat():
    t = made_up(90, 20.0, native=lambda s: 100 * MIB + min(s, 20) * 4 * MIB, live=lambda s: 30 * MIB)
    assert plateau(t).flat


def test_too_few_live_points_rule_no_leak_out():
    t = made_up(90, 20.0)   # no live point at all
    scope = sizing_scope(t)
    assert not scope.whole_job and "too little to rule a leak out" in scope.why


def test_a_completed_run_is_the_whole_job_and_a_failed_one_is_not():
    assert sizing_scope(made_up(30, 20.0, stopped_by=None)).whole_job
    failed = sizing_scope(made_up(30, 20.0, stopped_by=None, exit_code=137))
    assert not failed.whole_job and failed.ended == "failed"
    signalled = sizing_scope(made_up(30, 20.0, stopped_by="SIGTERM", exit_code=143))
    assert not signalled.whole_job and signalled.ended == "SIGTERM"


def test_auto_memory_window_waits_for_its_least_training_then_for_flat_memory(monkeypatch):
    healthy = made_up(90, 20.0, live=lambda s: 30 * MIB)
    assert window.memory_decision(healthy.until(healthy.samples[0]["t"] + 20_000)) is None   # too little training yet
    assert "no leak" in window.memory_decision(healthy)
    # a re-run measures at least the iterations of its first run
    assert window.memory_decision(healthy, min_iterations=5000) is None
    rising = made_up(90, 20.0, native=lambda s: 100 * MIB + s * MIB, live=lambda s: 30 * MIB)
    assert window.memory_decision(rising) is None
    monkeypatch.setattr(window, "MEMORY_MAX_S", 80.0)
    assert "the most an auto window measures" in window.memory_decision(rising)


def test_flatness_allowance(monkeypatch):
    # a creep of 12 MiB over the window is within the allowance (10%, at least 16 MiB) ...
    t = made_up(60, 20.0, native=lambda s: 200 * MIB + s * 0.2 * MIB, live=lambda s: 30 * MIB)
    assert plateau(t).flat
    # ... and a drift beyond a smaller one: the later half's slope over the whole window counts, not only its rise
    monkeypatch.setattr(flatness, "PLATEAU_SLACK", 4 * MIB)
    monkeypatch.setattr(flatness, "PLATEAU_SHARE", 0.01)
    p = plateau(t)
    assert not p.flat and "drifting" in p.rising[0]


def test_native_peak_is_taken_where_the_heap_was_read():
    """Between the agent's reads of the heap's resident pages its share is interpolated: a heap that grew
    and shrank between two reads must not show as native memory the job never had."""
    from pyd4j.profile.need import native_peak

    t = made_up(20, 20.0)
    for i, s in enumerate(t.samples):
        if i % 50:                                       # read every 5 s, as the agent does
            del s["heap_rss"]
        if 120 <= i < 130:                               # the heap swells by 200 MiB between two reads
            s["rss"] += 200 * MIB
    assert native_peak(t) == pytest.approx(100 * MIB)    # what the job had at every read
    assert t.peaks()["native"] >= 290 * MIB              # the interpolated series counts the heap's swell


def test_a_window_ends_on_a_clearer_plateau_than_the_sizing_check_asks():
    """A borderline creep (12 MiB over 60 s, 16 MiB allowed) is flat for the sizing check but does not end
    an auto window: the samples taken while the job stops could tip it, leaving the tune unsized after a
    window that said "flat" (a healthy 60,000-iteration job: native memory 19 MiB over its 63 s window)."""
    creep = made_up(90, 20.0, native=lambda s: 200 * MIB + s * 0.2 * MIB, live=lambda s: 30 * MIB)
    assert plateau(creep).flat and sizing_scope(creep).whole_job
    assert not plateau(creep, window.WINDOW_ALLOWANCE).flat
    assert window.memory_decision(creep) is None
    steady = made_up(90, 20.0, live=lambda s: 30 * MIB)
    assert "no leak" in window.memory_decision(steady) and sizing_scope(steady).whole_job


def test_a_steady_rise_too_small_for_a_leak_verdict_is_not_sized_for_the_whole_job(monkeypatch):
    """A slow leak (here 80 KiB a second, 7 MiB over a 90 s window: under the 16 MiB a leak verdict needs) is
    steady: a job of hours under flags sized from the window would run out of them (a 4 KiB-an-iteration
    job, 60,000 iterations, died at 435 MiB of JavaCPP physical bytes). The window goes on, and the run is
    not sized for the whole job; kept memory that rose and levelled off early is still flat."""
    slow = made_up(90, 20.0, held=lambda s: 8 * MIB + s * 80 * 1024, live=lambda s: 30 * MIB)
    assert [v.status for v in flatness.leak_verdicts(slow)] == ["no-leak", "no-leak"]
    assert plateau(slow).flat                      # under every allowance the plateau check has
    scope = sizing_scope(slow)
    assert not scope.whole_job and "rose" in scope.why and "passes any limit" in scope.why, scope.why
    assert window.memory_decision(slow) is None    # the auto window waits (a leak verdict may come)
    monkeypatch.setattr(window, "MEMORY_MAX_S", 80.0)
    assert "the most an auto window measures" in window.memory_decision(slow)
    settled = made_up(90, 20.0, held=lambda s: 8 * MIB + min(s, 30) * 80 * 1024, live=lambda s: 30 * MIB)
    assert flatness.slow_rise(settled) is None and sizing_scope(settled).whole_job
