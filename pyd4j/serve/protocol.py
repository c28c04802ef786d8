"""The Open Inference Protocol v2 (KServe, Triton) over REST: request checks and response bodies.

Pure Python and numpy, no JVM: what a request must hold, checked before any model sees it, and
the response shapes existing clients read. Tensors come as JSON (`data` flattened row-major, or
nested) or, with Triton's binary tensor data extension, as raw little-endian bytes after a JSON
header whose length the `Inference-Header-Content-Length` header gives (tritonclient sends and
asks for that by default).

The request's JSON is validated by pydantic models of the protocol's shapes (`InferenceRequest`),
the same models pyd4j.serve.openapi publishes as the server's OpenAPI description; what they cannot
say (a model's tensor names, shapes and datatypes) is checked after. A response never holds NaN or
Infinity, which JSON numbers cannot be: such outputs are refused naming the tensor, and carried
as binary data when the client asks for that.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationError

HEADER_LENGTH = "Inference-Header-Content-Length"

# Protocol datatype <-> numpy, for the types a DL4J network takes or returns.
DATATYPES: dict[str, np.dtype] = {
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
    "FP16": np.dtype("<f2"),
}
_NAME_OF = {dt: name for name, dt in DATATYPES.items()}
# Every datatype the protocol names (the models served take the FP ones above).
OIP_DATATYPES = ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32",
                 "FP64", "BYTES")
JSON_LONG_MAX = 2**63 - 1


# ----------------------------------------------------------------------------- the protocol's shapes

Parameters = dict[str, StrictStr | StrictBool | StrictInt | StrictFloat]
Dim = Annotated[int, Field(ge=0, le=JSON_LONG_MAX)]


class _Shape(BaseModel):
    """Strict: a number is a number ("5" is not 5); keys the protocol does not name are allowed."""

    model_config = ConfigDict(strict=True, extra="allow")


class RequestInput(_Shape):
    """$request_input: a tensor as JSON `data` (flat row-major, or nested), or as binary data after the
    JSON (Triton's extension: `parameters.binary_data_size`)."""

    name: Annotated[str, Field(min_length=1)]
    shape: list[Dim]
    datatype: Literal[OIP_DATATYPES]  # type: ignore[valid-type]
    parameters: Parameters | None = None
    data: list[Any] | None = None


class RequestOutput(_Shape):
    name: Annotated[str, Field(min_length=1)]
    parameters: Parameters | None = None


class InferenceRequest(_Shape):
    """$inference_request of the Open Inference Protocol v2 (REST)."""

    id: str | None = None
    parameters: Parameters | None = None
    inputs: Annotated[list[RequestInput], Field(min_length=1)]
    outputs: list[RequestOutput] | None = None


class ResponseOutput(_Shape):
    name: str
    shape: list[Dim]
    datatype: str
    parameters: Parameters | None = None
    data: list[float] | None = None


class InferenceResponse(_Shape):
    model_name: str
    model_version: str | None = None
    id: str | None = None
    parameters: Parameters | None = None
    outputs: list[ResponseOutput]


class ErrorResponse(_Shape):
    """Every refusal: the protocol's $inference_error_response."""

    error: str


def _schema_error(err: ValidationError, doc: dict[str, Any]) -> str:
    """The first thing wrong in a request, located as a person reads it: input 'x' (inputs[0]).shape[1]."""
    first = err.errors()[0]
    loc = first["loc"]
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".") or "the request"
    if len(loc) >= 2 and loc[0] in ("inputs", "outputs") and isinstance(loc[1], int):
        tensor = doc[loc[0]][loc[1]]
        if isinstance(tensor, dict) and isinstance(tensor.get("name"), str):
            rest = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc[2:])
            where = f"{loc[0][:-1]} {tensor['name']!r} ({loc[0]}[{loc[1]}]){rest}"
    got = repr(first.get("input"))
    got = got if len(got) <= 60 else got[:57] + "..."
    return f"{where}: {first['msg']} (got {got})"


class ProtocolError(Exception):
    """A request the server refuses; `status` is the HTTP status (400, 404, 413, 429, 503, 504)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers or {}


@dataclass(frozen=True)
class TensorSpec:
    """One input or output of a model: its name, protocol datatype and shape (-1: the batch)."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


@dataclass
class InferRequest:
    """A checked request: inputs in the model's order, and how each output is to be sent."""

    id: str | None
    inputs: list[np.ndarray]
    rows: int
    binary_outputs: set[str] = field(default_factory=set)
    requested: list[str] | None = None  # None: every output


def datatype_of(dtype: np.dtype) -> str:
    return _NAME_OF.get(np.dtype(dtype).newbyteorder("<"), str(dtype))


def _bad(message: str) -> ProtocolError:
    return ProtocolError(400, message)


class _NonFinite(Exception):
    """NaN or Infinity in a JSON request: not JSON, though Python's json writes them."""


def _not_a_json_number(token: str) -> float:
    raise _NonFinite(token)


def _split_body(body: bytes, header_length: str | None) -> tuple[dict[str, Any], memoryview]:
    if header_length is None:
        head, rest = body, b""
    else:
        try:
            n = int(header_length)
        except ValueError:
            raise _bad(f"{HEADER_LENGTH} {header_length!r} is not a whole number of bytes") from None
        if not 0 <= n <= len(body):
            raise _bad(f"{HEADER_LENGTH} {n} is outside the body's {len(body)} bytes")
        head, rest = body[:n], body[n:]
    what = "the request body" if header_length is None else f"the request's first {len(head)} bytes (its {HEADER_LENGTH})"
    try:
        doc = json.loads(head, parse_constant=_not_a_json_number)
    except _NonFinite as err:
        raise _bad(f"the request holds {err.args[0]}, which JSON numbers cannot be; send finite numbers, or the "
                   f"tensor as binary data (binary_data_size), which carries any float") from None
    except RecursionError:
        raise _bad(f"{what} nests JSON too deep to read; an inference request nests a few levels (a tensor's "
                   f"\"data\" as deep as its shape): send \"data\" flat, row-major") from None
    except (ValueError, UnicodeDecodeError) as err:   # JSONDecodeError, or an integer of too many digits
        raise _bad(f"{what} is not JSON ({err}); send an inference request as the Open Inference "
                   f"Protocol v2 describes: {{\"inputs\": [{{\"name\", \"shape\", \"datatype\", \"data\"}}]}}") from None
    if not isinstance(doc, dict):
        raise _bad(f"the request body is a JSON {type(doc).__name__}, not an object with \"inputs\"")
    return doc, memoryview(rest)


def parse_infer_request(body: bytes, header_length: str | None, inputs: list[TensorSpec],
                        outputs: list[TensorSpec], max_rows: int) -> InferRequest:
    """Check an inference request against a model's inputs; ProtocolError(400) names the tensor,
    what came and what the model expects."""
    doc, binary = _split_body(body, header_length)
    given = doc.get("inputs")
    if not isinstance(given, list) or not given:
        raise _bad("the request has no \"inputs\" list; expected inputs: "
                   + ", ".join(f"{s.name} {s.datatype} {list(s.shape)}" for s in inputs))
    try:
        InferenceRequest.model_validate(doc)
    except ValidationError as err:
        raise _bad(f"the request is not an Open Inference Protocol v2 inference request: {_schema_error(err, doc)}; "
                   f"this model takes " + ", ".join(f"{s.name!r} {s.datatype} {list(s.shape)}" for s in inputs)) from None
    by_name: dict[str, dict[str, Any]] = {}
    for t in given:
        if t["name"] in by_name:
            raise _bad(f"input {t['name']!r} is given twice; give each input once")
        by_name[t["name"]] = t
    expected = {s.name for s in inputs}
    unknown = sorted(set(by_name) - expected)
    missing = sorted(expected - set(by_name))
    if unknown or missing:
        raise _bad(f"inputs {unknown or ''}{' unknown' if unknown else ''}{'; ' if unknown and missing else ''}"
                   f"{f'missing {missing}' if missing else ''}; this model takes "
                   + ", ".join(f"{s.name!r} {s.datatype} {list(s.shape)}" for s in inputs))
    offset = 0
    arrays, rows = [], None
    for spec in inputs:
        t = by_name[spec.name]
        arr, offset = _tensor(t, spec, binary, offset)
        if rows is not None and arr.shape[0] != rows:
            raise _bad(f"input {spec.name!r} has {arr.shape[0]} rows, the other inputs {rows}; give every input the same batch")
        rows = arr.shape[0]
        arrays.append(arr)
    if offset != len(binary):
        raise _bad(f"the body holds {len(binary) - offset} bytes of binary data no input claims (binary_data_size)")
    if rows > max_rows:
        raise ProtocolError(400, f"the request holds a batch of {rows}; this model takes at most {max_rows} rows a request "
                                 f"(the server's max batch): split the request")
    params = doc.get("parameters") if isinstance(doc.get("parameters"), dict) else {}
    out_names = {s.name for s in outputs}
    binary_outputs: set[str] = set(out_names) if params.get("binary_data_output") is True else set()
    requested = None
    if doc.get("outputs") is not None:
        if not isinstance(doc["outputs"], list):
            raise _bad("\"outputs\" must be a list of {\"name\": ...}")
        requested = []
        for o in doc["outputs"]:
            name = o.get("name") if isinstance(o, dict) else None
            if name not in out_names:
                raise _bad(f"output {name!r} is not one of this model's outputs {sorted(out_names)}")
            requested.append(name)
            if isinstance(o.get("parameters"), dict) and o["parameters"].get("binary_data") is True:
                binary_outputs.add(name)
    rid = doc.get("id")
    return InferRequest(id=str(rid) if rid is not None else None, inputs=arrays, rows=int(rows),
                        binary_outputs=binary_outputs, requested=requested)


def _tensor(t: dict[str, Any], spec: TensorSpec, binary: memoryview, offset: int) -> tuple[np.ndarray, int]:
    name = spec.name
    want = f"expected shape {list(spec.shape)} ({-1} = any batch) and datatype {spec.datatype}"
    if t.get("datatype") != spec.datatype:
        raise _bad(f"input {name!r} has datatype {t.get('datatype')!r}; {want}")
    shape = t.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise _bad(f"input {name!r} has shape {shape!r}, not a list of whole numbers >= 0; {want}")
    if len(shape) != len(spec.shape) or any(e != -1 and e != d for e, d in zip(spec.shape, shape)) or shape[0] < 1:
        raise _bad(f"input {name!r} has shape {shape}; {want}")
    dtype = DATATYPES[spec.datatype]
    count = math.prod(shape)
    params = t.get("parameters") if isinstance(t.get("parameters"), dict) else {}
    size = params.get("binary_data_size")
    if size is not None:
        if not isinstance(size, int) or size != count * dtype.itemsize:
            raise _bad(f"input {name!r} has binary_data_size {size!r}; shape {shape} in {spec.datatype} "
                       f"takes {count * dtype.itemsize} bytes")
        if offset + size > len(binary):
            raise _bad(f"input {name!r} claims {size} bytes of binary data; the body has {len(binary) - offset} left")
        arr = np.frombuffer(binary[offset:offset + size], dtype=dtype).astype(dtype.newbyteorder("="), copy=True)
        return arr.reshape(shape), offset + size
    if "data" not in t:
        raise _bad(f"input {name!r} has no \"data\" (nor binary_data_size); {want}")
    try:
        raw = np.asarray(t["data"])
    except (TypeError, ValueError, OverflowError, RecursionError) as err:
        raise _bad(f"input {name!r}: its data cannot be read as {spec.datatype} numbers ({err}); {want}") from None
    if raw.dtype.kind not in "iuf":   # text, true/false, objects, or integers past 64 bits
        raise _bad(f"input {name!r}: its data holds {_kind_words(raw)}, not {spec.datatype} numbers; {want}")
    if raw.size != count:
        raise _bad(f"input {name!r} has {raw.size} values in \"data\"; its shape {shape} takes {count}")
    with np.errstate(over="ignore", invalid="ignore"):
        arr = raw.astype(dtype.newbyteorder("="))
    if not np.isfinite(arr).all():
        biggest = float(np.finfo(dtype).max)
        raise _bad(f"input {name!r} holds values beyond {spec.datatype}'s range (largest magnitude {biggest:.4g}); "
                   f"send values within it")
    return np.ascontiguousarray(arr.reshape(shape)), offset


def _kind_words(arr: np.ndarray) -> str:
    return {"b": "true/false values", "U": "text", "S": "text", "O": "values that are not numbers (or integers "
            "past 64 bits)"}.get(arr.dtype.kind, f"values of kind {arr.dtype.kind!r}")


def infer_response(model: str, request: InferRequest, specs: list[TensorSpec],
                   arrays: list[np.ndarray]) -> tuple[bytes, dict[str, str]]:
    """The response body and its headers: JSON, with binary outputs after it when asked for."""
    wanted = request.requested if request.requested is not None else [s.name for s in specs]
    index = {s.name: i for i, s in enumerate(specs)}
    outs, blobs = [], []
    for name in wanted:
        arr = np.ascontiguousarray(arrays[index[name]])
        entry: dict[str, Any] = {"name": name, "datatype": datatype_of(arr.dtype), "shape": list(arr.shape)}
        if name in request.binary_outputs:
            raw = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
            entry["parameters"] = {"binary_data_size": len(raw)}
            blobs.append(raw)
        else:
            bad = np.size(arr) - int(np.count_nonzero(np.isfinite(arr)))
            if bad:
                raise ProtocolError(400, f"output {name!r} of model {model!r} holds {bad} values that are NaN or "
                                         f"infinite, which JSON numbers cannot be (the inputs overflowed the model's "
                                         f"{datatype_of(arr.dtype)} arithmetic, or the model's parameters hold them); "
                                         f"ask for the output as binary data (parameters.binary_data_output: true), "
                                         f"which carries any float, or send smaller inputs")
            entry["data"] = arr.reshape(-1).tolist()
        outs.append(entry)
    doc: dict[str, Any] = {"model_name": model, "model_version": "1", "outputs": outs}
    if request.id is not None:
        doc["id"] = request.id
    head = json.dumps(doc, allow_nan=False).encode()
    if not blobs:
        return head, {"content-type": "application/json"}
    return head + b"".join(blobs), {"content-type": "application/octet-stream", HEADER_LENGTH: str(len(head))}
