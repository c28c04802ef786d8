"""`pyd4j plan` end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pyd4j.commands.plan import command
from pyd4j.sched import zoo
from pyd4j.sched.bounds import lower_bound
from pyd4j.sched.policies import make_plan
from pyd4j.sched.simulator import simulate
from pyd4j.units import parse_bytes


def run(*args: str) -> dict:
    r = CliRunner().invoke(command, [*args, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_json_has_every_policy_and_the_bound() -> None:
    doc = run("--model", "resnet50", "--batch", "8", "--device", "v100-16")
    g = zoo.resnet(50, batch=8)
    assert doc["lower_bound_bytes"] == lower_bound(g).lower_bound_bytes
    assert list(doc["policies"]) == ["baseline", "liveness", "utp", "recompute", "superneurons"]
    assert doc["policies"]["liveness"]["peak_bytes"] == simulate(make_plan(g, "liveness")).peak_bytes
    for p in doc["policies"].values():
        assert p["peak_bytes"] >= doc["lower_bound_bytes"] and p["time_s"] > 0
        # the same device memory with delayed frees is never slower
        assert p["at_min_peak"]["device_peak_bytes"] <= p["device_peak_bytes"]
        assert p["at_min_peak"]["time_s"] <= p["time_s"] * (1 + 1e-9)
    # baseline's overhead is the no-workspace convolution algorithm, nothing else
    base = doc["policies"]["baseline"]
    assert base["time_s"] == pytest.approx(doc["no_workspace_time_s"], rel=1e-9)
    assert base["ideal_time_s"] == doc["ideal_time_s"] < doc["no_workspace_time_s"]
    # a 16 GiB V100 holds everything: the time-optimised superneurons plan moves nothing
    fast = doc["policies"]["superneurons"]["time_optimised"]
    assert fast["fits"] and fast["budget_bytes"] == doc["capacity_bytes"]
    assert fast["bytes_offloaded"] == fast["recompute_s"] == 0
    assert fast["time_s"] == pytest.approx(doc["ideal_time_s"], rel=1e-9)


def test_max_depth_and_max_batch(tmp_path: Path) -> None:
    doc = run("--model", "resnet", "--max-depth", "--batch", "4", "--device", "k40c",
              "--budget", "3GiB")
    assert doc["depth"] > doc["baseline_depth"] > 0
    assert (doc["depth"] - 2) % 3 == 0
    # one more block in conv4_x would not fit
    deeper = zoo.resnet(doc["depth"] + 3, batch=4)
    assert simulate(make_plan(deeper, "superneurons")).peak_bytes > parse_bytes("3GiB")
    doc = run("--model", "alexnet", "--max-batch", "--policy", "liveness", "--budget", "2GiB")
    b = doc["max_batch"]["liveness"]
    assert simulate(make_plan(zoo.alexnet(batch=b), "liveness")).peak_bytes <= 2 << 30
    assert simulate(make_plan(zoo.alexnet(batch=b + 1), "liveness")).peak_bytes > 2 << 30


@pytest.mark.jvm   # `pyd4j plan` of a DL4J network estimates the planned job (pyd4j.memory.planned_job)
def test_plot_and_dl4j_network(jvm, tmp_path: Path) -> None:
    png = tmp_path / "t.png"
    nets = Path(__file__).resolve().parents[2] / "examples" / "networks"
    doc = run("--network", str(nets / "deep_cnn_bn.json"), "--batch", "16", "--plot", str(png))
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert doc["layers"] == 24  # the input and DL4J's 23 layers: one node per DL4J layer


def test_table_output() -> None:
    r = CliRunner().invoke(command, ["--model", "alexnet", "--batch", "4"])
    assert r.exit_code == 0 and "recompute" in r.output and "lower bound" in r.output
    assert "Time-optimised under a budget" in r.output and "no-workspace algorithm" in r.output


@pytest.mark.jvm
def test_framework_option_and_execute_needs_cudnn(jvm) -> None:
    nets = Path(__file__).resolve().parents[2] / "examples" / "networks"
    doc = run("--network", str(nets / "lenet.json"), "--batch", "4", "--policy", "liveness")
    assert doc["profile"] == "dl4j"
    doc = run("--model", "alexnet", "--batch", "2", "--image", "67", "--policy", "liveness",
              "--framework", "cudnn", "--execute")
    assert doc["profile"] == "cudnn" and doc["execute"]["policies"]["liveness"]["grads_equal_reference"]
    r = CliRunner().invoke(command, ["--model", "alexnet", "--profile", "dl4j", "--execute", "--json"])  # the old name
    assert r.exit_code != 0 and "--framework cudnn" in r.output
    # DL4J networks train on DL4J's own layers, not the numpy kernels
    r = CliRunner().invoke(command, ["--network", str(nets / "lenet.json"), "--execute", "--json"])
    assert r.exit_code != 0 and "pyd4j.train.fit" in r.output


@pytest.mark.jvm
def test_emit_plan_for_a_dl4j_network(jvm, tmp_path: Path) -> None:
    from pyd4j.dl4j.plan_file import read_plan

    nets = Path(__file__).resolve().parents[2] / "examples" / "networks"
    out = tmp_path / "lenet.plan.json"
    doc = run("--model", str(nets / "lenet.json"), "--batch", "16", "--emit-plan", str(out))
    plan = read_plan(out)
    # no budget: liveness only; one node per DL4J layer plus the input, DL4J's identities
    assert doc["emitted_plan"]["policy"] == plan["policy"] == "liveness"
    assert [n["dl4j"].get("layer") for n in plan["nodes"]] == [None, 0, 1, 2, 3, 4, 5]
    assert plan["network"] == {"kind": "MultiLayerNetwork", "batch": 16, "dtype": "float32",
                               "source": str(nets / "lenet.json")}
    assert plan["predicted"]["device_peak_bytes"] == doc["policies"]["liveness"]["device_peak_bytes"]
    ops = [r[0] for r in plan["records"]]
    assert ops.count("FORWARD") == ops.count("BACKWARD") + 1 == 7   # the input has no backward step
    # a budget: the fastest plan that fits; below the smallest peak: refused with the minimum
    roomy = tmp_path / "roomy.json"
    doc = run("--model", str(nets / "lenet.json"), "--batch", "16", "--budget", "1GiB", "--emit-plan", str(roomy))
    assert read_plan(roomy)["predicted"]["device_peak_bytes"] <= 1 << 30
    low = tmp_path / "low.json"
    r = CliRunner().invoke(command, ["--model", str(nets / "lenet.json"), "--batch", "16", "--budget", "1MiB",
                                     "--emit-plan", str(low)])
    assert r.exit_code != 0 and "smallest peak" in r.output and not low.exists()
    # the file is never overwritten
    r = CliRunner().invoke(command, ["--model", str(nets / "lenet.json"), "--emit-plan", str(out)])
    assert r.exit_code != 0 and "exists" in r.output


def test_optimum_option_replays_and_refuses_large_networks() -> None:
    doc = run("--model", "alexnet", "--batch", "2", "--image", "67", "--policy", "superneurons",
              "--optimum")
    o = doc["optimum"]
    assert o["fits"] and o["smallest_budget_bytes"] == o["smallest_budget_proven_bytes"]
    assert o["smallest_budget_bytes"] >= doc["lower_bound_bytes"]
    # with the device's memory to spare the optimum is the infinite-memory run
    assert o["time_s"] == pytest.approx(doc["ideal_time_s"], rel=1e-9)
    r = CliRunner().invoke(command, ["--model", "resnet50", "--batch", "1", "--optimum"])
    assert r.exit_code != 0 and "limited to 80" in r.output
