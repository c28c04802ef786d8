"""`ModelServer`: several DL4J models in one JVM under a memory budget, over the Open Inference Protocol v2.

    from pyd4j.serve import ModelServer
    with ModelServer({"mlp": "examples/networks/mlp.json"}, budget="256m", port=8000) as server:
        print(server.url)          # http://127.0.0.1:8000 ; tritonclient/KServe clients work against it

The HTTP side is Starlette on uvicorn (loopback unless another host is given); each model has a
worker thread (pyd4j.serve.worker) and the budget (pyd4j.serve.budget) keeps the resident sum
under the limit by evicting idle models to the disk tier.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import os
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from pyd4j import __version__
from pyd4j.dl4j.input_types import parse_input_spec
from pyd4j.inputs import InputError, finite, model_name, positive_int
from pyd4j.serve.budget import Budget, NoRoomError
from pyd4j.serve.metrics import Metrics
from pyd4j.serve.model import ModelLoadError, ServedModel, parse_model_arg
from pyd4j.serve.openapi import openapi_document
from pyd4j.serve.protocol import HEADER_LENGTH, ProtocolError, infer_response, parse_infer_request
from pyd4j.serve.worker import ModelBusyError, ModelWorker, Pending

log = logging.getLogger("pyd4j.serve")

DEFAULT_MAX_BODY = 64 * 1024**2


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (no such route, a method the route does not take) as JSON too."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    what = {404: f"no endpoint {request.url.path!r}; this server speaks the Open Inference Protocol v2 under /v2 "
                 f"(its OpenAPI description: /openapi.json)",
            405: f"{request.url.path!r} does not take {request.method}"}.get(status, getattr(exc, "detail", str(exc)))
    return _error(status, what, getattr(exc, "headers", None))


def _model_endpoint(ready: bool = True):
    """A handler of /v2/models/{name}/...: it gets the model's worker; an unknown model or version, or
    (with `ready`) a model that is not ready, is answered with the error the lookup names."""
    def wrap(handler):
        @functools.wraps(handler)
        async def route(self: "ModelServer", request: Request) -> Response:
            try:
                w = self._worker(request, ready=ready)
            except ProtocolError as err:
                return _error(err.status, str(err), err.headers)
            return await handler(self, w)
        return route
    return wrap


class ModelServer:
    """Serve DL4J models (name -> ModelSerializer zip or configuration JSON) under `budget` bytes."""

    def __init__(self, models: dict[str, str | Path] | list[str], budget: int | str | None = None, *,
                 host: str = "127.0.0.1", port: int = 8000, max_batch: int = 32, max_wait_ms: float = 2.0,
                 queue_size: int = 64, timeout_s: float = 30.0, max_body_bytes: int = DEFAULT_MAX_BODY,
                 spill_dir: str | Path | None = None, inputs: dict[str, str] | None = None,
                 restore_from: str = "disk", idle_before_evict_s: float = 0.0,
                 slice_rows: int | str = "auto") -> None:
        """idle_before_evict_s: a model that served a request less than this long ago is not evicted; a
        request for another model that needs its room waits, and past --timeout gets 503 with Retry-After.
        restore_from="zip" reloads an evicted zip model from its file instead of the disk tier: the
        load-on-demand baseline benchmarks/serving.py compares against. slice_rows: rows one output() call
        runs, which sizes DL4J's inference workspaces: "auto" measures the fewest that keep the speed of
        a max_batch call (pyd4j.serve.sizing), "whole" runs max_batch rows in one call, a number fixes it."""
        from pyd4j.units import parse_bytes  # noqa: PLC0415

        if isinstance(models, dict) and all(isinstance(p, (str, Path)) for p in models.values()):
            pairs = [(model_name(n), Path(p)) for n, p in models.items()]
        elif isinstance(models, (list, tuple)) and all(isinstance(m, str) for m in models):
            pairs = [parse_model_arg(m) for m in models]
        else:
            raise InputError(f"models {models!r}: give a dict of name -> path ({{'mlp': 'mlp.json'}}) or a list of "
                             f"'NAME=PATH' strings")
        names = [n for n, _ in pairs]
        if not pairs:
            raise InputError("no model to serve: give at least one --model NAME=PATH")
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise InputError(f"model names {dupes} are given more than once; give each model its own name")
        positive_int(max_batch, "max batch")
        positive_int(queue_size, "queue size")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise InputError(f"port {port!r} must be a whole number from 0 to 65535 (0 picks a free one)")
        if not isinstance(host, str) or not host:
            raise InputError(f"host {host!r}: give an address to listen on, e.g. 127.0.0.1 (loopback, the default)")
        if slice_rows not in ("auto", "whole") and not (isinstance(slice_rows, int) and not isinstance(slice_rows, bool)
                                                        and 1 <= slice_rows <= max_batch):
            raise InputError(f"slice rows {slice_rows!r}: give 'auto' (measured at load), 'whole' (max batch "
                             f"{max_batch} rows a call) or a whole number of rows from 1 to the max batch {max_batch}")
        if finite(idle_before_evict_s, "idle time before eviction (s)") < 0:
            raise InputError(f"idle time before eviction {idle_before_evict_s!r} s must be >= 0 (0: evict the least "
                             f"recently used model at once)")
        if finite(max_wait_ms, "max wait (ms)") < 0:
            raise InputError(f"max wait {max_wait_ms!r} ms must be >= 0")
        if finite(timeout_s, "timeout (s)") <= 0:
            raise InputError(f"timeout {timeout_s!r} s must be more than 0")
        positive_int(max_body_bytes, "max body (bytes)", limit=2**62)
        self.limit = parse_bytes(budget, "--budget") if budget is not None else None
        if self.limit == 0:
            raise InputError("--budget 0 holds no model; give a size such as '512m', or leave it out for no limit")
        self.pairs = pairs
        self.host, self.port = host, port
        self.max_batch, self.max_wait_s, self.queue_size = max_batch, max_wait_ms / 1000.0, queue_size
        self.slice_rows = slice_rows
        self.timeout_s, self.max_body = timeout_s, max_body_bytes
        self.inputs = _checked_inputs(inputs, names)
        if restore_from not in ("disk", "zip"):
            raise InputError(f"restore_from {restore_from!r}: use 'disk' (the disk tier) or 'zip'")
        self.restore_from = restore_from
        self.spill_dir = _checked_spill_dir(spill_dir)
        self.metrics = Metrics()
        self.metrics.budget_bytes.set(self.limit or 0)
        self.idle_before_evict_s = idle_before_evict_s
        self.budget = Budget(self.limit, self._request_eviction, idle_before_evict_s)
        self.workers: dict[str, ModelWorker] = {}
        self._uvicorn: Any = None
        self._http_thread: threading.Thread | None = None
        self._socket: socket.socket | None = None

    # ----------------------------------------------------------------- lifecycle

    def load(self) -> "ModelServer":
        """Start the JVM and load every model, one after another (a failure is reported, the others
        load); ModelLoadError naming every failure when none loads: a server of no model serves nothing."""
        from pyd4j.dl4j.config import start_jvm  # noqa: PLC0415

        self._bind(check_only=True)
        start_jvm()
        for name, path in self.pairs:
            model = ServedModel(name, path, self.spill_dir, self.inputs.get(name), self.restore_from, self.limit)
            w = ModelWorker(model, self.budget, self.metrics, self.max_batch, self.max_wait_s, self.queue_size,
                            self.slice_rows)
            self.workers[name] = w
            w.start()
            w.loaded.wait()
        if not any(w.state == "ready" for w in self.workers.values()):
            errors = [w.error or f"model {n!r}: {w.state}" for n, w in self.workers.items()]
            self.stop()
            raise ModelLoadError("no model loaded, so there is nothing to serve: " + "; ".join(errors))
        return self

    def _request_eviction(self, name: str) -> None:
        self.workers[name].request_eviction()

    def _bind(self, check_only: bool = False) -> socket.socket | None:
        """The listening socket; check_only: bind and close, so a bad --host or a port in use is
        heard before any model loads."""
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # accepted connections inherit it: without it a response written in two sends waits for the
        # client's delayed ACK (Nagle's algorithm), 44 ms per request on loopback, measured
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as err:
            sock.close()
            fix = "give an address of this machine with --host (127.0.0.1, the default, is loopback)" \
                if isinstance(err, socket.gaierror) or err.errno == errno.EADDRNOTAVAIL else \
                "pick another --port (0 picks a free one)"
            raise InputError(f"cannot listen on {self.host}:{self.port}: {err.strerror}; {fix}") from None
        if check_only:
            sock.close()
            return None
        sock.listen(1024)
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        return sock

    def _server(self):
        import uvicorn  # noqa: PLC0415

        config = uvicorn.Config(self.app(), log_level="warning", access_log=False, lifespan="off",
                                timeout_keep_alive=30)
        return uvicorn.Server(config)

    def start(self) -> "ModelServer":
        """Load the models and serve HTTP from a background thread; returns once listening."""
        if not self.workers:
            self.load()
        self._socket = self._bind()
        self._uvicorn = self._server()
        self._http_thread = threading.Thread(target=self._uvicorn.run, kwargs={"sockets": [self._socket]},
                                             name="pyd4j-serve-http", daemon=True)
        self._http_thread.start()
        while not self._uvicorn.started:
            if not self._http_thread.is_alive():
                raise RuntimeError(f"the HTTP server on {self.url} stopped while starting")
            time.sleep(0.01)
        return self

    def serve_forever(self) -> None:
        """Load the models and serve HTTP on this thread until interrupted (Ctrl-C, SIGTERM: also while
        the models load, the workers are stopped before the process exits)."""
        try:
            if not self.workers:
                self.load()
            self._socket = self._bind()
            self._uvicorn = self._server()
            log.warning("serving %d model(s) on %s", sum(w.state == "ready" for w in self.workers.values()), self.url)
            self._uvicorn.run(sockets=[self._socket])
        except KeyboardInterrupt:  # uvicorn shuts down on SIGINT, then raises it again once its handler is gone
            pass
        finally:
            self.stop()

    def stop(self) -> None:
        if self._uvicorn is not None:
            self._uvicorn.should_exit = True
        if self._http_thread is not None:
            self._http_thread.join(timeout=30)
            self._http_thread = None
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        for w in self.workers.values():
            w.stop()
        for w in self.workers.values():
            if w.ident is not None:   # started (a signal may come between creating a worker and starting it)
                w.join(timeout=60)

    def __enter__(self) -> "ModelServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    # ----------------------------------------------------------------- state

    def model(self, name: str) -> ServedModel:
        return self.workers[name].model

    def status(self) -> dict[str, Any]:
        """Every model's state, footprint, evictions and restores, and the budget."""
        models = {}
        for name, w in self.workers.items():
            m = w.model
            doc: dict[str, Any] = {"state": w.state, "error": w.error, "source": m.source, "path": str(m.path)}
            if w.state == "ready":
                e = self.budget.entry(name)
                doc.update(memory_state=e.state, evictions=e.evictions, restores=e.restores,
                           footprint=m.footprint.to_dict() if m.footprint else None,
                           slice_sizing=m.sizing.to_dict() if m.sizing else None,
                           load_seconds=round(m.load_seconds, 4), last_restore_seconds=m.last_restore_seconds)
            models[name] = doc
        return {"budget_bytes": self.limit, "resident_bytes": self.budget.resident_bytes(),
                "peak_resident_bytes": self.budget.peak_resident, "models": models}

    # ----------------------------------------------------------------- HTTP

    def app(self) -> Starlette:
        routes = [
            Route("/v2", self._server_metadata),
            Route("/v2/health/live", self._live),
            Route("/v2/health/ready", self._ready),
            Route("/v2/models/{name}", self._model_metadata),
            Route("/v2/models/{name}/versions/{version}", self._model_metadata),
            Route("/v2/models/{name}/ready", self._model_ready),
            Route("/v2/models/{name}/versions/{version}/ready", self._model_ready),
            Route("/v2/models/{name}/config", self._model_config),
            Route("/v2/models/{name}/versions/{version}/config", self._model_config),
            Route("/v2/models/{name}/infer", self._infer, methods=["POST"]),
            Route("/v2/models/{name}/versions/{version}/infer", self._infer, methods=["POST"]),
            Route("/v2/repository/index", self._repository_index, methods=["POST"]),
            Route("/metrics", self._metrics),
            Route("/openapi.json", self._openapi),
        ]
        return Starlette(routes=routes, exception_handlers={HTTPException: _http_error})

    def _worker(self, request: Request, ready: bool = True) -> ModelWorker:
        name = request.path_params["name"]
        w = self.workers.get(name)
        if w is None:
            raise ProtocolError(404, f"unknown model {name!r}; this server serves {sorted(self.workers)}")
        version = request.path_params.get("version")
        if version not in (None, "", "1"):
            raise ProtocolError(404, f"model {name!r} has no version {version!r}; it has version 1")
        if ready and w.state != "ready":
            raise ProtocolError(503, f"model {name!r} is not available: {w.error or w.state}")
        return w

    async def _server_metadata(self, request: Request) -> Response:
        return JSONResponse({"name": "pyd4j", "version": __version__,
                             "extensions": ["binary_tensor_data", "model_repository"]})

    async def _live(self, request: Request) -> Response:
        return JSONResponse({"live": True})

    async def _ready(self, request: Request) -> Response:
        ready = bool(self.workers) and all(w.state == "ready" for w in self.workers.values())
        return JSONResponse({"ready": ready}, status_code=200 if ready else 503)

    @_model_endpoint()
    async def _model_metadata(self, w: ModelWorker) -> Response:
        m = w.model
        e = self.budget.entry(m.name)
        params = {"kind": m.kind, "source": m.source, "memory_state": e.state, "evictions": e.evictions,
                  "restores": e.restores, "load_seconds": round(m.load_seconds, 4),
                  "last_restore_seconds": m.last_restore_seconds, "max_batch": self.max_batch,
                  **{f"footprint_{k}": v for k, v in m.footprint.to_dict().items()}}
        return JSONResponse({"name": m.name, "versions": ["1"], "platform": f"dl4j_{m.kind.lower()}",
                             "inputs": [s.to_dict() for s in m.inputs], "outputs": [s.to_dict() for s in m.outputs],
                             "parameters": params})

    @_model_endpoint(ready=False)
    async def _model_ready(self, w: ModelWorker) -> Response:
        """Ready or not; a model whose last eviction failed is ready (it serves, resident) and says why
        it holds its room: `eviction_error`, `eviction_failures` (in a row)."""
        ready = w.state == "ready"
        doc: dict[str, Any] = {"name": w.model.name, "ready": ready, **({} if ready else {"error": w.error or w.state})}
        if ready:
            e = self.budget.entry(w.model.name)
            if e.eviction_error:
                doc.update(eviction_error=e.eviction_error, eviction_failures=e.eviction_failures)
        return JSONResponse(doc, status_code=200 if ready else 503)

    @_model_endpoint()
    async def _model_config(self, w: ModelWorker) -> Response:
        m = w.model

        def dims(s):
            return {"name": s.name, "data_type": f"TYPE_{s.datatype}", "dims": list(s.shape[1:])}
        return JSONResponse({"name": m.name, "platform": f"dl4j_{m.kind.lower()}", "max_batch_size": self.max_batch,
                             "input": [dims(s) for s in m.inputs], "output": [dims(s) for s in m.outputs],
                             "dynamic_batching": {"max_queue_delay_microseconds": int(self.max_wait_s * 1e6)}})

    async def _repository_index(self, request: Request) -> Response:
        out = []
        for name, w in self.workers.items():
            entry = {"name": name, "version": "1", "state": "READY" if w.state == "ready" else "UNAVAILABLE"}
            if w.error:
                entry["reason"] = w.error
            out.append(entry)
        return JSONResponse(out)

    async def _openapi(self, request: Request) -> Response:
        return JSONResponse(openapi_document(self))

    async def _metrics(self, request: Request) -> Response:
        return Response(self.metrics.text(), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def _read_body(self, request: Request) -> bytes:
        declared = request.headers.get("content-length")
        too_big = ProtocolError(413, f"the request body is larger than the server's limit of {self.max_body} bytes "
                                     f"(--max-body); send smaller batches")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body:
            raise too_big
        if request.headers.get("content-encoding", "identity") != "identity":
            raise ProtocolError(400, f"Content-Encoding {request.headers['content-encoding']!r} is not supported; "
                                     f"send the body uncompressed")
        chunks, n = [], 0
        async for chunk in request.stream():
            n += len(chunk)
            if n > self.max_body:
                raise too_big
            chunks.append(chunk)
        return b"".join(chunks)

    async def _infer(self, request: Request) -> Response:
        t0 = time.perf_counter()
        name = request.path_params["name"]
        try:
            w = self._worker(request)
            m = w.model
            body = await self._read_body(request)
            req = parse_infer_request(body, request.headers.get(HEADER_LENGTH), m.inputs, m.outputs, self.max_batch)
            loop = asyncio.get_running_loop()
            fut = loop.create_future()
            try:
                w.submit(Pending(req.inputs, req.rows, time.monotonic() + self.timeout_s, loop, fut))
            except ModelBusyError:
                raise ProtocolError(429, f"model {name!r} has {self.queue_size} requests queued (--queue-size); retry later",
                                    {"Retry-After": "1"}) from None
            try:  # the worker answers at the deadline (queue, room); the second more is for a batch still running
                outs = await asyncio.wait_for(fut, self.timeout_s + 1.0)
            except NoRoomError as err:
                raise ProtocolError(503, f"model {name!r}: {err}", {"Retry-After": str(err.retry_after)}) from None
            except (TimeoutError, asyncio.TimeoutError):
                raise ProtocolError(504, f"model {name!r} did not answer within {self.timeout_s} s (--timeout)") from None
            except Exception as err:  # noqa: BLE001  (the model failed on this batch; the server serves on)
                raise ProtocolError(500, f"model {name!r} failed: {err}") from None
            content, headers = infer_response(name, req, m.outputs, outs)
            response = Response(content, headers=headers)
        except ProtocolError as err:
            response = _error(err.status, str(err), err.headers)
        except ClientDisconnect:  # the client went while sending its body: nobody reads an answer
            log.debug("model %s: the client disconnected before its request was read", name)
            response = _error(400, "the client disconnected before its request body was read")
        if name in self.workers:
            self.metrics.request(name, response.status_code, time.perf_counter() - t0)
        return response


def _checked_inputs(inputs: Any, names: list[str]) -> dict[str, str]:
    """`inputs`: a dict of served model name -> input type spec (e.g. 'ff:784')."""
    if inputs is None:
        return {}
    if not isinstance(inputs, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in inputs.items()):
        raise InputError(f"inputs {inputs!r}: give a dict of model name -> input type, e.g. {{'mlp': 'ff:784'}}")
    unknown = sorted(set(inputs) - set(names))
    if unknown:
        raise InputError(f"input types (--input) for {unknown}, which are not served models ({names}): an input type is for a "
                         f"model given with --model NAME=PATH; fix the name or leave it out")
    for name, spec in inputs.items():
        try:
            parse_input_spec(spec)
        except InputError as err:
            raise InputError(f"--input {name}={spec}: {err}") from None
    return dict(inputs)


def _checked_spill_dir(spill_dir: Any) -> Path:
    """Where evicted models' parameters go (files without names, gone when the server ends): an existing
    directory this user can write, the temp directory by default."""
    if spill_dir is not None and not isinstance(spill_dir, (str, Path)):
        raise InputError(f"spill_dir {spill_dir!r}: give a directory path, or None for the temp directory")
    d = Path(spill_dir) if spill_dir is not None else Path(tempfile.gettempdir())
    if not d.is_dir() or not os.access(d, os.W_OK | os.X_OK):
        raise InputError(f"spill_dir {str(d)!r} is not a directory this user can write; give one that is (the disk "
                         f"tier writes evicted models' parameters there)")
    return d
