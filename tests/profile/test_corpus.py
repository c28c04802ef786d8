"""The test corpus: DL4J jobs written as users write them (tests/fixtures/java/CorpusJob.java), all
run at once under the agent. Healthy shapes must get no leak finding however their memory moves;
leaking jobs must get one that names the line allocating what they keep; the live heap must agree
with a full-GC class histogram taken by jcmd."""

from __future__ import annotations

import pytest

from pyd4j.profile.diagnose import diagnose
from pyd4j.profile.leak_verdicts import leak_verdicts
from tests.profile.conftest import HEALTHY, LEAKING, leak_site_line

pytestmark = [pytest.mark.jvm, pytest.mark.slow]

MIB = 1 << 20
LEAK_BYTES_PER_ITERATION = 256 * 784 * 4  # CorpusJob.LEAK_BATCH x FEATURES floats


def finished(corpus, name):
    run = corpus[name]
    if isinstance(run, BaseException):
        raise AssertionError(f"corpus job {name} did not finish: {run!r}")
    assert run.returncode == 0, (run.run_dir / "stderr.log").read_text()[-3000:]
    return run


@pytest.mark.parametrize("name", [*HEALTHY, "compat"])
def test_healthy_job_gets_a_verdict_and_no_leak(corpus, name):
    run = finished(corpus, name)
    t = run.timeline
    assert t.duration_s() >= 60
    verdicts = {v.label.split(" (")[0]: v for v in leak_verdicts(t)}
    # enough evidence was gathered to judge (so "no leak" below is a verdict, not a lack of data)
    assert [v.status for v in verdicts.values()] == ["no-leak", "no-leak"], [v.reason for v in verdicts.values()]
    found = [f.kind for f in diagnose(t)]
    assert not [k for k in found if k.startswith(("leak", "oom", "killed", "crash", "no-"))], found


def test_the_older_release_job_really_ran_that_release(corpus):
    run = finished(corpus, "compat")
    assert "version=1.0.0-beta7" in (run.run_dir / "stdout.log").read_text()
    # the agent's allocation hooks work on that release too: libnd4j and JavaCPP allocations were counted
    allocators = run.timeline.allocators()
    assert allocators["nd4j"]["allocated"] > 0 and allocators["javacpp"]["allocated"] > 0


@pytest.mark.parametrize("name", LEAKING)
def test_leaking_job_is_found_at_its_allocating_line(corpus, name):
    run = finished(corpus, name)
    leaks = [f for f in diagnose(run.timeline) if f.kind == "leak-offheap"]
    assert leaks, [(v.status, v.reason) for v in leak_verdicts(run.timeline)]
    leak = leaks[0]
    assert leak.numbers["confidence"] >= 0.99
    # the call site is the user's line that allocates the kept arrays, read from the job's source
    assert leak.numbers["site"].endswith(f"CorpusJob.java:{leak_site_line(name)})"), leak.numbers["site"]
    assert f"CorpusJob.java:{leak_site_line(name)}" in leak.title
    # each iteration keeps one 256 x 784 float array
    assert 0.7 * LEAK_BYTES_PER_ITERATION < leak.numbers["slope_bytes_per_unit"] < 1.4 * LEAK_BYTES_PER_ITERATION
    assert not [f for f in diagnose(run.timeline) if f.kind == "leak-heap"]


def test_sites_break_the_kept_memory_down_close_to_the_exact_counters(corpus):
    """The sampled per-site live bytes (an estimate) add up to what the exact counters say is held."""
    t = finished(corpus, "leak-list").timeline
    # the sites line the agent writes right after each live point, and that point
    last = max((s for s in t.site_snapshots if s["reason"] == "live"), key=lambda s: s["t"])
    point = max((p for p in t.live_points if p["t"] <= last["t"]), key=lambda p: p["t"])
    held = point["nd4j_live"] + point.get("javacpp_total", 0)
    estimated = sum(s["live_bytes"] for s in last["sites"])
    assert held > 32 * MIB
    assert estimated == pytest.approx(held, rel=0.25)
    peaks = [s for s in t.site_snapshots if s["reason"] == "peak"]
    assert peaks and peaks[-1]["sites"][0]["site"].endswith(f"CorpusJob.java:{leak_site_line('leak-list')})")


def test_the_report_breaks_the_off_heap_peak_down_by_call_site(corpus, tmp_path):
    """What a user reads: the peak's top call site is the job's allocating line, in the JSON summary and
    the HTML report, and the sampled bytes it holds are close to the exact off-heap in use then."""
    from pyd4j.profile.report import summary, write_report

    run = finished(corpus, "leak-list")
    peak = summary(run.timeline)["peak_sites"]
    line = f"CorpusJob.java:{leak_site_line('leak-list')}"
    assert peak["sites"][0]["site"].endswith(line + ")") and peak["sites"][0]["user"]
    assert peak["in_use"] and peak["sampled_bytes"] == pytest.approx(peak["in_use"], rel=0.35)
    assert sum(x["share"] for x in peak["sites"]) <= 1.0 + 1e-9
    page = write_report(run.run_dir, tmp_path / "report")["html"].read_text()
    assert "Where the off-heap peak was allocated" in page and line in page


def test_live_heap_is_within_20_percent_of_a_class_histogram(corpus):
    """Against jcmd's full-GC class histogram, on the objects the job holds. Each histogram also counts
    ND4J's and JavaCPP's bookkeeping of arrays that died since the last collection (reachable until
    their deallocator threads run): two jcmd histograms a few seconds apart differ by up to 2x on this
    job for that alone, and a loaded machine's slower deallocators leave more of it (a CI run: 13.4 MB in
    our histogram, 6.5 MB in jcmd's). So both sides are compared without the deallocation bookkeeping
    classes (parsed here from jcmd's own output); the raw figures are printed, not compared."""
    run = finished(corpus, "lstm")
    taken_at, histograms = corpus["lstm-histogram"]
    ours = [p for p in run.timeline.live_points if p["t"] < taken_at and p.get("heap_drained")]
    assert ours, "no live-set point before the reference histogram"
    point = max(ours, key=lambda p: p["t"])
    job_objects = point["heap_live"] - point["heap_bookkeeping"]
    references = [total - bookkeeping for total, bookkeeping in histograms]
    reference = min(references)
    before = run.timeline.until(taken_at)  # the run as reported before jcmd touched it
    error = abs(job_objects - reference) / reference
    print(f"LSTM job objects {job_objects} B (live heap {point['heap_live']} B, reported peak "
          f"{before.peaks()['heap_live']} B) vs jcmd GC.class_histogram {references} B without bookkeeping "
          f"(totals {[h[0] for h in histograms]} B): {error:.1%}; heap after young GCs peaked at "
          f"{before.heap_after_gc_peak()} B")
    assert error <= 0.20
    # the bookkeeping taken out is a part of the live heap, as in jcmd's histograms
    assert 0 <= point["heap_bookkeeping"] < point["heap_live"]
    assert all(0 <= bookkeeping < total for total, bookkeeping in histograms)
