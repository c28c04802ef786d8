"""Leak verdicts at the agent's default settings (no live=/live_share= options), on corpus jobs run
concurrently: a job that keeps every prediction is found, at its line, within its first minutes; a
job whose cache grows and then levels off is judged and not called a leak; a slow job (a second an
iteration) is judged from the points the agent takes for it, not from a regular one that may come after
it ends; a job that never trains (it only predicts, and keeps every prediction) is judged on seconds from
the points the agent takes for it."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from pyd4j.profile.diagnose import diagnose
from pyd4j.profile.leak_verdicts import leak_verdicts
from tests.profile.conftest import DEADLINE_S, PROJECT_ROOT, Stopper, corpus_command, leak_site_line, offheap_leak_found, \
    run_concurrently, verdicts_reached

pytestmark = [pytest.mark.jvm, pytest.mark.slow]

CACHE_ENTRIES = 48  # CorpusJob.CACHE_ENTRIES: the plateau job's cache is full after this many iterations
SLOW_PAUSE_MS = 1000  # the slow job's pause before each iteration: its first needed points fall within a few iterations


@pytest.fixture(scope="module")
def default_runs(runs_root):
    from pyd4j.profile import profile_job

    root = runs_root / "defaults"
    root.mkdir()
    jcmd: dict = {}

    def job(name, enough, min_s, before_stop=None, jvm=(), lane=None):
        lane = lane or name
        stop = root / f"{lane}.stop"
        stopper = Stopper(root / lane, stop, enough, min_s, before_stop)
        command = corpus_command(name, *jvm, min_iterations=20, stop=stop)
        return lambda: profile_job(command, root / lane, on_sample=stopper, timeout_s=DEADLINE_S)

    return run_concurrently({
        "leak-list": job("leak-list", lambda t: offheap_leak_found(t) or verdicts_reached(t), 0),
        "keep-predictions": fixture_job(root, "KeepPredictions", lambda t: offheap_leak_found(t) or verdicts_reached(t)),
        # long enough after the cache is full for the verdict to see it level off
        "plateau": job("plateau", lambda t: verdicts_reached(t) and t.iterations() >= 6 * CACHE_ENTRIES, 30,
                       lambda t: jcmd.update(histogram_now(t))),
        "slow": job("mlp", verdicts_reached, 0, jvm=(f"-Dcorpus.pauseMs={SLOW_PAUSE_MS}",), lane="slow"),
        "serve-and-keep": fixture_job(root, "ServeAndKeep", lambda t: offheap_leak_found(t) or verdicts_reached(t)),
        "churn": fixture_job(root, "Churn", lambda t: len(inspections(t)) >= 6, package="org.pyd4j.fixtures"),
    }) | {"jcmd": jcmd}


def inspections(t) -> list[dict]:
    """The agent's own live points, taken once the deallocators were done."""
    return [p for p in t.live_points if p.get("trigger") == "inspection" and p.get("offheap_drained")]


def fixture_job(root, name: str, enough, package: str = "org.deeplearning4j.examples.pyd4jfixture"):
    """A fixture job (`<package>.<name> <stopFile>`; by default one of the user-style ones), profiled at the
    agent's defaults until `enough` holds."""
    from pyd4j.profile import profile_job

    stop = root / f"{name}.stop"
    command = ["java", "-cp", corpus_command("mlp")[2], f"{package}.{name}", str(stop)]
    return lambda: profile_job(command, root / name, timeout_s=DEADLINE_S,
                               on_sample=Stopper(root / name, stop, enough))


def fixture_line(name: str, marker: str) -> int:
    """The line of the fixture's source marked `LEAK SITE <marker>`."""
    source = PROJECT_ROOT / f"tests/fixtures/java/src/main/java/org/deeplearning4j/examples/pyd4jfixture/{name}.java"
    return next(i for i, text in enumerate(source.read_text().splitlines(), start=1) if f"LEAK SITE {marker}" in text)


def histogram_now(t) -> dict:
    """`jcmd <pid> GC.class_histogram` of the running job (a full collection, then the histogram), and
    when it was asked for; then waits for the agent's live point of that very collection."""
    import subprocess
    import time

    from pyd4j.profile.histogram import read_histogram
    from pyd4j.profile.timeline import Timeline

    asked = time.time() * 1000
    out = subprocess.run(["jcmd", str(t.start["pid"]), "GC.class_histogram"], check=True, capture_output=True,
                         text=True, timeout=120).stdout
    deadline = time.monotonic() + 60
    while not [p for p in Timeline.load(t.run_dir).live_points if p["t"] >= asked and p["trigger"] == "full-gc"]:
        assert time.monotonic() < deadline, "the agent wrote no live point for jcmd's collection"
        time.sleep(0.5)
    return {"asked": asked, "total": read_histogram(out)[0]}


def finished(runs, name):
    run = runs[name]
    if isinstance(run, BaseException):
        raise AssertionError(f"{name} did not finish: {run!r}")
    assert run.returncode == 0, (run.run_dir / "stderr.log").read_text()[-3000:]
    return run


def test_a_leaking_job_is_found_at_defaults_at_its_line(default_runs):
    t = finished(default_runs, "leak-list").timeline
    leaks = [f for f in diagnose(t) if f.kind == "leak-offheap"]
    assert leaks, [(v.status, v.reason) for v in leak_verdicts(t)]
    assert leaks[0].numbers["site"].endswith(f"CorpusJob.java:{leak_site_line('leak-list')})")
    # the job was stopped as soon as the verdict held: it took minutes at most, not the whole run
    assert t.duration_s() < DEADLINE_S
    # every live point was the agent's own inspection at its default schedule
    assert {p["trigger"] for p in t.live_points} <= {"inspection", "full-gc"}
    # and none of the agent's own collections (its GC.run and its histogram's) was taken for the job's
    # (that filed a drained inspection as a foreign collection's point: the live-heap bug of #18)
    own = {"Diagnostic Command", "Heap Inspection Initiated GC"}
    natural = {g["heap_after"] for g in t.gc_events if g.get("kind") == "full" and g.get("cause") not in own}
    misfiled = [p for p in t.live_points if p["trigger"] == "full-gc" and p.get("heap_after_gc") not in natural]
    assert not misfiled, misfiled
    assert not [a for a in t.start["jvm_args"] if "pyd4j.agent=" in a and "live" in a]


def test_a_cache_that_grows_then_levels_off_is_no_leak(default_runs):
    t = finished(default_runs, "plateau").timeline
    statuses = [v.status for v in leak_verdicts(t)]
    assert statuses == ["no-leak", "no-leak"], [v.reason for v in leak_verdicts(t)]
    # the off-heap memory really grew (the cache: 48 x 0.8 MB) before levelling off
    held = [s["nd4j_live"] for s in t.samples if s.get("nd4j_live") is not None]
    assert max(held) - held[0] > 30 * (1 << 20)
    assert not [f.kind for f in diagnose(t) if f.kind.startswith(("leak", "not-enough"))]


def test_a_slow_job_is_judged_from_the_points_taken_for_it(default_runs):
    """At a second an iteration the agent's first needed points fall within a few iterations; the verdict
    wants its points to span LEAK_MIN_ITERATIONS after warm-up, so the agent keeps taking points every few
    iterations until they do (why = "needed-span"): the timeline up to the last of them is judged."""
    from pyd4j.profile.leak_verdicts import LEAK_MIN_ITERATIONS

    t = finished(default_runs, "slow").timeline
    spread = [p for p in t.live_points if p.get("why") == "needed-span"]
    assert spread, [(p.get("iterations"), p.get("why")) for p in t.live_points]
    gaps = np.diff([p["iterations"] for p in spread])
    assert (gaps >= 5).all(), gaps
    judged = t.until(spread[-1]["t"] + 1)
    assert [v.status for v in leak_verdicts(judged)] == ["no-leak", "no-leak"], [v.reason for v in leak_verdicts(judged)]
    training = [p["iterations"] for p in judged.live_points if (p.get("iterations") or 0) >= 1]
    assert training[-1] - training[1] >= LEAK_MIN_ITERATIONS
    assert t.iterations() >= LEAK_MIN_ITERATIONS


def test_user_code_is_told_by_its_classpath_entry_not_its_package(default_runs, tmp_path):
    """A job in org.deeplearning4j.examples.* (as deeplearning4j-examples' are), from a jar that is not a
    library's: its line is the user's, in the finding and in the report."""
    from pyd4j.profile.report import write_report

    run = finished(default_runs, "keep-predictions")
    line = fixture_line("KeepPredictions", "keep-predictions")
    leaks = [f for f in diagnose(run.timeline) if f.kind == "leak-offheap"]
    assert leaks, [(v.status, v.reason) for v in leak_verdicts(run.timeline)]
    site = f"KeepPredictions.java:{line})"
    assert leaks[0].numbers["site"].endswith(site)
    snapshot = max((s for s in run.timeline.site_snapshots if s["reason"] == "live"), key=lambda s: s["t"])
    top = max(snapshot["sites"], key=lambda s: s["live_bytes"])
    assert top["site"].endswith(site) and top["user"]
    page = write_report(run.run_dir, tmp_path / "report")["html"].read_text()
    assert site + " (library)" not in page and site in page


def test_the_reported_live_heap_is_what_jcmd_measures(default_runs):
    """`jcmd GC.class_histogram` on the running plateau job: the agent's live point of that same full
    collection is within 2% of jcmd's Total, and the live heap the summary reports is the largest point
    measured, that one included (no point is left out for being taken before ND4J's deallocators ran)."""
    t = finished(default_runs, "plateau").timeline
    jcmd = default_runs["jcmd"]
    assert jcmd, "the jcmd histogram was not taken"
    point = min((p for p in t.live_points if p["t"] >= jcmd["asked"] and p["trigger"] == "full-gc"), key=lambda p: p["t"])
    print(f"agent {point['heap_live']} B vs jcmd GC.class_histogram {jcmd['total']} B")
    assert point["heap_live"] == pytest.approx(jcmd["total"], rel=0.02)
    assert t.peaks()["heap_live"] == max(p["heap_live"] for p in t.live_points) >= point["heap_live"]


def test_a_job_that_never_trains_is_judged_on_seconds_from_points_taken_for_it(default_runs):
    """A JVM that never trains (an inference job here; a Spark driver) is judged on seconds: the agent
    takes the points that verdict needs (why = "needed-idle", one every IDLE_GAP_MS at most) instead of
    waiting for its regular pace, which a short job outlives; a job that keeps every prediction is found at
    its line from those points alone."""
    from pyd4j.profile.leak_verdicts import LEAK_MIN_SECONDS

    t = finished(default_runs, "serve-and-keep").timeline
    assert t.iterations() == 0
    idle = [p for p in t.live_points if p.get("why") == "needed-idle"]
    assert len(idle) >= 6, [(p["t"], p.get("why")) for p in t.live_points]
    gaps = np.diff([p["t"] for p in idle])
    assert (gaps >= 1990).all(), gaps   # IDLE_GAP_MS (2 s) after the previous point ended
    assert (idle[-1]["t"] - idle[1]["t"]) / 1000 >= LEAK_MIN_SECONDS
    judged = t.until(idle[-1]["t"] + 1)
    leaks = [f for f in diagnose(judged) if f.kind == "leak-offheap"]
    assert leaks, [(v.status, v.reason) for v in leak_verdicts(judged)]
    assert leaks[0].numbers["site"].endswith(f"ServeAndKeep.java:{fixture_line('ServeAndKeep', 'serve-and-keep')})")


def test_a_live_point_counts_what_the_collection_left_not_what_was_made_while_it_waited(default_runs):
    """A job that keeps 8 MiB of arrays and makes 64 KiB garbage arrays all the time (Churn, tens of MiB a
    second): each of the agent's live points counts the 8 MiB it keeps, with at most a few garbage arrays
    alive at the collection, and leaves out what the job made while the agent waited for ND4J's
    deallocators (nd4j_new). Before, a Spark executor's points counted 7-25 MiB of such arrays."""
    mib = 1 << 20
    t = finished(default_runs, "churn").timeline
    kept = 8 * mib
    # points taken before the job made its kept arrays (one, or more on a loaded machine; the first before ND4J
    # loaded has no nd4j_live) count none of them
    points = list(itertools.dropwhile(lambda p: p.get("nd4j_live", 0) < kept, inspections(t)))
    assert len(points) >= 5, [(p.get("trigger"), p.get("nd4j_live")) for p in t.live_points]
    for p in points:
        assert kept <= p["nd4j_live"] <= kept + 2 * mib, p
    assert sum(p.get("nd4j_new", 0) for p in points) > 0, points
