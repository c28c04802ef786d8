"""No code change for existing jobs: the agent's plan= option trains an unchanged DL4J job's network
under a pyd4j plan, and `pyd4j tune --plan POLICY` shows the job before and after (real DL4J job
from the examples jar, in a child JVM)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pyd4j.jvm import classpath, examples_jar
from pyd4j.profile import profile_job
from pyd4j.profile.tune import tune_job
from pyd4j.sched.training_plan import plan_for_job
from tests.train.conftest import NETWORKS

pytestmark = [pytest.mark.jvm, pytest.mark.slow]


def job(name: str, batch: int, iterations: int) -> list[str]:
    cp = os.pathsep.join([examples_jar(), *classpath()[1:]])   # the job's own class path: no pyd4j jar
    return ["java", "-Xmx1g", "-cp", cp, "org.pyd4j.examples.TrainSynthetic", str(NETWORKS / f"{name}.json"),
            str(batch), str(iterations)]


def events(run, kind: str) -> list[dict]:
    return [e for e in run.timeline.network_events if e["type"] == kind]


def test_the_agent_routes_fit_to_the_planned_trainer(tmp_path: Path) -> None:
    plain = profile_job(job("deep_cnn_bn", 8, 4), tmp_path / "plain", timeout_s=600, describe=True)
    assert plain.returncode == 0, (plain.run_dir / "stderr.log").read_text()[-2000:]
    network = events(plain, "network")[-1]["network"]   # TrainSynthetic warms up on a batch of one first
    # the agent described the job's network: its configuration and the shape of its first batch
    assert network["kind"] == "MultiLayerNetwork" and network["input_shape"] == [8, 3, 32, 32]
    layers = lambda doc: [c["layer"]["@class"] for c in doc["confs"]]  # noqa: E731
    assert layers(json.loads((NETWORKS / "deep_cnn_bn.json").read_text())) == layers(network["conf"])
    plan = plan_for_job(network, tmp_path / "plan.json", "liveness")
    routed = profile_job(job("deep_cnn_bn", 8, 4), tmp_path / "routed", timeout_s=600, plan=plan["path"])
    assert routed.returncode == 0, (routed.run_dir / "stderr.log").read_text()[-2000:]
    said = [e["result"] for e in events(routed, "plan")]
    assert all(s["status"] == "attached" and s["policy"] == "liveness" and s["nodes"] == 24 for s in said)
    stats = events(routed, "plan_stats")[-1]["stats"]
    assert stats["iterations"] == 4   # the trained network's iterations, all planned
    assert routed.timeline.iterations() == plain.timeline.iterations()
    assert stats["forwards"] == 4 * 23   # every DL4J layer, every iteration, by the planned trainer


def test_a_network_the_trainer_refuses_trains_as_before(tmp_path: Path) -> None:
    plain = profile_job(job("lstm", 4, 2), tmp_path / "plain", timeout_s=600, describe=True)
    network = events(plain, "network")[-1]["network"]
    # a plan written for another network: the agent reports the refusal, the job trains unplanned
    other = json.loads((NETWORKS / "mlp.json").read_text())
    plan = plan_for_job({**network, "conf": other, "input_shape": [4, 784]}, tmp_path / "plan.json", "liveness")
    routed = profile_job(job("lstm", 4, 2), tmp_path / "routed", timeout_s=600, plan=plan["path"])
    assert routed.returncode == 0
    said = events(routed, "plan")[-1]["result"]
    assert said["status"] == "refused" and "write the plan from this network" in said["reason"]
    assert routed.timeline.iterations() == plain.timeline.iterations()


def test_tune_with_a_plan_shows_before_and_after(tmp_path: Path) -> None:
    doc = tune_job(job("lenet", 8, 3), tmp_path / "tune", plan_policy="superneurons", timeout_s=600)
    # superneurons: the smallest plan the agent's trainer (no offload tier) can run
    assert doc["plan"]["policy"] in ("liveness", "recompute_in_memory") and not doc["plan"]["offloads"]
    assert Path(doc["plan"]["path"]).exists()
    assert {e["result"]["status"] for e in doc["plan"]["agent"] if e["type"] == "plan"} == {"attached"}
    assert doc["after"]["iterations"] == doc["before"]["iterations"]
    # the second run kept the job's own flags: only the plan changed
    assert doc["after"]["jvm_memory_flags"] == doc["before"]["jvm_memory_flags"] == ["-Xmx1g"]
