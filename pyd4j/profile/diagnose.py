"""What went wrong in a profiled run, with the evidence and the fix: every check, most serious first.

One module per kind of check: out of memory and other bad ends (`pyd4j.profile.oom`), leaks
(`pyd4j.profile.leaks`, judged by `pyd4j.profile.leak_verdicts`), GC pressure
(`pyd4j.profile.gc_pressure`), workspace spills (`pyd4j.profile.workspace_spills`) and a plan the
agent could not apply (`pyd4j.profile.plan_refusal`). The checks here are the run's own: no
measurement at all, no training iteration, glibc's mmap threshold left to move, the data iterator
failing on ND4J's prefetch thread, and peaks near their limits.
"""

from __future__ import annotations

from pyd4j.malloc import MALLOC_ENV
from pyd4j.output import human_bytes
from pyd4j.profile.finding import Finding
from pyd4j.profile.gc_pressure import gc_pressure
from pyd4j.profile.leaks import leak_findings
from pyd4j.profile.oom import oom_findings
from pyd4j.profile.plan_refusal import plan_not_applied
from pyd4j.profile.startup import agent_refusal_in, stderr_tail
from pyd4j.profile.timeline import Timeline
from pyd4j.profile.workspace_spills import workspace_spills

# A peak this close to its limit is a warning (and `tune` does not call such a run verified). Tune sizes
# limits at the measured need plus DEFAULT_HEADROOM (15%), so the line sits inside that headroom:
# at 10% a tuned job at its own measured need plus a little uncollected garbage was flagged.
NEAR_LIMIT_FRACTION = 0.95


def diagnose(timeline: Timeline) -> list[Finding]:
    """All findings for a run, most serious first."""
    if not timeline.samples:
        return [_no_data(timeline), *plan_not_applied(timeline), *_prefetch_died(timeline)]
    # the iterator's own error first: the job's exit code follows from it
    findings = [*_prefetch_died(timeline), *oom_findings(timeline), *leak_findings(timeline), *gc_pressure(timeline),
                *workspace_spills(timeline), *_near_limits(timeline), *_no_iterations(timeline),
                *plan_not_applied(timeline), *_malloc_threshold(timeline)]
    order = {"error": 0, "warning": 1, "info": 2}
    return sorted(findings, key=lambda f: order.get(f.severity, 3))


def _no_data(t: Timeline) -> Finding:
    """No sample at all: nothing was measured, which is never a clean bill of health."""
    refused = agent_refusal_in(t.run_dir)
    if refused is not None:  # the agent's own reason, not a guess
        return Finding("no-data", "error", f"No measurements: the profiling agent refused its options ({refused})",
                       [f"[pyd4j agent] profiling agent not started ({refused})", *stderr_tail(t.run_dir)],
                       "fix the option value it names (in -Dpyd4j.agent=... or the -javaagent arguments; "
                       "e.g. interval=100, live=5) and run again")
    why = ["the agent wrote no sample: " + ("it started but the job ended before its first tick"
                                           if t.start else "it never started (no start line in the timeline)")]
    why += stderr_tail(t.run_dir)
    return Finding("no-data", "error", "No measurements: the run recorded 0 samples", why,
                   "run the job again and let it run longer; check stderr.log in the run directory for why it ended "
                   "(a wrong main class, a missing jar) or why the agent did not start ('[pyd4j agent]' lines)")


def _no_iterations(t: Timeline) -> list[Finding]:
    """A run with samples but no DL4J iteration: what was measured is start-up, not training."""
    if t.iterations() or not t.start.get("hooks", True):
        return []
    ended_normally = t.exit_code == 0 and not t.meta.get("interrupted")
    return [Finding("no-iterations", "warning" if ended_normally else "error", "No training iteration was seen",
                    [f"{len(t.samples)} samples over {t.duration_s():.1f} s and no MultiLayerNetwork/ComputationGraph "
                     f"fit() iteration completed"],
                    "profile the job while it trains (it may have ended or been stopped during start-up); jobs "
                    "that do not train through fit() are measured by time instead")]


def _malloc_threshold(t: Timeline) -> list[Finding]:
    """A training JVM whose environment leaves glibc's mmap threshold to move: the arrays DL4J frees
    may stay resident, which pyd4j's memory model (and the flags sized from it) assume they do not."""
    nd4j = t.nd4j_settings()
    if nd4j is None or "malloc_mmap_threshold" not in nd4j or nd4j["malloc_mmap_threshold"]:
        return []   # not a training JVM, an agent that does not say, or the threshold set
    setting = " ".join(f"{k}={v}" for k, v in MALLOC_ENV.items())
    return [Finding("malloc-threshold-default", "info", "glibc's mmap threshold is left to move in this job",
                    [f"the training JVM's environment has no {next(iter(MALLOC_ENV))}: glibc raises its mmap threshold "
                     "as large blocks are freed (up to 32 MiB), and freed arrays of DL4J's below it stay resident"],
                    f"start the job with {setting} in its environment (pyd4j flags writes it into every format): "
                    "measured on DL4J's fit(), the native peak fell to 0.70-0.98 of glibc's default at 0.97-1.03 of "
                    "the speed; pyd4j's estimates and flags assume it")]


def _prefetch_died(t: Timeline) -> list[Finding]:
    """ND4J's prefetch thread died on the job's iterator (the agent's PrefetchGuard): the job's next()
    threw on another thread, where fit() would have waited for it forever."""
    died = [n["prefetch_died"] for n in t.notes if isinstance(n.get("prefetch_died"), dict)]
    if not died:
        return []
    d = died[0]
    interrupted = any(isinstance(n.get("prefetch_interrupted"), dict) for n in t.notes)
    then = ("the training thread was waiting for that batch, which ND4J never ends: the agent interrupted it, and "
            "fit() failed instead of hanging" if interrupted else
            "the agent did not find the training thread waiting for it: fit() sees the error at its next batch (without "
            "the agent's hooks, hooks=false, the agent cannot tell the training thread, and the job may hang until stopped)")
    return [Finding("prefetch-died", "error", f"The data iterator failed on ND4J's prefetch thread: {d.get('cause')}",
                    [f"thread {d.get('thread')}: {d.get('exception')}", f"at {d.get('frames')}", then],
                    "fix the iterator's next() at the frames above; the error shows on the training thread, with no "
                    "hang, when the iterator's asyncSupported() returns false (fit() then calls next() itself)")]


def _near_limits(t: Timeline) -> list[Finding]:
    """Peaks within NEAR_LIMIT_FRACTION of their limits in a run that ended well: the next larger batch fails."""
    if t.exit_code not in (0, None):
        return []
    peaks, limits = t.peaks(), t.limits()
    out = []
    # Garbage-collected memory fills up to its limit between collections by design: what must fit is what is
    # live. The heap: the live heap. JavaCPP's totalBytes counts Pointers not yet collected too, and JavaCPP
    # collects them (System.gc) before it refuses: what must fit is the largest Pointer and what stayed after
    # full collections (the sampled peak only when neither was measured).
    live = [p["javacpp_total"] for p in t.live_points if p.get("javacpp_total") is not None]
    javacpp_needed = max([*live, peaks["javacpp_largest"] or 0]) or peaks["javacpp_total"]
    for label, peak, limit, flag in (
        ("live heap", peaks["heap_live"], limits["heap_max"], "-Xmx"),
        ("JavaCPP physicalBytes", peaks["javacpp_physical"], limits["javacpp_max_physical"], "-Dorg.bytedeco.javacpp.maxphysicalbytes"),
        ("JavaCPP totalBytes held", javacpp_needed, limits["javacpp_max"], "-Dorg.bytedeco.javacpp.maxbytes"),
    ):
        if peak and limit and peak > NEAR_LIMIT_FRACTION * limit:
            margin = round(100 * (1 - NEAR_LIMIT_FRACTION))
            out.append(Finding("near-limit", "warning", f"{label} came within {margin}% of its limit",
                               [f"{label} peaked at {human_bytes(peak)} of {human_bytes(limit)}"],
                               f"raise {flag} before a larger batch or dataset tips it over", [],
                               {"peak": peak, "limit": limit}))
    return out
