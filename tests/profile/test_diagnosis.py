"""Real fixture jobs under the real agent: each known memory behaviour gets the right diagnosis."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pyd4j.profile import Timeline, diagnose
from pyd4j.profile.leak_verdicts import fit_trend, leak_verdicts
from pyd4j.profile.leaks import leak_sites
from tests.profile.conftest import fixture_command

pytestmark = [pytest.mark.jvm, pytest.mark.slow]

MIB = 1 << 20


def kinds(run) -> list[str]:
    return [f.kind for f in diagnose(run.timeline)]


def test_healthy_job_has_no_false_leak(healthy_run):
    t = healthy_run.timeline
    assert healthy_run.returncode == 0
    assert t.iterations() == 150  # every fit() counted by the attached listener
    assert len(t.samples) >= 10
    found = kinds(healthy_run)
    assert not [k for k in found if k.startswith(("leak", "oom", "killed", "crash"))], found


def test_offheap_leak_is_reported_with_slope_near_truth(leak_run):
    assert leak_run.returncode == 0
    leak = [f for f in diagnose(leak_run.timeline) if f.kind == "leak-offheap"]
    assert leak, kinds(leak_run)
    # The job keeps one 1 MiB float array per iteration.
    slope = leak[0].numbers["slope_bytes_per_unit"]
    assert 0.8 * MIB < slope < 1.5 * MIB, slope
    assert leak[0].numbers["confidence"] >= 0.99
    assert "iteration" in leak[0].title
    assert "MemoryJob.java" in leak[0].numbers["site"]


def test_socket_transport_carried_the_timeline(leak_run):
    # the leak job streamed over the token-checked loopback socket
    assert leak_run.timeline.start["pid"] > 0
    assert leak_run.timeline.end is not None


def test_maxbytes_oom_names_maxbytes_and_its_flag(maxbytes_run):
    assert maxbytes_run.returncode != 0
    f = next(f for f in diagnose(maxbytes_run.timeline) if f.kind.startswith("oom"))
    assert f.kind == "oom-javacpp-maxbytes"
    assert f.flags and f.flags[0].startswith("-Dorg.bytedeco.javacpp.maxbytes=")
    assert int(f.flags[0].split("=")[1]) > 64 * MIB
    # the timeline shows JavaCPP totalBytes at the 64 MiB limit when it failed
    t = maxbytes_run.timeline
    assert t.limits()["javacpp_max"] == 64 * MIB
    assert t.peaks()["javacpp_total"] > 0.85 * 64 * MIB
    assert any("OutOfMemoryError" in e["class"] for e in t.errors)


def test_heap_oom_is_heap_not_offheap(heap_run):
    assert heap_run.returncode != 0
    oom = [f for f in diagnose(heap_run.timeline) if f.kind.startswith("oom")]
    assert [f.kind for f in oom] == ["oom-heap"]
    assert oom[0].flags[0].startswith("-Xmx")
    assert heap_run.timeline.limits()["heap_max"] <= 96 * MIB


def test_partial_timeline_survives_a_kill(runs_root):
    """SIGKILL the job mid-run (`kill -9`, far from any memory limit): no process is left, the lines so far
    read back, and the diagnosis says a signal from outside ended it, not memory; one exit figure everywhere."""
    import psutil

    from pyd4j.profile import profile_job

    killed = {}

    def kill_after_some(sample: dict) -> None:
        if sample.get("iterations", 0) >= 20 and not killed:
            killed["pid"] = sample["pid"]  # the JVM this sample came from
            psutil.Process(sample["pid"]).kill()

    run = profile_job(fixture_command("healthy", 100000, "-Xmx128m"), runs_root / "killed", on_sample=kill_after_some, timeout_s=240)
    assert run.returncode == 137  # 128 + SIGKILL, as a shell says it
    meta = json.loads((run.run_dir / "run.json").read_text())
    assert meta["returncode"] == 137 and meta["signal"] == 9
    assert not psutil.pid_exists(killed["pid"]) or psutil.Process(killed["pid"]).status() == psutil.STATUS_ZOMBIE
    t = Timeline.load(run.run_dir)
    assert t.end is None and t.iterations() >= 20
    # RSS of a small job under -Xmx128m is far from the machine's RAM and from any container limit
    assert t.peaks()["rss"] < 0.5 * psutil.virtual_memory().total
    finding = diagnose(t)[0]
    assert finding.kind == "killed-signal", [f.title for f in diagnose(t)]
    assert "not memory" in finding.title and "SIGKILL" in finding.title and "137" in finding.title
    assert not finding.flags and "OOM killer" not in finding.title


def test_timeout_ends_the_whole_process_tree_and_records_the_real_status(runs_root):
    import psutil

    from pyd4j.profile import profile_job

    run = profile_job(fixture_command("healthy", 100000, "-Xmx128m"), runs_root / "timeout", timeout_s=45)  # JVM start fits, loaded too
    assert run.stopped_by == "timeout" and run.interrupted
    # the JVM ends on SIGTERM with 143 (itself, or the signal: both read 143): never the 0 a reaped child reads as
    assert run.returncode == 143
    meta = json.loads((runs_root / "timeout" / "run.json").read_text())
    assert meta["returncode"] == run.returncode and meta["stopped_by"] == "timeout"
    t = Timeline.load(runs_root / "timeout")
    assert t.end is not None and t.end["reason"] == "exit"  # SIGTERM let the agent write its end line
    pid = t.start["pid"]
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert len(t.samples) > 0
    # a healthy job stopped mid-run is still healthy: heap pages being touched are not a native leak
    assert not [f.kind for f in diagnose(t) if f.kind.startswith("leak")]


def test_trend_fit_matches_a_hand_made_line():
    x = np.arange(10, dtype=float)
    y = 5 * MIB + 2 * MIB * x
    trend = fit_trend(x, y, "iteration")
    assert trend.slope == pytest.approx(2 * MIB)
    assert trend.growth == pytest.approx(18 * MIB)
    # 10 points in rising order: one ordering in 10! (Kendall tau = 1, exact one-sided p)
    assert trend.p_value == pytest.approx(1 / 3628800, rel=1e-6)
    # one outlier moves neither the Theil-Sen slope much nor the verdict
    y[4] += 50 * MIB
    assert fit_trend(x, y, "iteration").slope == pytest.approx(2 * MIB, rel=0.05)


def test_flat_noise_is_no_leak_and_few_points_are_not_enough():
    from pyd4j.profile.leak_verdicts import judge

    rng = np.random.default_rng(1)
    x = np.arange(0, 400, 20, dtype=float)
    flat = 300 * MIB + rng.normal(0, 20 * MIB, x.size)  # noisy, no trend: garbage between collections
    assert judge(x, flat, "iteration", "kept", 16 * MIB).status == "no-leak"
    assert judge(x[:4], flat[:4] + x[:4] * MIB, "iteration", "kept", 16 * MIB).status == "not-enough-data"
    assert judge(x, flat + x * MIB, "iteration", "kept", 16 * MIB).status == "leak"
    # a steady rise too small to matter is not a leak
    assert judge(x, 300 * MIB + x * 1024, "iteration", "kept", 16 * MIB).status == "no-leak"


def test_reasons_in_seconds_say_s_not_ss():
    """Jobs without iterations are judged over seconds: "over 27 s", never "over 27 ss"."""
    from pyd4j.profile.leak_verdicts import judge

    x = np.array([0.0, 9.0, 27.0])
    verdict = judge(x, np.array([1.0, 2.0, 3.0]) * (1 << 20), "s", "live heap", 8 << 20)
    assert verdict.status == "not-enough-data"
    assert "over 27 s after" in verdict.reason and " ss" not in verdict.reason
    by_iteration = judge(x, np.array([1.0, 2.0, 3.0]), "iteration", "live heap", 8 << 20)
    assert "over 27 iterations after" in by_iteration.reason


def test_gc_pressure_leaves_out_the_collections_made_to_measure_the_live_set(tmp_path):
    """Made-up timeline (our own logic only): 20 s, 4 s of it in full collections the agent's inspections
    (or jcmd) caused and 0.5 s in the job's own young collections: 2.5% of the run is the job's, not 22%."""
    from pyd4j.profile.gc_pressure import gc_share
    from pyd4j.profile.timeline import Timeline

    t0 = 1_000_000
    own = [{"type": "gc", "t": t0 + 2000 * k, "duration_ms": 500, "kind": "full",
            "cause": "Diagnostic Command" if k % 2 else "Heap Inspection Initiated GC"} for k in range(1, 9)]
    young = [{"type": "gc", "t": t0 + 2000 * k + 500, "duration_ms": 50, "kind": "young", "cause": "G1 Evacuation Pause"}
             for k in range(10)]
    events = sorted(own + young, key=lambda g: g["t"])
    samples = []
    for i in range(201):
        now = t0 + 100 * i
        done = [g for g in events if g["t"] + g["duration_ms"] <= now]
        samples.append({"type": "sample", "t": now, "gc": {"all": [len(done), sum(g["duration_ms"] for g in done)]}})
    t = Timeline(tmp_path, {"t": t0}, samples, events, [], [], [], None)
    overall, worst = gc_share(t)
    assert overall == pytest.approx(0.5 / 20, abs=0.01)
    assert worst < 0.1


def _made_up_training(tmp_path, held, kept_at_point):
    """Made-up timeline (our own logic only): 1000 iterations in 100 s, a sample every 100 ms (one an iteration)
    holding `held(i, k)` off-heap bytes, a live point every 50 iterations saying `kept_at_point(i)`."""
    from pyd4j.profile.timeline import Timeline

    t0 = 1_000_000
    samples = [{"type": "sample", "t": t0 + 100 * k, "iterations": k, "nd4j_live": held(k, k)} for k in range(1001)]
    points = [{"type": "live", "t": t0 + 100 * i + 50, "trigger": "inspection", "iterations": i,
               "heap_live": 50 << 20, "heap_after_gc": 60 << 20, "nd4j_live": kept_at_point(i)}
              for i in range(0, 1001, 50)]
    return Timeline(tmp_path, {"t": t0}, samples, [], [], [], [], None, live_points=points)


def test_fake_points_that_caught_memory_released_later_are_no_leak(tmp_path):
    """Live points rising 1 -> 31 MiB while, between them, the job often holds 1 MiB in all (what a Spark
    executor showed: memory it releases later was counted as kept): no leak, and the reason says where the
    job held less than a point had counted. The same points over samples that never fall below them: a leak."""
    mib = 1 << 20
    rising = lambda i: mib + 30 * mib * i // 1000  # noqa: E731
    released = _made_up_training(tmp_path, lambda i, k: mib if k % 20 else rising(i) + 8 * mib, rising)
    verdict = leak_verdicts(released)[1]
    assert verdict.status == "no-leak", verdict.reason
    assert "releases later" in verdict.reason and "after a point had counted" in verdict.reason
    kept = _made_up_training(tmp_path, lambda i, k: rising(i) + (k % 7) * mib, rising)
    assert leak_verdicts(kept)[1].status == "leak", leak_verdicts(kept)[1].reason


def test_fake_cache_that_levels_off_before_a_late_speed_up_is_no_leak(tmp_path):
    """Made-up timeline (our own logic only), the defaults' plateau job as a loaded CI machine ran it:
    a cache fills to 42 MiB over 62 iterations, then stays; 271 iterations in the first 30 s, the other
    273 in the last 4 s (the machine freed up). Its live points (four on the plateau) rise by rank, so
    only the envelope's later half can say the rise stopped, and that half held 2 of its 2-s windows: it
    is halved until 3 fit. The same points over samples that keep rising to the end: a leak."""
    from pyd4j.profile.timeline import Timeline

    mib, t0 = 1 << 20, 1_000_000
    it = lambda k: 271 * k // 300 if k < 300 else 271 + 273 * (k - 300) // 40  # noqa: E731
    cache = lambda i: 42 * mib * min(i, 62) // 62  # noqa: E731
    marks = [0, 2, 15, 24, 42, 62, 85, 222, 370, 507]

    def made_up(held) -> Timeline:
        samples = [{"type": "sample", "t": t0 + 100 * k, "iterations": it(k), "nd4j_live": held(it(k)) + (k % 5) * mib}
                   for k in range(341)]
        at = {i: next(s["t"] for s in samples if s["iterations"] >= i) for i in marks}
        points = [{"type": "live", "t": at[i] + 50, "trigger": "inspection", "iterations": i, "heap_live": 8 * mib,
                   "heap_after_gc": 30 * mib, "nd4j_live": cache(i)} for i in marks]
        return Timeline(tmp_path, {"t": t0}, samples, [], [], [], [], None, live_points=points)

    verdict = leak_verdicts(made_up(cache))[1]
    assert verdict.status == "no-leak" and "levelled off" in verdict.reason, verdict
    rising = leak_verdicts(made_up(lambda i: cache(i) + 60 * 1024 * max(i - 62, 0)))[1]
    assert rising.status == "leak", rising.reason


def test_a_leak_into_a_cache_the_job_frees_when_training_ends_is_still_a_leak(tmp_path):
    """Made-up timeline (our own logic only), the corpus's leak-cache job as CI saw it: 784 KiB kept per
    iteration in a cache local to the training loop; the loop returns, the cache is freed, and the JVM
    lives on at its last iteration holding 10 MiB (a last live point says so). What the job holds after
    its last iteration has no x of its own: it neither levels the rise off nor refutes the points."""
    mib = 1 << 20
    held = lambda k: 10 * mib + 784 * 1024 * min(k, 600)  # noqa: E731
    training = _made_up_training(tmp_path, held=lambda i, k: held(k) if k <= 600 else 10 * mib,
                                 kept_at_point=held)
    # the made-up job stopped training at iteration 600 and lived on 40 s without iterating
    for s in training.samples:
        s["iterations"] = min(s["iterations"], 600)
    # its live points: every 50 iterations while it trained, and one after the loop returned
    training.live_points[:] = [p for p in training.live_points if p["iterations"] <= 600]
    training.live_points.append({**training.live_points[-1], "t": training.samples[-1]["t"], "nd4j_live": 10 * mib})
    verdict = leak_verdicts(training)[1]
    assert verdict.status == "leak", verdict.reason
    assert verdict.trend.slope == pytest.approx(784 * 1024, rel=0.02)


def test_a_leak_is_named_by_the_last_snapshot_that_holds_it_not_by_an_end_that_freed_it():
    """Made-up site snapshots (our own logic only), as the leak job's were once: the live points hold the
    leaked arrays at the job's line, and the end snapshot, taken while the JVM shut down, saw them already
    freed. The leak is named by the last snapshot that holds something; with none, there is no site."""
    line = "com.acme.Train.main(Train.java:58)"

    def snapshot(t: int, reason: str, live: int) -> dict:
        return {"type": "sites", "t": t, "reason": reason,
                "sites": [{"site": line, "user": True, "kind": "nd4j", "live_bytes": live}]}

    class MadeUp:
        site_snapshots = [snapshot(1, "live", 10 << 20), snapshot(2, "peak", 30 << 20),
                          snapshot(3, "live", 20 << 20), snapshot(4, "end", 0)]

    sites = leak_sites(MadeUp, "leak-offheap")
    assert [(s["site"], s["live_bytes"]) for s in sites] == [(line, 20 << 20)]
    MadeUp.site_snapshots = [snapshot(1, "live", 0), snapshot(2, "end", 0)]
    assert leak_sites(MadeUp, "leak-offheap") == []


@pytest.mark.parametrize("threshold", [None, "131072"])
def test_a_job_left_with_glibcs_moving_mmap_threshold_is_told(runs_root, threshold):
    """The agent reads the training JVM's own environment: without the variable pyd4j's flags set, profile says
    so and gives the setting; with it, nothing is said."""
    import os

    from pyd4j.jvm import classpath
    from pyd4j.profile import profile_job
    from tests.profile.conftest import FIXTURES_JAR

    cp = os.pathsep.join([str(FIXTURES_JAR), *classpath()[1:]])
    run = profile_job(["java", "-cp", cp, "org.pyd4j.fixtures.SpeedJob", "mlp", "4"], runs_root / f"malloc-{threshold}",
                      timeout_s=240, env_changes={"OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": threshold})
    assert run.ok
    found = [f for f in diagnose(run.timeline) if f.kind == "malloc-threshold-default"]
    if threshold is None:
        assert len(found) == 1 and found[0].severity == "info" and "MALLOC_MMAP_THRESHOLD_=131072" in found[0].fix
    else:
        assert not found
