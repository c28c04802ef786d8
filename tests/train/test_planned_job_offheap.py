"""What a planned job holds off the heap is one figure (`pyd4j.memory.planned_job`): `pyd4j plan --json`,
`pyd4j.train.fit(..., memory="superneurons")`'s `.plan` and `pyd4j tune --plan` report the same number for the
same network, batch and data pipeline, and it is the plan's simulated device peak plus what the network's
estimate holds beside the step (real DL4J in the session JVM; no job is run: the tune's planning step is
given the network as the agent describes it)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from tests.train.conftest import NETWORKS

pytestmark = pytest.mark.jvm

MLP = NETWORKS / "mlp.json"
BATCH = 8


def expected() -> tuple[int, int]:
    """(plan peak, beside the step), made without the product function: the liveness plan fit() trains
    with when no budget is given, simulated, and the estimate's own terms."""
    from pyd4j.dl4j.graph import graph_from_dl4j_json
    from pyd4j.memory.estimate import estimate
    from pyd4j.sched.choose import choose_plan

    _, result = choose_plan(graph_from_dl4j_json(json.loads(MLP.read_text()), BATCH, (784,)))
    e = estimate(MLP, BATCH)
    beside = e.term_bytes("prefetch_buffers")   # an MLP: no LSTM pieces beside its data pipeline
    assert beside == e.beside_the_step_bytes() > 0
    return result.device_peak_bytes, beside


def test_plan_fit_and_tune_report_one_figure(jvm, tmp_path, capsys) -> None:
    import jpype

    from pyd4j.commands._tune_output import _print_recommendation
    from pyd4j.commands.plan import command
    from pyd4j.data import NumpyBatches
    from pyd4j.profile.tune import _plan_job
    from pyd4j.train import fit

    peak, beside = expected()

    r = CliRunner().invoke(command, ["--model", str(MLP), "--batch", str(BATCH), "--policy", "liveness", "--json"])
    assert r.exit_code == 0, r.output
    planned_cli = json.loads(r.stdout)["planned_job_offheap"]

    conf = jpype.JClass("org.deeplearning4j.nn.conf.MultiLayerConfiguration").fromJson(MLP.read_text())
    net = jpype.JClass("org.deeplearning4j.nn.multilayer.MultiLayerNetwork")(conf)
    net.init()
    rng = np.random.default_rng(3)
    x = rng.random((2 * BATCH, 784), dtype=np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 2 * BATCH)]
    # DL4J's own fit() queue: the data pipeline `pyd4j plan` and `pyd4j tune --plan` assume
    result = fit(net, NumpyBatches(x, y, BATCH, shuffle=False), prefetch=2, progress=False, memory="superneurons")
    planned_fit = result.plan["planned_job_offheap"]

    class Run:   # the profiled run as `pyd4j tune --plan` plans it: the network the agent described
        class timeline:  # noqa: N801
            network_events = [{"type": "network", "network": {"conf": json.loads(MLP.read_text()),
                                                              "kind": "MultiLayerNetwork", "input_shape": [BATCH, 784]}}]
    tune_plan = _plan_job(Run(), "liveness", tmp_path / "plan.json")
    planned_tune = tune_plan["planned_job_offheap"]

    for figure in (planned_cli, planned_fit, planned_tune):
        assert figure["plan_peak_bytes"] == peak and figure["beside_the_step_bytes"] == beside, figure
        assert figure["total_bytes"] == peak + beside
    assert planned_cli["policy"] == result.plan["policy"] == tune_plan["policy"] == "liveness"

    # the tune's output prints it in the words `pyd4j plan` prints it
    from pyd4j.memory.planned_job import offheap_line

    capsys.readouterr()
    _print_recommendation({"plan": {**tune_plan, "agent": []}})
    assert offheap_line(planned_tune) in capsys.readouterr().out
    text = CliRunner().invoke(command, ["--model", str(MLP), "--batch", str(BATCH), "--policy", "liveness"])
    assert offheap_line(planned_cli) in text.stdout
