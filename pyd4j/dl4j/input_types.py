"""DL4J's input types of a network: the `<name>.input.json` sidecar next to a configuration JSON, the
`--input` spec (ff:784, cnn:32x32x3, ...), what the configuration itself says, and the shapes of a
batch it trained on; as sidecar entries (`{"type": "convolutional", "height": ..}`), DL4J's
`InputType` objects, or the planner's per-sample shapes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from pyd4j.dl4j.config import GRAPH, ConfigurationError, kind_of
from pyd4j.inputs import JAVA_INT_MAX, InputError, read_json


class InputTypeError(ConfigurationError):
    """An input type pyd4j cannot read; the message names the fix."""


_Dim = Annotated[int, Field(strict=True, ge=1, le=JAVA_INT_MAX)]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _FeedForward(_Spec):
    type: Literal["feedForward"]
    size: _Dim


class _Convolutional(_Spec):
    type: Literal["convolutional", "convolutionalFlat"]
    height: _Dim
    width: _Dim
    channels: _Dim


class _Recurrent(_Spec):
    type: Literal["recurrent"]
    size: _Dim
    timeSeriesLength: _Dim  # noqa: N815  (DL4J's name)


class _Sidecar(BaseModel):
    """`<name>.input.json` next to a network JSON (examples/networks/*.input.json)."""

    model_config = ConfigDict(extra="allow")
    inputs: Annotated[list[Annotated[Union[_FeedForward, _Convolutional, _Recurrent], Field(discriminator="type")]],
                      Field(min_length=1)]


_SPEC = TypeAdapter(Annotated[Union[_FeedForward, _Convolutional, _Recurrent], Field(discriminator="type")])


def _problems(err: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}" for e in err.errors()[:5])


def check_input_spec(spec: Any, where: str) -> dict[str, Any]:
    """An input type dict (as in a sidecar), every dimension a whole number from 1 to Java's int."""
    try:
        return _SPEC.validate_python(spec).model_dump()
    except ValidationError as err:
        raise InputTypeError(f"{where}: input type {spec!r} is not usable ({_problems(err)}); write e.g. "
                            f'{{"type": "convolutional", "height": 32, "width": 32, "channels": 3}}') from None


def read_sidecar(path: Path) -> list[dict[str, Any]]:
    """The input types in a `<name>.input.json` sidecar, checked."""
    try:
        doc = read_json(path, "input-type sidecar")
        return [spec.model_dump() for spec in _Sidecar.model_validate(doc).inputs]
    except InputError as err:
        raise InputTypeError(f"{err}; fix it or pass --input") from None
    except ValidationError as err:
        raise InputTypeError(f"input-type sidecar {str(path)!r} is malformed ({_problems(err)}); write it like "
                            f"examples/networks/lenet.input.json, or pass --input") from None

_INPUT_SPEC = re.compile(r"^\s*(ff|feedforward|cnn|conv|cnnflat|rnn|recurrent)\s*:\s*([\dx\s]+)$", re.I)


def parse_input_spec(spec: str) -> dict[str, Any]:
    """'ff:784', 'cnn:32x32x3' (HxWxC), 'cnnflat:28x28x1', 'rnn:32x50' (size x steps) -> sidecar dict."""
    match = _INPUT_SPEC.match(spec or "")
    if not match:
        raise InputTypeError(
            f"cannot read input type {spec!r}; write ff:SIZE, cnn:HxWxC, cnnflat:HxWxC or rnn:SIZExSTEPS "
            f"(e.g. cnn:32x32x3)"
        )
    kind = match.group(1).lower()
    dims = [int(x) for x in match.group(2).lower().replace(" ", "").split("x") if x]
    wanted = {"ff": 1, "feedforward": 1, "cnn": 3, "conv": 3, "cnnflat": 3, "rnn": 2, "recurrent": 2}[kind]
    if len(dims) != wanted or any(not 0 < d <= JAVA_INT_MAX for d in dims):
        raise InputTypeError(f"input type {spec!r} needs {wanted} dimension(s) from 1 to {JAVA_INT_MAX} for {kind}")
    if kind in ("ff", "feedforward"):
        return {"type": "feedForward", "size": dims[0]}
    if kind in ("cnn", "conv"):
        return {"type": "convolutional", "height": dims[0], "width": dims[1], "channels": dims[2]}
    if kind == "cnnflat":
        return {"type": "convolutionalFlat", "height": dims[0], "width": dims[1], "channels": dims[2]}
    return {"type": "recurrent", "size": dims[0], "timeSeriesLength": dims[1]}


def input_elements(spec: dict[str, Any]) -> int:
    t = spec["type"]
    if t == "feedForward":
        return int(spec["size"])
    if t in ("convolutional", "convolutionalFlat"):
        return int(spec["height"]) * int(spec["width"]) * int(spec["channels"])
    return int(spec["size"]) * int(spec["timeSeriesLength"])


def sidecar_path(model_path: Path) -> Path:
    return model_path.with_name(model_path.name[: -len(".json")] + ".input.json") if model_path.name.endswith(".json") \
        else model_path.with_name(model_path.name + ".input.json")


def derive_inputs(doc: dict[str, Any], kind: str) -> list[dict[str, Any]] | None:
    """Input types from the JSON itself: a first preprocessor, a first layer's nIn, or a graph's networkInputTypes."""
    if kind == GRAPH:
        return None
    pres = doc.get("inputPreProcessors") or {}
    pre = pres.get("0") if isinstance(pres, dict) else None
    if isinstance(pre, dict) and str(pre.get("@class", "")).endswith("FeedForwardToCnnPreProcessor"):
        return [check_input_spec({"type": "convolutionalFlat", "height": pre.get("inputHeight"),
                                  "width": pre.get("inputWidth"), "channels": pre.get("numChannels")},
                                 "the first layer's FeedForwardToCnnPreProcessor")]
    confs = doc.get("confs") or []
    layer = confs[0].get("layer", {}) if confs else {}
    cls = str(layer.get("@class", ""))
    n_in = layer.get("nin", layer.get("nIn"))
    if n_in and cls.split(".")[-1] in ("DenseLayer", "OutputLayer", "EmbeddingLayer", "AutoEncoder"):
        return [check_input_spec({"type": "feedForward", "size": n_in}, "the first layer's nIn")]
    return None


def inputs_from_shapes(doc: dict[str, Any], shapes: list[list[int]]) -> list[dict[str, Any]]:
    """The input types (sidecar entries) of a network from the shapes of a batch it trained on: what a profiled
    job's network needs to be estimated. 2-d [batch, size] is feed-forward (a MultiLayerNetwork's first
    FeedForwardToCnn preprocessor makes it a flattened image), 3-d a time series, 4-d an image, in the layout
    the configuration names (NCHW / NCW, DL4J's defaults, unless it uses NHWC / NWC)."""
    text = json.dumps(doc)
    derived = derive_inputs(doc, kind_of(doc) or GRAPH) or []
    out = []
    for k, shape in enumerate(shapes):
        dims = [int(d) for d in shape[1:]]
        where = f"input {k}'s shape {list(shape)}"
        if len(dims) == 1:
            same = [d for d in derived if input_elements(d) == dims[0]] if k == 0 else []
            out.append(same[0] if same else check_input_spec({"type": "feedForward", "size": dims[0]}, where))
        elif len(dims) == 2:
            size, steps = (dims[1], dims[0]) if '"NWC"' in text else (dims[0], dims[1])
            out.append(check_input_spec({"type": "recurrent", "size": size, "timeSeriesLength": steps}, where))
        elif len(dims) == 3:
            c, h, w = (dims[2], dims[0], dims[1]) if '"NHWC"' in text else (dims[0], dims[1], dims[2])
            out.append(check_input_spec({"type": "convolutional", "height": h, "width": w, "channels": c}, where))
        else:
            raise InputTypeError(f"{where} has {len(shape)} dimensions; pyd4j reads 2 (feed-forward), 3 (time series) "
                                f"or 4 (images): give the input type with --input")
    return out


def java_input_type(spec: dict[str, Any]):
    from org.deeplearning4j.nn.conf.inputs import InputType  # noqa: PLC0415

    t = spec.get("type")
    if t == "feedForward":
        return InputType.feedForward(int(spec["size"]))
    if t == "convolutional":
        return InputType.convolutional(int(spec["height"]), int(spec["width"]), int(spec["channels"]))
    if t == "convolutionalFlat":
        return InputType.convolutionalFlat(int(spec["height"]), int(spec["width"]), int(spec["channels"]))
    if t == "recurrent":
        return InputType.recurrent(int(spec["size"]), int(spec["timeSeriesLength"]))
    raise InputTypeError(f"unknown input type {t!r} in {spec}; use feedForward, convolutional, convolutionalFlat or recurrent")


def planner_shape(spec: dict[str, Any]) -> tuple[int, ...]:
    """One example's shape as DL4J is given it and the planner's graph takes it: (C, H, W) for images,
    (C*H*W,) for a flattened image (each layer's FeedForwardToCnn preprocessor reshapes it, as the
    planner does: pyd4j.dl4j.layer_rules.preprocessed; a graph's dense layer reads it flat), (features,
    time steps) for sequences, (features,)."""
    t = spec["type"]
    if t == "convolutionalFlat":
        return (int(spec["channels"]) * int(spec["height"]) * int(spec["width"]),)
    if t == "convolutional":
        return (int(spec["channels"]), int(spec["height"]), int(spec["width"]))
    if t == "recurrent":
        return (int(spec["size"]), int(spec["timeSeriesLength"]))
    return (int(spec["size"]),)


def array_shape(spec: dict[str, Any], batch: int) -> list[int]:
    """The shape of the array a network is fed for an input type, batch first (a flattened image flat)."""
    return [batch, *planner_shape(spec)]


def sidecar_shapes(network_json: str | Path) -> tuple[int, ...] | tuple[tuple[int, ...], ...] | None:
    """The planner's input shape from `<name>.input.json` next to a configuration JSON (one shape per
    input for a graph with several); None without a sidecar."""
    side = sidecar_path(Path(network_json))
    if not side.exists():
        return None
    shapes = tuple(planner_shape(spec) for spec in read_sidecar(side))
    return shapes[0] if len(shapes) == 1 else shapes
