"""One bad model, request or client never takes the server down, and every answer is JSON: real DL4J
networks in the in-process JVM, a real server on 127.0.0.1, raw HTTP from the test.

One class of failure a test: a model whose parameters no machine holds (refused before init(), the
others serve), values JSON numbers cannot carry (in a request, or out of the model), bodies nested
too deep, routes and methods the server does not have, a client that disconnects mid-body, an
eviction that keeps failing (backs off, says so), a --max-batch too large, and a server whose
models all fail (it does not start).
"""

from __future__ import annotations

import json
import re
import socket
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

pytestmark = pytest.mark.jvm
pytest.importorskip("starlette")

NETWORKS = "examples/networks"
MLP_PARAMS = (784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10) * 4


def _huge(d, width: int = 2**31 - 1) -> str:
    """mlp.json with a first layer `width` units wide: terabytes of parameters."""
    doc = json.load(open(f"{NETWORKS}/mlp.json"))
    doc["confs"][0]["layer"]["nout"] = width
    doc["confs"][1]["layer"]["nin"] = width
    (d / "huge.json").write_text(json.dumps(doc))
    (d / "huge.input.json").write_text(open(f"{NETWORKS}/mlp.input.json").read())
    return str(d / "huge.json")


def _call(server, path: str, body: bytes | None = None, method: str | None = None,
          headers: dict[str, str] | None = None) -> tuple[int, dict, dict]:
    req = urllib.request.Request(server.url + path, data=body, method=method,
                                 headers={"content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            raw, status, hdrs = r.read(), r.status, dict(r.headers)
    except urllib.error.HTTPError as err:
        raw, status, hdrs = err.read(), err.code, dict(err.headers)
    # every answer is JSON with no NaN or Infinity in it (Python's json would accept them)
    length = hdrs.get("Inference-Header-Content-Length")
    head = raw[:int(length)] if length else raw
    return status, json.loads(head, parse_constant=lambda t: pytest.fail(f"bare {t} in a response")), hdrs


def _request(x: np.ndarray, **extra) -> bytes:
    return json.dumps({"inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32",
                                   "data": x.reshape(-1).tolist()}], **extra}).encode()


@pytest.fixture(scope="module")
def server(jvm, tmp_path_factory):
    from pyd4j.serve import ModelServer

    d = tmp_path_factory.mktemp("hardening")
    s = ModelServer({"mlp": f"{NETWORKS}/mlp.json", "lenet": f"{NETWORKS}/lenet.json", "huge": _huge(d)},
                    port=0, max_batch=8, slice_rows="whole")
    s.start()
    yield s
    s.stop()


def test_a_model_no_machine_holds_is_refused_before_init_and_the_others_serve(server):
    from pyd4j.dl4j.sizecheck import machine_bytes

    st = server.status()["models"]
    assert st["mlp"]["state"] == st["lenet"]["state"] == "ready"
    error = st["huge"]["error"]
    needed = int(re.search(r"parameters alone take (\d+) bytes", error).group(1))
    assert needed == (784 * (2**31 - 1) + (2**31 - 1) + (2**31 - 1) * 256 + 256 + 2570) * 4   # counted, not allocated
    assert f"this machine's {machine_bytes()} bytes" in error and "refused before DL4J allocates" in error
    status, body, _ = _call(server, "/v2/models/huge/ready")
    assert status == 503 and "parameters alone take" in body["error"]
    status, body, _ = _call(server, "/v2/models/mlp/infer", _request(np.zeros((1, 784), np.float32)))
    assert status == 200 and body["outputs"][0]["shape"] == [1, 10]


def test_the_same_check_refuses_against_a_budget_with_dl4j_s_own_count(jvm):
    from pyd4j.dl4j import config
    from pyd4j.dl4j.sizecheck import TooLargeError, check_parameters_fit, parameter_bytes

    text, kind = config.read_config_file(f"{NETWORKS}/mlp.json")
    conf = config.java_configuration(text, kind, "mlp")
    assert parameter_bytes(conf) == MLP_PARAMS == int(config.network_of(conf, kind).params().length()) * 4
    with pytest.raises(TooLargeError, match=f"take {MLP_PARAMS} bytes .* more than the budget of 1000000 bytes"):
        check_parameters_fit(conf, "model 'mlp'", budget=1_000_000)
    with pytest.raises(TooLargeError, match="more than the budget of 1000000"):
        config.network_of(conf, kind, budget=1_000_000)


def test_an_input_past_fp32_is_400_naming_it(server):
    status, body, _ = _call(server, "/v2/models/mlp/infer",
                            json.dumps({"inputs": [{"name": "input", "shape": [1, 784], "datatype": "FP32",
                                                    "data": [1e39] + [0.0] * 783}]}).encode())
    assert status == 400 and "'input'" in body["error"] and "beyond FP32's range" in body["error"]


def test_nan_outputs_are_an_error_naming_the_output_in_json_and_carried_as_binary(server):
    """Infinity sent as binary data (which carries any float) makes the network's outputs NaN: as JSON
    they are refused naming the output; asked for as binary data they come back as they are."""
    x = np.full((1, 784), np.inf, np.float32)
    head = json.dumps({"inputs": [{"name": "input", "shape": [1, 784], "datatype": "FP32",
                                   "parameters": {"binary_data_size": x.nbytes}}]}).encode()
    hdr = {"Inference-Header-Content-Length": str(len(head)), "content-type": "application/octet-stream"}
    status, body, _ = _call(server, "/v2/models/mlp/infer", head + x.tobytes(), headers=hdr)
    assert status == 400 and "output 'output'" in body["error"] and "NaN or infinite" in body["error"]
    assert "binary_data_output" in body["error"]
    head = json.dumps({"inputs": json.loads(head)["inputs"], "parameters": {"binary_data_output": True}}).encode()
    hdr["Inference-Header-Content-Length"] = str(len(head))
    req = urllib.request.Request(server.url + "/v2/models/mlp/infer", data=head + x.tobytes(), headers=hdr)
    with urllib.request.urlopen(req, timeout=120) as r:
        raw, n = r.read(), int(r.headers["Inference-Header-Content-Length"])
    assert json.loads(raw[:n])["outputs"][0]["parameters"]["binary_data_size"] == 40
    assert np.isnan(np.frombuffer(raw[n:], "<f4")).all()


@pytest.mark.parametrize("body", [b"[" * 100_000 + b"]" * 100_000, b'{"inputs": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
                                  json.dumps({"inputs": [{"name": "input", "shape": [1, 784], "datatype": "FP32",
                                                          "data": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[0.0]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}]}).encode()])
def test_bodies_nested_too_deep_are_400(server, caplog, body):
    with caplog.at_level("DEBUG"):
        status, body, _ = _call(server, "/v2/models/mlp/infer", body)
    assert status == 400 and body["error"]
    assert "Traceback" not in caplog.text and "RecursionError" not in caplog.text


@pytest.mark.parametrize("path, method, status", [("/nowhere", "GET", 404), ("/v2/models/mlp/infer", "GET", 405),
                                                  ("/v2/health/ready", "POST", 405)])
def test_routes_and_methods_the_server_lacks_are_answered_in_json(server, path, method, status):
    got, body, _ = _call(server, path, b"{}" if method == "POST" else None, method=method)
    assert got == status and path in body["error"]


def test_openapi_description_lists_the_served_models_and_validates_its_own_example(server):
    status, doc, _ = _call(server, "/openapi.json")
    assert status == 200 and doc["openapi"].startswith("3.1")
    infer = doc["paths"]["/v2/models/{name}/infer"]["post"]
    assert next(p for p in infer["parameters"] if p["name"] == "name")["schema"]["enum"] == ["huge", "lenet", "mlp"]
    example = infer["requestBody"]["content"]["application/json"]["examples"]["lenet"]["value"]
    status, body, _ = _call(server, "/v2/models/lenet/infer", json.dumps(example).encode())
    assert status == 200 and body["outputs"][0]["shape"] == [1, 10]


def _metric(server, name: str) -> float:
    with urllib.request.urlopen(server.url + "/metrics", timeout=60) as r:
        text = r.read().decode()
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def test_a_client_that_disconnects_mid_body_is_no_traceback(server, caplog):
    key = 'pyd4j_serve_requests_total{model="mlp",status="400"}'
    before = _metric(server, key)
    with caplog.at_level("DEBUG"):
        host, port = server.url[len("http://"):].split(":")
        with socket.create_connection((host, int(port))) as s:
            s.sendall(b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 100000\r\n\r\n{\"inputs\": [")
        deadline = time.monotonic() + 60   # waits for the server to have handled it; not a timing
        while _metric(server, key) == before and time.monotonic() < deadline:
            time.sleep(0.05)
    assert _metric(server, key) == before + 1
    assert "Traceback" not in caplog.text and "Exception in ASGI" not in caplog.text
    assert not any(r.exc_info for r in caplog.records)


def test_an_eviction_that_keeps_failing_backs_off_and_says_so(jvm, tmp_path):
    """Two models, a budget for one; the resident one's eviction fails (a full disk, made here by
    replacing its evict): the request for the other gets 503 naming the failure, the failing model is
    asked a bounded number of times (never a busy loop), stays ready and says why in its readiness
    and in the metrics."""
    from pyd4j.serve import ModelServer

    s = ModelServer({"a": f"{NETWORKS}/mlp.json", "b": f"{NETWORKS}/lenet.json"}, budget=7 * 1024**2, port=0,
                    max_batch=32, slice_rows="whole", timeout_s=2.0)
    s.start()
    try:
        resident = next(n for n in ("a", "b") if s.budget.entry(n).state == "resident")
        other = "b" if resident == "a" else "a"
        tries = []

        def full_disk() -> None:
            tries.append(time.monotonic())
            raise OSError(28, "No space left on device")

        s.workers[resident].model.evict = full_disk
        status, body, hdrs = _call(s, f"/v2/models/{other}/infer", _request(np.zeros((1, 784), np.float32)))
        assert status == 503 and f"evicting {resident!r} failed" in body["error"] and "No space left" in body["error"]
        assert "retry-after" in {k.lower() for k in hdrs}
        assert 1 <= len(tries) <= 3, tries   # 1 s, then 2 s between tries: not thousands a second
        status, ready, _ = _call(s, f"/v2/models/{resident}/ready")
        assert status == 200 and ready["ready"] and "No space left" in ready["eviction_error"]
        assert ready["eviction_failures"] == len(tries)
        assert _metric(s, f'pyd4j_serve_eviction_failing{{model="{resident}"}}') == 1.0
        assert _metric(s, f'pyd4j_serve_eviction_failures_total{{model="{resident}"}}') == len(tries)
    finally:
        s.stop()


def test_a_max_batch_no_budget_holds_is_refused_naming_the_option(jvm):
    from pyd4j.serve import ModelLoadError, ModelServer

    s = ModelServer({"mlp": f"{NETWORKS}/mlp.json"}, port=0, max_batch=2**31 - 1, slice_rows="whole")
    with pytest.raises(ModelLoadError) as err:
        s.start()
    text = str(err.value)
    assert "--max-batch 2147483647" in text and f"{(784 + 10) * 4} bytes a row" in text and "lower --max-batch" in text
    assert "no model loaded" in text and s._http_thread is None


def test_a_server_whose_models_all_fail_does_not_start(jvm, tmp_path):
    from pyd4j.serve import ModelLoadError, ModelServer

    (tmp_path / "broken.json").write_text('{"confs": 3}')
    s = ModelServer({"x": tmp_path / "broken.json", "y": tmp_path / "missing.json"}, port=0)
    with pytest.raises(ModelLoadError, match="no model loaded.*'x'.*confs.*'y'.*missing.json"):
        s.start()
    assert s._http_thread is None and all(w.state == "failed" for w in s.workers.values())
