"""Where the training time went (pyd4j.profile.timesplit and the agent's TimeSplit)."""

from __future__ import annotations

import json
import os

import pytest

from pyd4j.jvm.classpath import classpath
from pyd4j.profile.launch import profile_job
from pyd4j.profile.timeline import Timeline
from pyd4j.profile.timesplit import PARTS, describe, time_split
from tests.profile.conftest import FIXTURES_JAR


def _lines(run_dir, lines):
    (run_dir / "jvm-1.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return Timeline.load(run_dir)


def test_split_from_hand_made_lines(tmp_path):
    # 10 iterations, 1000 ms accounted for: 100 data, 0 outside, 300 forward, 500 backward, 100 updater;
    # in that window two collections of 30 ms, one of them asked for with System.gc()
    t = _lines(tmp_path, [
        {"type": "start", "t": 0, "pid": 1},
        {"type": "note", "t": 1, "text": "x", "nd4j": {"max_threads": 2, "cores": 4}},
        {"type": "sample", "t": 500, "threads": 17},
        {"type": "gc", "t": 1500, "duration_ms": 30, "cause": "System.gc()"},
        {"type": "gc", "t": 1600, "duration_ms": 30, "cause": "G1 Evacuation Pause"},
        {"type": "gc", "t": 100, "duration_ms": 999, "cause": "before training"},
        {"type": "split", "t": 2000, "iterations": 10, "data_ms": 100, "outside_ms": 0, "forward_ms": 300,
         "backward_ms": 500, "updater_ms": 100, "data_p50_ms": 2.0, "data_p90_ms": 30.5, "data_p99_ms": 41.0},
    ])
    s = time_split(t)
    assert s["data_ms_quantiles"] == {"p50": 2.0, "p90": 30.5, "p99": 41.0}
    assert s["share"] == {"data": 0.1, "outside": 0.0, "forward": 0.3, "backward": 0.5, "updater": 0.1}
    assert s["ms_per_iteration"]["backward"] == 50.0
    assert s["gc"] == {"window_ms": 1000.0, "pause_ms": 60.0, "share": 0.06, "system_gc_ms": 30.0,
                       "system_gc_share": 0.03, "collections": 2}
    assert s["threads"] == {"nd4j": 2, "cores": 4, "jvm_max": 17}
    assert "backward 50%" in describe(s)
    assert "data wait per iteration p50 2.0 ms, p90 30.5 ms, p99 41.0 ms" in describe(s)


def test_split_of_an_agent_without_quantiles(tmp_path):
    t = _lines(tmp_path, [{"type": "start", "t": 0, "pid": 1},
                          {"type": "split", "t": 2000, "iterations": 10, "data_ms": 100, "outside_ms": 0, "forward_ms": 300,
                           "backward_ms": 500, "updater_ms": 100}])
    assert time_split(t)["data_ms_quantiles"] == {}


def test_no_split_without_training(tmp_path):
    assert time_split(_lines(tmp_path, [{"type": "start", "t": 0, "pid": 1}, {"type": "sample", "t": 5}])) is None


@pytest.mark.jvm
@pytest.mark.slow
@pytest.mark.parametrize("job,args,reads_iterator", [
    ("org.pyd4j.fixtures.CorpusJob", ["cnn", "6", "24", "1"], True),    # fit(ListDataSetIterator)
    ("org.pyd4j.fixtures.SpeedJob", ["mlp", "6"], False),              # the job's own fit(DataSet) loop
])
def test_agent_splits_real_dl4j_iterations(tmp_path, job, args, reads_iterator):
    if not FIXTURES_JAR.exists():
        pytest.fail(f"{FIXTURES_JAR} not built; run `make setup`")
    cp = os.pathsep.join([str(FIXTURES_JAR), *classpath()[1:]])
    run = profile_job(["java", "-cp", cp, job, *args], tmp_path / "run", env_changes={"OMP_NUM_THREADS": "1"})
    assert run.ok
    t = run.timeline
    s = time_split(t)
    assert s is not None and s["iterations"] >= 2
    assert abs(sum(s["share"].values()) - 1.0) < 0.01
    for part in ("forward", "backward", "updater"):
        assert s["ms"][part] > 0
    # data wait is time inside the iterator's next() that DL4J's fit(iterator) calls; a job that
    # hands fit() DataSets itself has none
    assert (s["ms"]["data"] > 0) == reads_iterator
    # independent check: between two split lines the parts add up to the wall time between them
    # (the training thread's time, one iteration after another, nothing left out or counted twice)
    a, b = t.split_events[0], t.split_events[-1]
    if b["iterations"] > a["iterations"]:
        parts = sum(b[f"{p}_ms"] - a[f"{p}_ms"] for p in PARTS)
        assert 0.8 * (b["t"] - a["t"]) <= parts <= 1.02 * (b["t"] - a["t"]) + 5
