"""The server's OpenAPI 3.1 description (GET /openapi.json): the Open Inference Protocol v2 endpoints
it serves, their request and response shapes, and every status each can answer.

The inference request and response schemas are the pydantic models the server validates requests
with (pyd4j.serve.protocol), so the description and the checks cannot drift apart; the path's
model name lists the models this server serves, and each model's infer operation has an example
request of one row. tests/serve/test_fuzz.py and benchmarks/serve_fuzz.py fuzz a running server from
this document with schemathesis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict
from pydantic.json_schema import models_json_schema

from pyd4j import __version__
from pyd4j.serve.protocol import HEADER_LENGTH, ErrorResponse, InferenceRequest, InferenceResponse

if TYPE_CHECKING:
    from pyd4j.serve.server import ModelServer


class _Doc(BaseModel):
    model_config = ConfigDict(extra="allow")


class ServerMetadata(_Doc):
    name: str
    version: str
    extensions: list[str]


class Live(_Doc):
    live: bool


class Ready(_Doc):
    ready: bool


class ModelReady(_Doc):
    """A model's readiness; a ready model whose last eviction failed says so (it holds its room)."""

    name: str
    ready: bool
    error: str | None = None
    eviction_error: str | None = None
    eviction_failures: int | None = None


class TensorMetadata(_Doc):
    name: str
    datatype: str
    shape: list[int]


class ModelMetadata(_Doc):
    name: str
    versions: list[str]
    platform: str
    inputs: list[TensorMetadata]
    outputs: list[TensorMetadata]
    parameters: dict[str, Any]


class ModelConfig(_Doc):
    """Triton's model configuration extension, as far as a DL4J network has one."""

    name: str
    platform: str
    max_batch_size: int
    input: list[dict[str, Any]]
    output: list[dict[str, Any]]


class RepositoryEntry(_Doc):
    name: str
    version: str
    state: str
    reason: str | None = None


_MODELS = (ErrorResponse, InferenceRequest, InferenceResponse, ServerMetadata, Live, Ready, ModelReady,
           ModelMetadata, ModelConfig, RepositoryEntry)


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _json(model: type[BaseModel] | dict[str, Any], what: str) -> dict[str, Any]:
    schema = model if isinstance(model, dict) else _ref(model)
    return {"description": what, "content": {"application/json": {"schema": schema}}}


def _errors(*statuses: int) -> dict[str, Any]:
    words = {400: "a request the model cannot take (the message names the tensor and what it expects)",
             404: "no such model or version", 405: "a method this path does not take",
             413: "a body larger than --max-body", 429: "the model's queue is full (Retry-After)",
             500: "the model failed on this batch", 503: "the model is not ready, or no room in the budget "
                                                         "within --timeout (Retry-After)",
             504: "no answer within --timeout"}
    return {str(s): _json(ErrorResponse, words[s]) for s in statuses}


def _get(summary: str, ok: dict[str, Any], *errors: int, params: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "responses": {"200": ok, **_errors(*errors)}}
    if params:
        op["parameters"] = params
    return {"get": op}


def openapi_document(server: "ModelServer") -> dict[str, Any]:
    """The OpenAPI document of `server` (its model names and max batch in it)."""
    names = sorted(server.workers) or sorted(n for n, _ in server.pairs)
    name = {"name": "name", "in": "path", "required": True, "description": "a model this server serves",
            "schema": {"type": "string", "enum": names}}
    version = {"name": "version", "in": "path", "required": True, "description": "the model's version (always 1)",
               "schema": {"type": "string", "enum": ["1"]}}
    header = {"name": HEADER_LENGTH, "in": "header", "required": False,
              "description": "bytes of JSON before binary tensor data (Triton's binary tensor data extension)",
              "schema": {"type": "string", "pattern": "^[0-9]{1,18}$"}}
    _, defs = models_json_schema([(m, "validation") for m in _MODELS], ref_template="#/components/schemas/{model}")
    infer = {"summary": "Run the model on a batch (dynamic batching with other requests)",
             "parameters": None,
             "requestBody": {"required": True, "content": {"application/json": {
                 "schema": _ref(InferenceRequest), "examples": _examples(server)}}},
             "responses": {"200": {"description": "the outputs: JSON, or JSON then binary tensor data when asked for",
                                   "content": {"application/json": {"schema": _ref(InferenceResponse)},
                                               "application/octet-stream": {"schema": {"type": "string",
                                                                                       "format": "binary"}}}},
                           **_errors(400, 404, 413, 429, 500, 503, 504)}}
    ready = {"200": _json(ModelReady, "ready"), "503": _json(ModelReady, "not ready, and why"),
             **_errors(404)}
    paths: dict[str, Any] = {
        "/v2": _get("Server metadata", _json(ServerMetadata, "name, version, extensions")),
        "/v2/health/live": _get("Liveness", _json(Live, "live")),
        "/v2/health/ready": {"get": {"summary": "Readiness: every model ready",
                                     "responses": {"200": _json(Ready, "ready"), "503": _json(Ready, "not ready")}}},
        "/v2/repository/index": {"post": {"summary": "The models and their states (model repository extension)",
                                          "responses": {"200": _json({"type": "array", "items": _ref(RepositoryEntry)},
                                                                     "one entry per model")}}},
        "/metrics": {"get": {"summary": "Prometheus metrics", "responses": {"200": {
            "description": "Prometheus text format", "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
        "/openapi.json": _get("This description", _json({"type": "object"}, "OpenAPI 3.1")),
    }
    for prefix, params in (("/v2/models/{name}", [name]), ("/v2/models/{name}/versions/{version}", [name, version])):
        paths[prefix] = _get("Model metadata", _json(ModelMetadata, "tensors and memory"), 404, 503, params=params)
        paths[f"{prefix}/ready"] = {"get": {"summary": "Model readiness", "parameters": params, "responses": ready}}
        paths[f"{prefix}/config"] = _get("Model configuration", _json(ModelConfig, "Triton-style configuration"),
                                         404, 503, params=params)
        paths[f"{prefix}/infer"] = {"post": {**infer, "parameters": [*params, header]}}
    return {"openapi": "3.1.0",
            "info": {"title": "pyd4j serve: Open Inference Protocol v2", "version": __version__,
                     "description": f"DL4J models under a memory budget; at most {server.max_batch} rows a request."},
            "paths": paths, "components": {"schemas": defs["$defs"]}}


def _examples(server: "ModelServer") -> dict[str, Any]:
    """One request of one row of zeros per ready model, for readers and for the fuzzer's first cases."""
    out = {}
    for n, w in sorted(server.workers.items()):
        if w.state != "ready":
            continue
        inputs = [{"name": s.name, "shape": [1, *s.shape[1:]], "datatype": s.datatype,
                   "data": [0.0] * _count(s.shape[1:])} for s in w.model.inputs]
        out[n] = {"summary": f"one row for model {n!r}", "value": {"inputs": inputs}}
    return out


def _count(dims: tuple[int, ...]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n
