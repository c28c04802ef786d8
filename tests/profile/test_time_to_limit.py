"""Leaks that run into their limit: the time-to-limit the profiler predicts as soon as it reports the
leak must match the iteration at which the job really died."""

from __future__ import annotations

import pytest

from pyd4j.profile import profile_job
from pyd4j.profile.diagnose import diagnose
from pyd4j.profile.leak_verdicts import leak_verdicts
from tests.profile.conftest import fixture_command, run_concurrently

pytestmark = [pytest.mark.jvm, pytest.mark.slow]

AGENT = "-Dpyd4j.agent=live=1,live_share=0.2"


@pytest.fixture(scope="module")
def limit_runs(runs_root):
    """MemoryJob keeping a 4 MiB JavaCPP FloatPointer per iteration under maxbytes=800m, and a 2 MiB
    float[] per iteration under -Xmx512m, both until they die. A leak verdict needs a rise that lasts
    20 s: each job lives for about a minute (200-250 iterations 300 ms apart), so the verdict can come
    well before the end whatever the machine's load delays."""
    root = runs_root / "to-limit"
    return run_concurrently({
        "maxbytes": lambda: profile_job(fixture_command("maxbytes", 100000, "-Xmx256m", "-Dorg.bytedeco.javacpp.maxbytes=800m",
                                                        AGENT, sleep_ms=300), root / "maxbytes", timeout_s=600),
        "heap": lambda: profile_job(fixture_command("heap", 100000, "-Xmx512m", AGENT, sleep_ms=300),
                                    root / "heap", timeout_s=600),
    })


@pytest.mark.parametrize("name, kind, oom", [("maxbytes", "leak-offheap", "oom-javacpp-maxbytes"),
                                             ("heap", "leak-heap", "oom-heap")])
def test_predicted_limit_iteration_matches_the_death(limit_runs, name, kind, oom):
    run = limit_runs[name]
    assert not isinstance(run, BaseException), run
    t = run.timeline
    assert oom in [f.kind for f in diagnose(t)]
    died_at = t.iterations()
    # the first moment the profiler could report the leak: replay the run up to each live point
    for point in sorted(t.live_points, key=lambda p: p["t"]):
        known = t.until(point["t"])
        if any(v.status == "leak" for v in leak_verdicts(known)):
            break
    else:
        pytest.fail(f"the leak was never established: {[(v.status, v.reason) for v in leak_verdicts(t)]}")
    finding = next(f for f in diagnose(known) if f.kind == kind)
    predicted = finding.numbers["limit_at_iteration"]
    print(f"{name}: leak reported at iteration {point['iterations']}, predicted the limit at iteration "
          f"{predicted:.0f}, the job died after iteration {died_at}")
    assert point["iterations"] <= 0.8 * died_at  # a real prediction, well before the end
    assert predicted == pytest.approx(died_at, rel=0.25)
