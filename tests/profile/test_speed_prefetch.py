"""The agent's prefetch option on a real DL4J job (tests/fixtures/java SpeedJob slow-data=MS: fit() on the
job's own iterator whose next() takes MS ms and whose asyncSupported() is false, so DL4J's fit() does
not prefetch it). Independent evidence: the job itself reports the threads that called its next() and
the iterations and score it trained to. No timed assertion."""

from __future__ import annotations

import os
import re

import pytest

from pyd4j.jvm.classpath import PROJECT_ROOT, classpath
from pyd4j.profile.launch import profile_job
from pyd4j.profile.speed import Measured, candidates, probe_of
from tests.profile.conftest import speed_job_command

pytestmark = [pytest.mark.jvm, pytest.mark.slow]


def _run(tmp_path, name, agent):
    extra = [f"-Dpyd4j.agent={agent}"] if agent else []
    run = profile_job(speed_job_command("mlp", "0", "slow-data=10", "epochs=3"),
                      tmp_path / name, extra_jvm_options=extra, env_changes={"OMP_NUM_THREADS": "1"})
    assert run.ok, run.returncode
    out = (tmp_path / name / "stdout.log").read_text()
    fixture = dict(kv.split("=", 1) for kv in re.search(r"FIXTURE (.*)", out).group(1).split())
    return run.timeline, fixture


def test_agent_wraps_an_iterator_fit_does_not_prefetch(tmp_path):
    plain, plain_out = _run(tmp_path, "plain", None)
    wrapped, wrapped_out = _run(tmp_path, "wrapped", "prefetch=3")
    # without the option fit() calls next() on the training thread; with it, ND4J's prefetch thread does
    assert plain_out["next_threads"] == "main"
    assert wrapped_out["next_threads"] != "main" and "main" not in wrapped_out["next_threads"].split(",")
    # the job trained the same: 3 epochs of 32 batches, the same batches in the same order (same score, one thread)
    assert plain_out["iterations"] == wrapped_out["iterations"] == "96"
    assert float(plain_out["score"]) == pytest.approx(float(wrapped_out["score"]), rel=1e-5)
    # the agent said what it found and what it did
    note = {t: next(n["iterator"] for n in tl.notes if "iterator" in n) for t, tl in (("plain", plain), ("wrapped", wrapped))}
    assert note["plain"]["class"] == "org.pyd4j.fixtures.SpeedJob$SlowIterator"
    assert note["plain"]["async_supported"] is False and note["plain"]["prefetch"] == -1
    assert note["wrapped"]["prefetch"] == 3 and "AsyncDataSetIterator" in note["wrapped"]["action"]
    # the probe of the plain run sees the data wait (10 ms sleeps in next()) and proposes the wrap
    probe = probe_of(Measured(plain.iterations_per_second(), True, "", plain))
    assert probe.time_split["ms_per_iteration"]["data"] >= 9
    assert probe.iterator["async_supported"] is False
    proposed = {c.setting: c for c in candidates(probe, {"OMP_NUM_THREADS": "1"}, 1)}
    assert proposed["prefetch"].agent[0].startswith("prefetch=")


def test_agent_reads_asyncsupported_of_a_non_public_iterator_class(tmp_path):
    # TrainSynthetic (the examples jar) trains a ComputationGraph through fit(MultiDataSetIterator) on its
    # own nested, non-public iterator class whose asyncSupported() is true: DL4J's fit() prefetches it
    from pyd4j.jvm import examples_jar

    cp = os.pathsep.join([examples_jar(), *classpath()[1:]])
    net = PROJECT_ROOT / "examples" / "networks" / "resnet_graph.json"
    run = profile_job(["java", "-cp", cp, "org.pyd4j.examples.TrainSynthetic", str(net), "2", "2"], tmp_path / "graph",
                      extra_jvm_options=["-Dpyd4j.agent=prefetch=3"], env_changes={"OMP_NUM_THREADS": "1"})
    assert run.ok, run.returncode
    note = next(n["iterator"] for n in run.timeline.notes if "iterator" in n)
    assert note["class"] == "org.pyd4j.examples.TrainSynthetic$RandomMultiIterator"
    assert note["async_supported"] is True
    # asked for (prefetch=3), the agent wraps it in the graph's prefetcher; fit() then does not wrap it again
    assert note["prefetch"] == 3 and "AsyncMultiDataSetIterator" in note["action"]


def test_split_carries_the_data_wait_of_slow_batches(tmp_path):
    # every 4th next() sleeps 20 ms more than the others (1 ms): the mean data wait hides them, the
    # agent's quantiles of the per-iteration wait show them (Thread.sleep never sleeps less)
    run = profile_job(speed_job_command("mlp", "0", "slow-data=1", "data-spike=4:20", "epochs=2"), tmp_path / "spiky",
                      env_changes={"OMP_NUM_THREADS": "1"})
    assert run.ok, run.returncode
    probe = probe_of(Measured(run.timeline.iterations_per_second(), True, "", run.timeline))
    q = probe.time_split["data_ms_quantiles"]
    assert q["p90"] >= 21.0 and q["p99"] >= 21.0
    assert q["p50"] < q["p90"]
    assert probe.time_split["iterations"] == 64
