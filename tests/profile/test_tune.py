"""`pyd4j tune` on real jobs, end to end through the command: flags that hold every allocator the job
uses, and exit statuses that say how it ended (0 verified, 3 not verified, 4 re-run failed)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pyd4j.malloc import MALLOC_ENV
from pyd4j.memory.flags import MIN_MAXBYTES
from pyd4j.profile.oom import limit_refusals
from pyd4j.profile.tune import flags_for, gc_pressure_not_from_flags, measured_need, not_verified_because, raised_by, throughput
from tests.profile.conftest import compat_command, corpus_command, fixture_command, run_concurrently

MIB = 1 << 20
BIG_TABLE = 12_000 * 1_000 * 8  # CorpusJob java-arrays: a double[12000][1000] turned into one JavaCPP Pointer

_CLI = "import sys; from pyd4j.cli import main; main(sys.argv[1:], prog_name='pyd4j')"


def tune_cli(out, *args: str) -> tuple[int, dict, str]:
    p = subprocess.run([sys.executable, "-c", _CLI, "tune", "--json", "--out", str(out), *args],
                       capture_output=True, text=True, timeout=1500)
    return p.returncode, json.loads(p.stdout), p.stderr


@pytest.fixture(scope="module")
def tunes(tmp_path_factory):
    """Four tunes at once: a job building arrays from Java arrays, the older-release job (3 runs a
    side), a job that keeps leaking, a job whose heap need keeps growing until it dies."""
    root = tmp_path_factory.mktemp("tunes")
    live = "-Dpyd4j.agent=live=1,live_share=0.2"
    cases = {
        # long enough for the leak verdicts (about 6 live points at defaults): a tune verifies nothing less
        "java-arrays": ["--", *corpus_command("java-arrays", seconds=60)],
        "compat": ["--repeat", "3", "--", *compat_command(seconds=45)],
        # at the agent's default settings: the leak must be found without asking for more live points
        "leak": ["--", *corpus_command("leak-list", seconds=45)],
        # whole runs: a windowed re-run would end once the heap leak is established, before its OOM
        "heap-oom": ["--window", "full", "--", *fixture_command("heap", 400, "-Xmx96m")],
    }
    return run_concurrently({name: (lambda n=name, a=args: tune_cli(root / n, *a)) for name, args in cases.items()})


def result(tunes, name):
    r = tunes[name]
    if isinstance(r, BaseException):
        raise AssertionError(f"tune {name} failed to run: {r!r}")
    return r


@pytest.mark.jvm
@pytest.mark.slow
def test_java_arrays_job_is_verified_with_maxbytes_from_its_javacpp_pointers(tunes):
    rc, doc, err = result(tunes, "java-arrays")
    assert rc == 0 and doc["outcome"] == "verified", (doc.get("after", {}).get("findings"), err[-2000:])
    used = doc["before"]["allocators"]
    # the agent saw both allocators: libnd4j buffers and the JavaCPP Pointers Nd4j.create(double[][]) makes
    assert used["javacpp"]["largest"] >= BIG_TABLE and used["javacpp"]["peak"] >= BIG_TABLE
    assert used["nd4j"]["allocated"] > 0
    need = doc["measured_need"]
    assert need["javacpp"] >= BIG_TABLE
    maxbytes = int(next(a for a in doc["recommended"] if "javacpp.maxbytes=" in a).split("=")[1])
    maxphysical = int(next(a for a in doc["recommended"] if "maxphysicalbytes=" in a).split("=")[1])
    # maxbytes from what JavaCPP counts (+15%), not from libnd4j memory it never counts
    assert maxbytes == max(-(-int(need["javacpp"] * 1.15) // MIB) * MIB, MIN_MAXBYTES)
    assert maxphysical > maxbytes + need["offheap"] + need["heap"]
    after = doc["after"]
    assert after["exit_code"] == 0 and after["limits"]["javacpp_max"] == maxbytes


@pytest.mark.jvm
@pytest.mark.slow
def test_older_release_job_is_verified_and_repeat_measures_the_spread(tunes):
    rc, doc, err = result(tunes, "compat")
    assert rc == 0 and doc["outcome"] == "verified", (doc.get("after", {}).get("findings"), doc["after"].get("gc_share"),
                                                      doc["before"].get("gc_share"), err[-2000:])
    for side in ("before", "after"):
        assert not [k for k in doc[side]["findings"] if k.startswith(("leak", "oom"))]
    # started without glibc's mmap threshold fixed: the flags come with it, and the re-runs had it
    assert "malloc-threshold-default" in doc["before"]["findings"]
    assert doc["recommended_environment"] == MALLOC_ENV
    assert all(a["environment"] == MALLOC_ENV for a in doc["attempts"])
    assert "malloc-threshold-default" not in doc["after"]["findings"]
    speed = doc["throughput"]
    for side in ("before", "after"):
        s = speed[side]
        assert s["runs"] == 3 and len(s["values"]) == 3
        assert s["min"] <= s["median"] <= s["max"]
    assert speed["speedup"] == pytest.approx(speed["after"]["median"] / speed["before"]["median"])


@pytest.mark.jvm
@pytest.mark.slow
def test_leaking_job_is_not_verified(tunes):
    rc, doc, _ = result(tunes, "leak")
    assert rc == 3 and doc["outcome"] == "not-verified" and not doc["verified"]
    assert doc["after"]["exit_code"] == 0
    # found at defaults, in both runs, and said as the reason
    assert "leak-offheap" in doc["before"]["findings"] and "leak-offheap" in doc["after"]["findings"]
    assert any("Memory leak" in why for why in doc["not_verified_because"])


@pytest.mark.jvm
@pytest.mark.slow
def test_rerun_that_fails_again_exits_4_after_stated_rerecommendations(tunes):
    from pyd4j.profile.tune import MAX_RERUNS

    rc, doc, _ = result(tunes, "heap-oom")
    assert rc == 4 and doc["outcome"] == "rerun-failed"
    attempts = doc["attempts"]
    assert 2 <= len(attempts) <= MAX_RERUNS == doc["max_reruns"]
    assert all("oom-heap" in a["findings"] for a in attempts)
    # each failure is said to be at the limit the tune itself set
    assert [f["flag"].startswith("-Xmx") for f in doc["own_limit_failures"]] == [True] * len(attempts)
    # each new recommendation grew the heap from what the failed re-run showed
    for first, second in zip(attempts, attempts[1:]):
        assert second["limits"]["heap_max"] >= 2 * first["limits"]["heap_max"]
    # the first run died of heap: the JavaCPP limits it never reached kept the job's own values
    before = doc["before"]["limits"]
    assert attempts[0]["limits"]["javacpp_max"] >= before["javacpp_max"]


@pytest.mark.jvm
@pytest.mark.slow
def test_javacpp_refusal_is_read_and_the_next_maxbytes_holds_it(maxbytes_run):
    """The real refusal text of a run at maxbytes=64m names what JavaCPP had to hold; the flags
    recommended from it leave room for that much."""
    t = maxbytes_run.timeline
    refusals = limit_refusals(t)
    assert refusals and refusals[0].limit == "maxbytes"
    assert refusals[0].limit_bytes == 64 * MIB
    assert refusals[0].needed > 64 * MIB  # in use + the 4 MiB Pointer asked for
    need = measured_need(t)
    assert need.javacpp >= refusals[0].needed
    maxbytes = flags_for(need, "job", None, 0.15).maxbytes
    assert maxbytes >= refusals[0].needed
    # and the same numbers from a re-run's refusal raise a need that did not know them
    low = raised_by(type(need)(javacpp=0, offheap=0, heap=0, native=0, why={"javacpp": "", "offheap": ""}), refusals, None)
    assert low.javacpp == refusals[0].needed


def test_gc_pressure_counts_against_the_flags_only_where_they_made_it_worse():
    def side(share, kinds=("gc-pressure",)):
        return {"findings": list(kinds), "finding_titles": [f"GC pressure: {share:.0%}" for _ in kinds], "gc_share": share}
    # the same share with the job's own 6 GB heap and with the recommended one: the job's allocation rate
    assert gc_pressure_not_from_flags(side(0.11), side(0.09, ())) is not None
    assert not_verified_because(side(0.11), side(0.09, ())) == []
    # 0.09 x 1.25 + 0.02 = 0.1325: a re-run above it blames the flags
    assert gc_pressure_not_from_flags(side(0.14), side(0.09, ())) is None
    assert not_verified_because(side(0.14), side(0.09, ())) == ["re-run: GC pressure: 14%"]
    # no first run to compare with, or no share recorded (a Spark side): the finding counts
    assert not_verified_because(side(0.11), None) == ["re-run: GC pressure: 11%"]
    assert not_verified_because({"findings": ["gc-pressure"], "finding_titles": ["GC"]}, side(0.5, ())) == ["re-run: GC"]


def test_throughput_spread_and_its_warning():
    same = throughput([10.0, 11.0, 9.0], [10.5, 9.5, 11.5])
    assert same["before"]["median"] == 10.0 and same["after"]["median"] == 10.5
    assert same["speedup"] == pytest.approx(1.05)
    assert "within the noise" in same["warning"]  # spread 2.0 > difference 0.5
    clear = throughput([10.0, 10.2, 9.9], [15.0, 15.1, 14.8])
    assert clear["warning"] is None and clear["speedup"] == pytest.approx(15.0 / 10.0)
    single = throughput([10.0], [12.0])
    assert "one run per side" in single["warning"]
    assert throughput([None], [12.0])["speedup"] is None
