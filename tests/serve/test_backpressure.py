"""Backpressure and the idle time before eviction on a real server: real DL4J networks, real
concurrent HTTP requests, nothing stubbed. The budget holds one of two models; a model used
within --idle-before-evict holds its room, so requests for the other wait in its queue (filling it)
or, past --timeout, get 503 naming the budget and the model."""

from __future__ import annotations

import json
import shutil
import threading
import urllib.error
import urllib.request

import numpy as np
import pytest

pytestmark = pytest.mark.jvm

NETWORKS = "examples/networks"
BUDGET = 7 * 1024**2  # lenet ~6.8 MB resident at batch 32, mlp ~2.4 MB: one of the two


@pytest.fixture(scope="module")
def files(jvm, tmp_path_factory):
    d = tmp_path_factory.mktemp("serve-backpressure")
    for name in ("mlp", "lenet"):
        shutil.copy(f"{NETWORKS}/{name}.json", d / f"{name}.json")
        shutil.copy(f"{NETWORKS}/{name}.input.json", d / f"{name}.input.json")
    return d


def _server(files, **kw):
    from pyd4j.serve import ModelServer

    return ModelServer({"mlp": files / "mlp.json", "lenet": files / "lenet.json"}, budget=BUDGET, port=0,
                       max_batch=32, max_wait_ms=5, slice_rows="whole", **kw)  # footprints not timing-dependent


def _post(url: str, name: str, x: np.ndarray) -> tuple[int, dict, dict]:
    body = json.dumps({"inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32",
                                   "data": x.ravel().tolist()}]}).encode()
    req = urllib.request.Request(f"{url}/v2/models/{name}/infer", data=body, method="POST",
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), json.loads(err.read())


def _reference(files, name, x):
    """The network's output computed here, on its own copy (same configuration and seed)."""
    from org.deeplearning4j.nn.conf import MultiLayerConfiguration
    from org.deeplearning4j.nn.multilayer import MultiLayerNetwork

    import pyd4j.nd as nd

    net = MultiLayerNetwork(MultiLayerConfiguration.fromJson((files / f"{name}.json").read_text()))
    net.init()
    return nd.to_numpy(net.output(nd.from_numpy(np.ascontiguousarray(x))), copy=True)


def test_model_inside_its_idle_time_is_kept_and_the_other_gets_503_naming_it(files):
    x = np.zeros((1, 784), np.float32)
    with _server(files, idle_before_evict_s=600, timeout_s=2) as server:
        assert _post(server.url, "mlp", x)[0] == 200            # mlp used now: kept for 600 s
        evictions = server.status()["models"]["mlp"]["evictions"]
        status, headers, body = _post(server.url, "lenet", x)   # lenet needs mlp's room
        assert status == 503
        assert 500 <= int(headers["retry-after"]) <= 600
        msg = body["error"]
        assert "'lenet'" in msg and "'mlp'" in msg and f"budget of {BUDGET} bytes" in msg and "--idle-before-evict" in msg
        st = server.status()
        assert st["models"]["mlp"]["memory_state"] == "resident" and st["models"]["mlp"]["evictions"] == evictions
        assert _post(server.url, "mlp", x)[0] == 200            # and the server serves on


def test_full_queue_answers_429_with_retry_after_and_the_rest_are_served(files):
    """lenet's worker waits for room while mlp is inside its idle time (3 s): the 2-deep queue fills
    with real requests; the others get 429 at once; once mlp may go, every queued request is served."""
    rng = np.random.default_rng(5)
    xs = [rng.random((1, 784), dtype=np.float32) for _ in range(16)]
    results: dict[int, tuple[int, dict, dict]] = {}
    with _server(files, idle_before_evict_s=3, queue_size=2, timeout_s=120) as server:
        assert _post(server.url, "mlp", xs[0])[0] == 200

        def one(i):
            results[i] = _post(server.url, "lenet", xs[i])

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(xs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        statuses = sorted(r[0] for r in results.values())
        assert set(statuses) == {200, 429}, statuses
        busy = [r for r in results.values() if r[0] == 429]
        assert all(r[1].get("retry-after") == "1" and "queue" in r[2]["error"] for r in busy)
        want = _reference(files, "lenet", np.concatenate(xs))
        for i, (status, _, body) in results.items():
            if status == 200:
                got = np.asarray(body["outputs"][0]["data"], np.float32).reshape(1, 10)
                np.testing.assert_allclose(got, want[i:i + 1], rtol=1e-5, atol=1e-6)
        st = server.status()["models"]
        assert st["mlp"]["evictions"] >= 1                      # mlp went once its idle time had passed
        assert _post(server.url, "mlp", xs[0])[0] == 200 and _post(server.url, "lenet", xs[1])[0] == 200
