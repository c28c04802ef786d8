"""pyd4j serve end to end: real DL4J networks in the in-process JVM, a real server on 127.0.0.1, and
tritonclient (Triton's own HTTP client) as the client. Outputs are checked against net.output()
computed in-process by the test on its own copy of each network.

One server for the module: a ModelSerializer zip the test writes (mlp), an example configuration
JSON initialised from its seed (lenet), a model larger than the budget, and a file that is not a
model. The budget holds lenet or mlp, not both.
"""

from __future__ import annotations

import json
import shutil
import threading
import urllib.error
import urllib.request

import numpy as np
import pytest

pytestmark = pytest.mark.jvm

http = pytest.importorskip("tritonclient.http")

NETWORKS = "examples/networks"
BUDGET = 7 * 1024**2  # lenet ~6.8 MB resident at batch 32, mlp ~2.4 MB: one of the two
MAX_BODY = 1024**2


def _net(jvm, path):
    from org.deeplearning4j.nn.conf import MultiLayerConfiguration
    from org.deeplearning4j.nn.multilayer import MultiLayerNetwork

    net = MultiLayerNetwork(MultiLayerConfiguration.fromJson(open(path).read()))
    net.init()
    return net


def _output(net, x):
    import pyd4j.nd as nd

    return nd.to_numpy(net.output(nd.from_numpy(np.ascontiguousarray(x))), copy=True)


@pytest.fixture(scope="module")
def models(jvm, tmp_path_factory):
    """The test's own networks and the files the server reads."""
    from org.deeplearning4j.util import ModelSerializer

    d = tmp_path_factory.mktemp("serve-models")
    mlp = _net(jvm, f"{NETWORKS}/mlp.json")
    ModelSerializer.writeModel(mlp, str(d / "mlp.zip"), False)
    shutil.copy(f"{NETWORKS}/lenet.json", d / "lenet.json")
    shutil.copy(f"{NETWORKS}/lenet.input.json", d / "lenet.input.json")
    doc = json.load(open(f"{NETWORKS}/mlp.json"))  # mlp with a 4096-unit first layer: ~13 MB of parameters
    doc["confs"][0]["layer"]["nout"] = 4096
    doc["confs"][1]["layer"]["nin"] = 4096
    (d / "big.json").write_text(json.dumps(doc))
    shutil.copy(f"{NETWORKS}/mlp.input.json", d / "big.input.json")
    (d / "broken.json").write_text("{\"confs\": 3}")
    return {"dir": d, "mlp": mlp, "lenet": _net(jvm, f"{NETWORKS}/lenet.json")}


@pytest.fixture(scope="module")
def server(models):
    from pyd4j.serve import ModelServer

    d = models["dir"]
    s = ModelServer({"mlp": d / "mlp.zip", "lenet": d / "lenet.json", "big": d / "big.json", "broken": d / "broken.json"},
                    budget=BUDGET, port=0, max_batch=32, max_wait_ms=5, max_body_bytes=MAX_BODY,
                    slice_rows="whole")  # the footprints the budget is sized by do not depend on timings
    s.start()
    yield s
    s.stop()


@pytest.fixture
def client(server):
    c = http.InferenceServerClient(server.url[len("http://"):], concurrency=4)
    yield c
    c.close()


def _infer(client, name, x, binary=True):
    inp = http.InferInput("input", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=binary)
    out = http.InferRequestedOutput("output", binary_data=binary)
    return client.infer(name, [inp], outputs=[out]).as_numpy("output")


def _post(server, path, body: bytes, headers=None) -> tuple[int, dict, dict]:
    req = urllib.request.Request(server.url + path, data=body, method="POST",
                                 headers={"content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), json.loads(err.read())


def _post_oversized(server, path, size: int) -> tuple[int, dict]:
    """POST a body of `size` bytes the way a client does when the server answers 413 before reading
    it all: the server may close while the body is still being sent (EPIPE); the answer is read anyway."""
    import http.client  # noqa: PLC0415
    import socket  # noqa: PLC0415
    from urllib.parse import urlsplit  # noqa: PLC0415

    url = urlsplit(server.url)
    sock = socket.create_connection((url.hostname, url.port), timeout=30)
    try:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: {url.hostname}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {size}\r\nConnection: close\r\n\r\n".encode())
        try:
            chunk = b"0" * 65536
            for start in range(0, size, len(chunk)):
                sock.sendall(chunk[: min(len(chunk), size - start)])
        except (BrokenPipeError, ConnectionResetError):
            pass   # the server has answered and closed: read what it said
        response = http.client.HTTPResponse(sock)
        response.begin()
        return response.status, json.loads(response.read())
    finally:
        sock.close()


def _get(server, path) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(server.url + path) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_listens_on_loopback_and_speaks_the_protocol(server, client):
    assert server.url.startswith("http://127.0.0.1:")
    assert client.is_server_live()
    assert client.is_model_ready("mlp") and client.is_model_ready("lenet")
    meta = client.get_model_metadata("lenet")
    assert meta["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 784]}]
    assert meta["outputs"] == [{"name": "output", "datatype": "FP32", "shape": [-1, 10]}]
    fp = meta["parameters"]
    assert fp["footprint_params_bytes"] == int(server.model("lenet").net.params().length()) * 4 \
        if server.model("lenet").resident else fp["footprint_params_bytes"] > 0
    assert fp["footprint_total_bytes"] <= BUDGET and fp["footprint_estimate_bytes"] > 0


def test_responses_are_not_held_back_by_nagles_algorithm(server):
    """The listening socket (whose options accepted connections inherit) sends at once: without
    TCP_NODELAY each response waited for the client's delayed ACK, 44 ms per request on loopback
    (benchmarks/serving.py, `server_overhead`)."""
    import socket

    assert server._socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    # and the server answers a raw request on a connection it accepted from that socket
    with socket.create_connection(("127.0.0.1", server.port)) as conn:
        conn.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        assert conn.recv(64).startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize("binary", [True, False])
def test_outputs_equal_net_output_in_process(models, client, binary):
    rng = np.random.default_rng(1)
    for name, rows in (("mlp", 5), ("lenet", 3), ("mlp", 1)):
        x = rng.random((rows, 784), dtype=np.float32)
        np.testing.assert_allclose(_infer(client, name, x, binary), _output(models[name], x), rtol=1e-5, atol=1e-6)


def test_concurrent_requests_each_get_their_own_rows(models, server):
    """Dynamic batching concatenates requests; each must get back exactly its rows."""
    rng = np.random.default_rng(2)
    xs = [rng.random((1 + i % 3, 784), dtype=np.float32) for i in range(12)]
    got: dict[int, np.ndarray] = {}

    def one(i):
        c = http.InferenceServerClient(server.url[len("http://"):])
        got[i] = _infer(c, "mlp", xs[i])
        c.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for i, x in enumerate(xs):
        np.testing.assert_allclose(got[i], _output(models["mlp"], x), rtol=1e-5, atol=1e-6)


def test_eviction_and_restore_under_budget_give_identical_outputs(server, client):
    x = np.random.default_rng(3).random((4, 784), dtype=np.float32)
    before = {n: _infer(client, n, x) for n in ("mlp", "lenet")}
    ev0 = {n: server.budget.entry(n).evictions for n in ("mlp", "lenet")}
    after = {n: _infer(client, n, x) for n in ("mlp", "lenet", "mlp")}
    st = server.status()
    assert st["models"]["lenet"]["evictions"] > ev0["lenet"]   # mlp's restore pushed lenet out
    assert st["models"]["mlp"]["restores"] >= 1 and st["models"]["mlp"]["last_restore_seconds"] > 0
    assert st["peak_resident_bytes"] <= BUDGET and st["resident_bytes"] <= BUDGET
    for n in ("mlp", "lenet"):
        np.testing.assert_array_equal(after[n], before[n])   # bit-identical after the disk tier
    meta = client.get_model_metadata("mlp")["parameters"]
    assert meta["restores"] >= 1 and meta["last_restore_seconds"] > 0


def test_failed_and_oversized_models_are_reported_and_the_others_serve(server, client):
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert index["mlp"]["state"] == "READY"
    assert index["big"]["state"] == "UNAVAILABLE"
    reason = index["big"]["reason"]
    # refused from its configuration, before DL4J allocated its parameters
    assert f"the budget of {BUDGET} bytes" in reason and "refused before DL4J allocates them" in reason
    needed = int(reason.split("parameters alone take ")[1].split(" bytes")[0])
    assert needed == (784 * 4096 + 4096 + 4096 * 256 + 256 + 256 * 10 + 10) * 4   # mlp.json's layers, 4096 wide
    assert index["broken"]["state"] == "UNAVAILABLE" and "broken.json" in index["broken"]["reason"]
    assert not client.is_model_ready("big") and not client.is_server_ready()
    status, body = _get(server, "/v2/models/broken/ready")
    assert status == 503 and "confs" in body["error"]
    assert _infer(client, "mlp", np.zeros((1, 784), np.float32)).shape == (1, 10)


def test_bad_input_statuses_and_the_server_keeps_serving(server, client):
    good = {"name": "input", "shape": [1, 784], "datatype": "FP32", "data": [0.0] * 784}
    status, _, body = _post(server, "/v2/models/nope/infer", json.dumps({"inputs": [good]}).encode())
    assert status == 404 and "'nope'" in body["error"] and "mlp" in body["error"]
    status, _, body = _post(server, "/v2/models/mlp/infer", json.dumps({"inputs": [dict(good, shape=[1, 28, 28])]}).encode())
    assert status == 400 and "'input'" in body["error"] and "[-1, 784]" in body["error"]
    status, _, body = _post(server, "/v2/models/mlp/infer", json.dumps({"inputs": [dict(good, datatype="INT32")]}).encode())
    assert status == 400 and "INT32" in body["error"] and "FP32" in body["error"]
    status, _, body = _post(server, "/v2/models/mlp/infer", b"{\"inputs\": [")
    assert status == 400 and "not JSON" in body["error"]
    status, body = _post_oversized(server, "/v2/models/mlp/infer", MAX_BODY + 1)
    assert status == 413 and str(MAX_BODY) in body["error"]
    status, _, body = _post(server, "/v2/models/big/infer", json.dumps({"inputs": [good]}).encode())
    assert status == 503 and "budget" in body["error"]
    status, _, body = _post(server, "/v2/models/mlp/infer", json.dumps({"inputs": [good]}).encode())
    assert status == 200 and body["outputs"][0]["shape"] == [1, 10] and len(body["outputs"][0]["data"]) == 10


def test_metrics_parse_and_count_what_happened(server, client):
    from prometheus_client.parser import text_string_to_metric_families

    n = 3
    before = server.metrics.requests.labels("lenet", "200")._value.get()
    for _ in range(n):
        _infer(client, "lenet", np.zeros((2, 784), np.float32))
    text = urllib.request.urlopen(server.url + "/metrics").read().decode()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in fams.values() for s in f.samples}
    assert samples[("pyd4j_serve_requests_total", (("model", "lenet"), ("status", "200")))] == before + n
    assert samples[("pyd4j_serve_request_seconds_count", (("model", "lenet"),))] == before + n
    st = server.status()["models"]
    for name in ("mlp", "lenet"):
        assert samples[("pyd4j_serve_evictions_total", (("model", name),))] == st[name]["evictions"]
        assert samples[("pyd4j_serve_restores_total", (("model", name),))] == st[name]["restores"]
        assert samples[("pyd4j_serve_footprint_bytes", (("kind", "total"), ("model", name)))] == \
            st[name]["footprint"]["total_bytes"]
    assert samples[("pyd4j_serve_resident_bytes", (("model", "lenet"),))] == st["lenet"]["footprint"]["total_bytes"]
    assert samples[("pyd4j_serve_budget_bytes", ())] == BUDGET
    assert samples[("pyd4j_serve_load_failures_total", (("model", "big"),))] == 1
    assert any(k[0] == "pyd4j_serve_requests_total" and dict(k[1]).get("status") == "400" for k in samples)


def test_fake_queue_full_is_429_signal(server):
    """The queue bound itself, on a worker that is not started (a stand-in: no thread takes requests)."""
    from pyd4j.serve.worker import ModelBusyError, ModelWorker, Pending

    w = ModelWorker(server.model("mlp"), server.budget, server.metrics, max_batch=4, max_wait_s=0, queue_size=2)
    p = Pending([np.zeros((1, 784), np.float32)], 1, 0.0, None, None)
    w.submit(p)
    w.submit(p)
    with pytest.raises(ModelBusyError):
        w.submit(p)
    assert w.queued() == 2


def test_fake_full_queue_answers_429_with_retry_after(server, monkeypatch):
    """The HTTP side of backpressure: mlp's worker stubbed to report a full queue (a stand-in)."""
    from pyd4j.serve.worker import ModelBusyError

    def full(p):
        raise ModelBusyError(64)

    monkeypatch.setattr(server.workers["mlp"], "submit", full)
    good = {"name": "input", "shape": [1, 784], "datatype": "FP32", "data": [0.0] * 784}
    status, headers, body = _post(server, "/v2/models/mlp/infer", json.dumps({"inputs": [good]}).encode())
    assert status == 429 and headers.get("retry-after") == "1" and "queue" in body["error"]


def test_eviction_releases_parameters_and_workspaces_at_once(models, jvm, tmp_path):
    """Loaded and restored networks alike: eviction closes the parameter buffer (no wait for Java's
    GC) and leaves this thread no workspaces; outputs after restore are bit-identical."""
    from org.nd4j.linalg.factory import Nd4j

    from pyd4j.serve.model import ServedModel

    m = ServedModel("lenet", models["dir"] / "lenet.json", tmp_path)
    m.load(4, "whole")
    x = [np.random.default_rng(4).random((2, 784), dtype=np.float32)]
    want = _output(models["lenet"], x[0])
    for _ in range(2):  # once as loaded, once as restored (params() is then a view of restore's array)
        np.testing.assert_array_equal(m.infer(x)[0], want)
        params = m.net.params()
        m.evict()
        assert params.wasClosed() and not m.resident
        assert Nd4j.getWorkspaceManager().getAllWorkspacesForCurrentThread().size() == 0
        assert m.restore() > 0
    np.testing.assert_array_equal(m.infer(x)[0], want)
    m.close()


@pytest.mark.parametrize("entries, words", [
    ({"a.txt": "x"}, ["configuration.json", "ModelSerializer.writeModel"]),
    ({"configuration.json": "{bad", "coefficients.bin": ""}, ["configuration.json", "not valid JSON"]),
    ({"configuration.json": open(f"{NETWORKS}/mlp.json").read()}, ["coefficients.bin", "parameters"]),
])
def test_a_zip_modelserializer_did_not_write_is_refused_naming_what_it_lacks(jvm, tmp_path, entries, words):
    import zipfile

    from pyd4j.serve.model import ModelLoadError, ServedModel

    path = tmp_path / "m.zip"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in entries.items():
            z.writestr(name, text)
    with pytest.raises(ModelLoadError) as err:
        ServedModel("m", path, tmp_path).load(4, "whole")
    for w in words:
        assert w in str(err.value)
