"""Fuzz a running `pyd4j serve` from its own OpenAPI description with schemathesis (shared by
tests/serve/test_fuzz.py, a few hundred requests, and benchmarks/serve_fuzz.py, thousands).

Every operation gets requests that fit its schema and requests that break it (hypothesis, seeded).
Each response is judged on its own: a server error (5xx other than 503/504, which the server
answers by design: not ready, no room in time, no answer in time), a body that is not JSON (every
endpoint but /metrics answers JSON), and schemathesis' own checks against the description
(status codes and content types it lists, bodies of the documented shapes, schema-breaking
requests refused with a 4xx). Between operations the server's readiness is read: it must stay ready.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BY_DESIGN = (503, 504)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, timeout: float = 10.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def start_serve(models: dict[str, Path], args: tuple[str, ...] = (), startup_s: float = 600.0,
                log: Path | None = None) -> tuple[subprocess.Popen, str]:
    """`pyd4j serve` as a user starts it, in its own process group, once every model is ready."""
    port = free_port()
    argv = [sys.executable, "-m", "pyd4j.cli", "serve", "--port", str(port), *args]
    for name, path in models.items():
        argv += ["--model", f"{name}={path}"]
    out = open(log, "wb") if log else subprocess.DEVNULL
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + startup_s   # a deadline for a server that never comes up, not a timing
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"pyd4j serve exited with {proc.returncode} while starting")
        try:
            if get(f"{url}/v2/health/ready", timeout=2)[0] == 200:
                return proc, url
        except OSError:
            pass
        time.sleep(0.5)
    stop(proc)
    raise RuntimeError(f"pyd4j serve was not ready within {startup_s} s")


def stop(proc: subprocess.Popen) -> int:
    """SIGINT, as Ctrl-C; SIGKILL to the group if it has not ended after a minute."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode


def _header(response: Any, name: str) -> str | None:
    """A response header's value (schemathesis keeps each header as a list of values)."""
    value = response.headers.get(name)
    return value[0] if isinstance(value, list) and value else value


def _is_json(body: bytes, content_type: str, binary_length: str | None) -> bool:
    head = body[:int(binary_length)] if binary_length and binary_length.isdigit() else body
    if not content_type.startswith("application/json") and binary_length is None:
        return False
    try:
        json.loads(head, parse_constant=lambda token: (_ for _ in ()).throw(ValueError(token)))
    except ValueError:
        return False
    return True


def fuzz(url: str, examples: int, seed: int = 0) -> dict[str, Any]:
    """`examples` generated cases per operation and generation mode against the server at `url`;
    the counts and the first failures of each kind."""
    import hypothesis
    import schemathesis
    from hypothesis import HealthCheck, Phase, given, settings
    from schemathesis import GenerationMode
    from schemathesis.specs.openapi.checks import (content_type_conformance, negative_data_rejection,
                                                   response_schema_conformance, status_code_conformance)

    checks = [status_code_conformance, content_type_conformance, response_schema_conformance, negative_data_rejection]
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    tally: dict[str, Any] = {"requests": 0, "statuses": {}, "server_errors": 0, "invalid_json": 0,
                             "check_failures": 0, "not_ready": 0, "operations": 0, "examples": {}}

    def note(kind: str, case: Any, detail: str) -> None:
        tally["examples"].setdefault(kind, [])
        if len(tally["examples"][kind]) < 5:
            tally["examples"][kind].append(f"{case.method} {case.formatted_path}: {detail[:400]}")

    def one(case: Any) -> None:
        response = case.call(base_url=url, timeout=60)
        tally["requests"] += 1
        status = response.status_code
        tally["statuses"][str(status)] = tally["statuses"].get(str(status), 0) + 1
        if status >= 500 and status not in BY_DESIGN:
            tally["server_errors"] += 1
            note("server_errors", case, f"{status} {response.text[:300]}")
        if case.path != "/metrics" and not _is_json(response.content, _header(response, "content-type") or "",
                                                     _header(response, "inference-header-content-length")):
            tally["invalid_json"] += 1
            note("invalid_json", case, f"{status} {_header(response, 'content-type')} {response.content[:200]!r}")
        try:
            case.validate_response(response, checks=checks)
        except AssertionError as err:   # schemathesis' failures are AssertionErrors (one or a group)
            tally["check_failures"] += 1
            note("check_failures", case, str(err))

    for result in schema.get_all_operations():
        operation = result.ok()
        tally["operations"] += 1
        tally.setdefault("labels", []).append(operation.label)
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            @settings(max_examples=examples, deadline=None, database=None, derandomize=False,
                      phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck),
                      verbosity=hypothesis.Verbosity.quiet)
            @given(case=operation.as_strategy(generation_mode=mode))
            @hypothesis.seed(seed)
            def run(case: Any) -> None:
                one(case)

            try:
                run()
            except hypothesis.errors.Unsatisfiable:   # an operation with nothing to break (no parameters, no body)
                pass
            if get(f"{url}/v2/health/ready")[0] != 200:
                tally["not_ready"] += 1
    return tally
