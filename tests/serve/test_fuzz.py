"""schemathesis against a running `pyd4j serve` with two models (a child process, as a user starts
it), from the server's own OpenAPI description: a few hundred generated requests here, thousands in
benchmarks/serve_fuzz.py. No server error (5xx other than 503/504, by design), every body JSON,
schemathesis' schema checks pass, the server ready throughout and stopped cleanly, no traceback
in its log. The judge itself (tests.serve.fuzzing._is_json) is tested on bodies it must refuse."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.serve.fuzzing import _is_json, fuzz, start_serve, stop

NETWORKS = Path("examples/networks")


@pytest.mark.parametrize("body, content_type, length, ok", [
    (b'{"outputs": [1.5]}', "application/json", None, True),
    (b'{"outputs": [NaN]}', "application/json", None, False),
    (b'{"outputs": [Infinity]}', "application/json", None, False),
    (b"Not Found", "text/plain; charset=utf-8", None, False),
    (b'{"a": 1}' + bytes(8), "application/octet-stream", "8", True),
    (b'{"a": 1', "application/json", None, False),
])
def test_the_json_judge_refuses_what_is_not_json(body, content_type, length, ok):
    assert _is_json(body, content_type, length) is ok


@pytest.mark.jvm
@pytest.mark.slow
def test_schemathesis_finds_no_server_error_and_no_invalid_json(tmp_path):
    pytest.importorskip("schemathesis")
    log = tmp_path / "serve.log"
    proc, url = start_serve({"mlp": NETWORKS / "mlp.json", "lenet": NETWORKS / "lenet.json"},
                            ("--max-batch", "8", "--slice-rows", "whole", "--budget", "8m"), log=log)
    try:
        result = fuzz(url, examples=12, seed=1)
    finally:
        code = stop(proc)
    # every operation but /openapi.json itself, which schemathesis leaves out
    assert result["requests"] >= 100 and result["operations"] == 13, result
    assert {"200", "400", "404"} <= set(result["statuses"]), result["statuses"]
    for kind in ("server_errors", "invalid_json", "check_failures", "not_ready"):
        assert result[kind] == 0, (kind, result["examples"])
    assert code == 0
    text = log.read_text(errors="replace")
    assert "Traceback" not in text and "Exception in ASGI" not in text, text[-3000:]
