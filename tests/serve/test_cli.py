"""`pyd4j serve` as a user runs it: a child process serving an example network, queried with
tritonclient, stopped with SIGINT; and bad arguments refused before any JVM starts."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

PYD4J = [sys.executable, "-m", "pyd4j.cli"]


@pytest.mark.parametrize("args, words", [
    (["--model", "mlp"], ["NAME=PATH"]),
    (["--model", "a b=x.json"], ["'a b'", "letters"]),
    (["--model", "m=examples/networks/mlp.json", "--model", "m=examples/networks/lenet.json"], ["['m']", "more than once"]),
    (["--model", "m=examples/networks/mlp.json", "--budget", "0"], ["0"]),
    (["--model", "m=examples/networks/mlp.json", "--port", "70000"], ["70000"]),
    (["--model", "m=examples/networks/mlp.json", "--idle-before-evict", "-5"], ["-5", "--idle-before-evict"]),
    (["--model", "m=examples/networks/mlp.json", "--host", "999.1.1.1"], ["999.1.1.1", "--host"]),
    (["--model", "m=examples/networks/mlp.json", "--slice-rows", "0"], ["'0'", "out of range", "--slice-rows"]),
    (["--model", "m=examples/networks/mlp.json", "--slice-rows", "some"], ["'some'", "auto", "whole"]),
    (["--model", "m=examples/networks/mlp.json", "--slice-rows", "64", "--max-batch", "32"], ["64", "max batch 32"]),
    # names: one check for --model and --input (and ModelServer, test_server_arguments)
    (["--model", "..=examples/networks/mlp.json"], ["'..'", "starts with '.'"]),
    (["--model", "a/b=examples/networks/mlp.json"], ["'/'", "letters, digits"]),
    (["--model", "x" * 300 + "=examples/networks/mlp.json"], ["300 characters", "more than 64"]),
    # --input: its form, once per model, for a served model, a readable spec
    (["--model", "m=examples/networks/mlp.json", "--input", "no-equals"], ["'no-equals'", "NAME=SPEC", "--input"]),
    (["--model", "m=examples/networks/mlp.json", "--input", "m=ff:784", "--input", "m=ff:10"],
     ["'m' is given twice", "'ff:784'", "'ff:10'"]),
    (["--model", "m=examples/networks/mlp.json", "--input", "other=ff:784"], ["['other']", "not served", "--input"]),
    (["--model", "m=examples/networks/mlp.json", "--input", "m=cube:3"], ["--input m=cube:3", "ff:SIZE"]),
    (["--model", "m=examples/networks/mlp.json", "--soak", "1e9"], ["'1e9'", "--soak"]),
    (["--model", "m=examples/networks/mlp.json", "--soak", "1000000000"], ["1000000000", "1000000", "--soak"]),
    (["--model", "m=examples/networks/mlp.json", "--soak", "5"], ["5", "--soak"]),
])
def test_bad_arguments_exit_2_naming_the_value(args, words):
    out = subprocess.run([*PYD4J, "serve", *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    for w in words:
        assert w in out.stderr, (w, out.stderr)


def test_a_port_in_use_is_refused_before_any_model_loads():
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        out = subprocess.run([*PYD4J, "serve", "--port", str(port), "--model", "m=examples/networks/mlp.json"],
                             capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert f"127.0.0.1:{port}" in out.stderr and "--port" in out.stderr
    assert "loaded" not in out.stderr   # the worker logs "model m loaded" once a model has loaded


@pytest.mark.jvm
@pytest.mark.slow
def test_serve_two_example_networks_and_stop_on_sigint(tmp_path):
    http = pytest.importorskip("tritonclient.http")
    log = open(tmp_path / "stderr.txt", "w+")
    proc = subprocess.Popen([*PYD4J, "serve", "--port", "0", "--budget", "64m",
                             "--model", "mlp=examples/networks/mlp.json", "--model", "lenet=examples/networks/lenet.json"],
                            stdout=subprocess.PIPE, stderr=log, text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        url = None
        for _ in range(1200):
            log.seek(0)
            m = re.search(r"serving 2 model\(s\) on http://(127\.0\.0\.1:\d+)", log.read())
            if m:
                url = m.group(1)
                break
            assert proc.poll() is None, "pyd4j serve exited while loading"
            time.sleep(0.25)
        assert url, "pyd4j serve did not start"
        client = None
        for _ in range(100):  # the log line comes just before uvicorn accepts
            try:
                client = http.InferenceServerClient(url)
                if client.is_server_ready():
                    break
            except Exception:  # noqa: BLE001
                time.sleep(0.1)
        for name in ("mlp", "lenet"):
            x = np.ones((2, 784), np.float32)
            inp = http.InferInput("input", [2, 784], "FP32")
            inp.set_data_from_numpy(x)
            y = client.infer(name, [inp]).as_numpy("output")
            assert y.shape == (2, 10)
            np.testing.assert_allclose(y.sum(axis=1), 1.0, rtol=1e-5)  # both end in softmax
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=120) == 0
        table = proc.stdout.read()
        assert "mlp" in table and "lenet" in table
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _samples(rss_step: float, n: int = 12) -> dict:
    return {"samples": [{"requests": 100 * i, "rss": 300e6 + rss_step * i + (i % 3) * 1e5,
                         "heap_live": 20e6 + (i % 2) * 1e5, "javacpp_total": 512.0} for i in range(n)]}


def test_soak_verdict_is_the_profilers_judge_on_the_samples():
    """judge_soak on hand-made samples: flat memory is no leak; RSS growing 4 MiB a round (40 MiB in
    all, over the profiler's 16 MiB threshold) is a leak, and only RSS is blamed."""
    from pyd4j.commands.serve import judge_soak

    flat = judge_soak(_samples(0.0))
    assert flat["verdict"] == "no-leak" and not flat["leak"]
    growing = judge_soak(_samples(4 * 2**20))
    assert growing["leak"] and growing["verdict"] == "leak"
    assert [v["status"] for v in growing["verdicts"]] == ["leak", "no-leak", "no-leak"]
    short = judge_soak(_samples(4 * 2**20, n=4))
    assert short["verdict"] == "not-enough-data" and not short["leak"]


def test_help_says_what_a_request_blocked_by_the_idle_time_gets():
    out = subprocess.run([*PYD4J, "serve", "--help"], capture_output=True, text=True, timeout=120)
    text = " ".join(out.stdout.split())
    assert out.returncode == 0
    assert "--idle-before-evict" in text and "503 with Retry-After" in text and "not evicted" in text
