"""No code change for existing jobs: the agent's plan= option trains an unchanged DL4J job's network
under a pyd4j plan, and `pyd4j tune --plan POLICY` shows the job before and after (real DL4J job
from the examples jar, in a child JVM). A plan that cannot be applied never becomes a quiet
unplanned run: the job ends with the reason (unless plan_fallback=fit), tune says "not verified"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pyd4j.jvm import classpath, examples_jar
from pyd4j.profile import profile_job
from pyd4j.profile.diagnose import diagnose
from pyd4j.profile.tune import tune_job
from pyd4j.sched.choose import OFFLOADING, TRAINING_POLICIES
from pyd4j.dl4j.plan_file import plan_for_job
from tests.train.conftest import FIXTURES_JAR, NETWORKS

pytestmark = [pytest.mark.jvm, pytest.mark.slow]

EXIT_PLAN_NOT_APPLIED = 78   # the agent's exit status for a plan= it cannot apply (org.pyd4j.agent.Agent)
CLI = "import sys; from pyd4j.cli import main; main(sys.argv[1:], prog_name='pyd4j')"


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


def refused_plan(tmp_path: Path) -> tuple[dict, dict]:
    """The lstm job's network (described by the agent) and a plan written for another network."""
    plain = profile_job(job("lstm", 4, 2), tmp_path / "plain", timeout_s=600, describe=True)
    network = events(plain, "network")[-1]["network"]
    other = json.loads((NETWORKS / "mlp.json").read_text())
    plan = plan_for_job({**network, "conf": other, "input_shape": [4, 784]}, tmp_path / "plan.json", "liveness")
    return plain, plan


def test_a_plan_the_trainer_refuses_ends_the_job_with_the_reason(tmp_path: Path) -> None:
    plain, plan = refused_plan(tmp_path)
    routed = profile_job(job("lstm", 4, 2), tmp_path / "routed", timeout_s=600, plan=plan["path"])
    # never a quiet unplanned run: the job ends at its first fit(), before any iteration
    assert routed.returncode == EXIT_PLAN_NOT_APPLIED
    assert routed.timeline.iterations() == 0 < plain.timeline.iterations()
    said = events(routed, "plan")[-1]
    assert said["result"]["status"] == "refused" and said["then"] == "exit"
    assert "write the plan from this network" in said["result"]["reason"]
    stderr = (routed.run_dir / "stderr.log").read_text()
    assert "plan not applied; ending the job" in stderr and "write the plan from this network" in stderr
    found = {f.kind: f for f in diagnose(routed.timeline)}
    assert found["plan-not-applied"].severity == "error" and "crash" not in found   # the finding says why it ended
    assert "write the plan from this network" in " ".join(found["plan-not-applied"].evidence)


def test_plan_fallback_fit_trains_unplanned_and_says_so(tmp_path: Path) -> None:
    plain, plan = refused_plan(tmp_path)
    asked = job("lstm", 4, 2)
    asked.insert(1, "-Dpyd4j.agent=plan_fallback=fit")   # the user's explicit choice
    routed = profile_job(asked, tmp_path / "routed", timeout_s=600, plan=plan["path"])
    assert routed.returncode == 0
    said = events(routed, "plan")[-1]
    assert said["result"]["status"] == "refused" and said["then"] == "fit"
    assert routed.timeline.iterations() == plain.timeline.iterations()
    assert "trains with DL4J's own fit() (plan_fallback=fit)" in (routed.run_dir / "stderr.log").read_text()
    found = {f.kind: f for f in diagnose(routed.timeline)}
    assert found["plan-not-applied"].severity == "warning"   # profile reports it even when asked for


def test_a_bad_plan_fallback_value_is_named(tmp_path: Path) -> None:
    _, plan = refused_plan(tmp_path)
    asked = job("mlp", 4, 2)
    asked.insert(1, "-Dpyd4j.agent=plan_fallback=maybe")
    routed = profile_job(asked, tmp_path / "routed", timeout_s=600, plan=plan["path"])
    assert routed.returncode == EXIT_PLAN_NOT_APPLIED   # not started, so the plan cannot apply: the job ends
    stderr = (routed.run_dir / "stderr.log").read_text()
    assert "plan_fallback=maybe; use fail" in stderr


def test_tune_with_a_plan_that_cannot_apply_is_not_verified(tmp_path: Path) -> None:
    # a network the planner plans but the trainer refuses: DL4J's line-search optimizer, not SGD
    doc = json.loads((NETWORKS / "mlp.json").read_text())
    for conf in doc["confs"]:
        conf["optimizationAlgo"] = "LINE_GRADIENT_DESCENT"
    (tmp_path / "mlp_line.json").write_text(json.dumps(doc))
    (tmp_path / "mlp_line.input.json").write_text((NETWORKS / "mlp.input.json").read_text())
    cp = os.pathsep.join([examples_jar(), *classpath()[1:]])
    argv = ["java", "-Xmx1g", "-cp", cp, "org.pyd4j.examples.TrainSynthetic", str(tmp_path / "mlp_line.json"), "8", "3"]
    out = subprocess.run([sys.executable, "-c", CLI, "tune", "--plan", "liveness", "--out", str(tmp_path / "tune"),
                          "--", *argv], capture_output=True, text=True, timeout=1500)
    assert out.returncode == 3, out.stdout[-2000:] + out.stderr[-2000:]
    assert "not verified: plan not applied (" in out.stdout and "STOCHASTIC_GRADIENT_DESCENT" in out.stdout
    saved = json.loads((tmp_path / "tune" / "tune.json").read_text())
    assert saved["outcome"] == "not-verified" and saved["exit_code"] == 3 and saved["plan"]["applied"] is False
    assert saved["after"]["exit_code"] == EXIT_PLAN_NOT_APPLIED and saved["after"]["iterations"] == 0
    assert "optimization algorithm is LINE_GRADIENT_DESCENT" in saved["after"]["plan_not_applied"]


def test_tune_with_a_plan_shows_before_and_after(tmp_path: Path) -> None:
    doc = tune_job(job("lenet", 8, 3), tmp_path / "tune", plan_policy="superneurons", timeout_s=600)
    # superneurons: the smallest plan; the agent's trainer gets the disk tier when it offloads
    assert doc["plan"]["policy"] in TRAINING_POLICIES
    assert doc["plan"]["offloads"] == (doc["plan"]["policy"] in OFFLOADING)
    assert Path(doc["plan"]["path"]).exists()
    assert {e["result"]["status"] for e in doc["plan"]["agent"] if e["type"] == "plan"} == {"attached"}
    assert doc["after"]["iterations"] == doc["before"]["iterations"]
    # the second run kept the job's own flags: only the plan changed
    assert doc["after"]["jvm_memory_flags"] == doc["before"]["jvm_memory_flags"] == ["-Xmx1g"]


def test_tune_with_a_plan_trains_a_two_input_graph_job_under_it(tmp_path: Path) -> None:
    """`pyd4j tune --plan` on an unchanged job that trains a two-input ComputationGraph with DL4J's own
    fit(MultiDataSetIterator) (org.pyd4j.fixtures.TwoInputJob: an image branch and a tabular branch
    merged): the agent describes both inputs, the plan is of that graph, every iteration of the re-run
    is planned, and the verdict says what the runs showed."""
    cp = os.pathsep.join([str(FIXTURES_JAR), *classpath()[1:]])   # the job's own class path: no pyd4j jar
    argv = ["java", "-Xmx1g", "-cp", cp, "org.pyd4j.fixtures.TwoInputJob", "8", "6"]
    doc = tune_job(argv, tmp_path / "tune", plan_policy="liveness", timeout_s=900)
    # the plan: the job's graph, both inputs at the first batch's shapes
    written = json.loads(Path(doc["plan"]["path"]).read_text())
    assert written["network"]["kind"] == "ComputationGraph" and doc["plan"]["nodes"] == 8
    inputs = {n["name"]: n["shape"] for n in written["nodes"] if n["type"] == "DATA"}
    assert inputs == {"image": [8, 1, 28, 28], "tabular": [8, 12]}
    # applied: the agent attached it, and the planned trainer ran every iteration the job trained
    assert doc["plan"]["applied"] is True and doc["after"]["plan_not_applied"] is None
    said = [e["result"] for e in doc["plan"]["agent"] if e["type"] == "plan"]
    assert said and all(s["status"] == "attached" and s["nodes"] == 8 for s in said)
    stats = [e["stats"] for e in doc["plan"]["agent"] if e["type"] == "plan_stats" and e.get("stats")]
    assert stats[-1]["iterations"] == 6 == doc["after"]["iterations"] == doc["before"]["iterations"]
    assert stats[-1]["forwards"] == 6 * 6   # the graph's six layers and vertices, every iteration
    assert doc["after"]["exit_code"] == 0
    # the verdict is what the runs showed, and its exit code says it
    assert doc["outcome"] in ("verified", "not-verified")
    assert doc["exit_code"] == {"verified": 0, "not-verified": 3}[doc["outcome"]]
    if doc["outcome"] == "not-verified":   # a short job: it says why, and the plan is not the reason
        assert doc["not_verified_because"] and not any("plan" in w for w in doc["not_verified_because"])
