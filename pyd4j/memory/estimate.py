"""What a DL4J network needs in memory: the planner's per-layer model of DL4J's fit(), DL4J's report beside it.

`estimate(model, batch, dtype, mode)` reads a MultiLayerConfiguration or ComputationGraphConfiguration
(a DL4J JSON file, its text, or a live Java object) in the in-process JVM. Training, its off-heap
terms are the one DL4J memory model `pyd4j.sched.fitmem` (the graph `pyd4j plan` plans, with the
per-layer working memory measured with ND4J, and for the layers it has no model of (LSTM, ...)
probe iterations in DL4J, as `pyd4j plan` measures them; parameters, gradients, updater state by updater
type, the workspaces fit() trains in with their over-allocation read from DL4J's network class,
and what their learning leaves with the C allocator), plus AsyncDataSetIterator prefetch buffers;
DL4J's own NetworkMemoryReport is kept beside them as a cross-check (`report_terms`, not summed).
Inference keeps DL4J's report corrected for what it omits. Then the JVM's own heap and native
overhead. Every term says where its number comes from: `dl4j-report` (DL4J's report), `measured`
(read from the running JVM or machine), or `estimate` (pyd4j's model, stated in `why`).

Every term is linear in the minibatch (`fixed + per_sample * batch`; one, what glibc keeps of an LSTM's
per-step pieces, is zero from the batch at which they reach glibc's mmap threshold), so
`Estimate.at_batch()` re-evaluates without the JVM; `pyd4j.memory.flags` and the batch advisor rely on that.
The dataclasses here import nothing from Java: only the functions that read a network start a JVM.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from pyd4j.inputs import JAVA_INT_MAX, InputError, parse_json, read_json, read_text
from pyd4j.output import human_bytes, stdout_to_stderr
from pyd4j.sched.fitmem import Region, Term

MiB = 1024**2


# Bytes per element of the dtypes a DL4J network may train or infer in.
DTYPE_BYTES: dict[str, int] = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}
_DTYPE_ALIASES = {
    "double": "float64", "float64": "float64", "fp64": "float64",
    "float": "float32", "float32": "float32", "fp32": "float32",
    "half": "float16", "float16": "float16", "fp16": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
}

# The prefetch thread of ND4J's AsyncDataSetIterator / AsyncMultiDataSetIterator copies batches into a
# workspace of at least this size (WorkspaceConfiguration minSize 10485760, read with javap).
PREFETCH_WORKSPACE_MIN_BYTES = 10 * MiB

# AsyncDataSetIterator queue DL4J's fit() uses when it wraps an async-capable iterator.
DL4J_FIT_PREFETCH_QUEUE = 2

# JVM native overhead model: the process's resident memory besides the heap and ND4J's arrays (what
# a container limit and maxphysicalbytes must hold for the JVM itself). Measured as RSS, not NMT's
# committed memory: NMT commits G1's tables and thread stacks that are never touched. Measured by
# benchmarks/flags_accuracy.py as peak RSS - heap (pre-touched) - ND4J's off-heap growth, JDK 17, 2 CPUs:
# 102-118 MiB on 3-layer networks, 141 MiB on ResNet50 (175 vertices) under the Serial collector. It grows
# with the network (ND4J's cached shape and op descriptors, oneDNN's primitives, JIT code): base + per layer,
# least squares over 51 runs of 14 networks (residual sd 3.9 MiB, measured/model at most 1.09).
JVM_NATIVE_BASE_BYTES = 100 * MiB    # classes + CDS, JIT code, thread stacks, libnd4j/oneDNN/OpenBLAS code
NATIVE_PER_LAYER_BYTES = 160 * 1024  # per layer/vertex: ND4J's cached shapes and op descriptors, oneDNN primitives
NATIVE_PER_CPU_BYTES = 4 * MiB       # per OpenMP worker: GEMM packing buffer and malloc arena (not measured beyond 2 CPUs)
# What a long run holds beyond the base, which was fitted on 3-iteration runs: the JIT compiler's code and the
# arenas C2 compiles the job's hot loop in (NMT's "Arena Chunk": 12-15 MiB in 3 iterations, 27-78 MiB in
# deeplearning4j-examples' SumModel, 2000 fast iterations), and what else settles over thousands of iterations.
# Measured as need - (heap + ND4J off-heap + base) over 1000-3000 iterations with the heap pre-touched
# (benchmarks/jit_cap.py): up to 61 MiB with the JDK's C2 (an LSTM; SumModel, once refused by JavaCPP under flags
# without this term, 44), at most 36 MiB with C2's node limit pinned, which the flags for one JVM do.
LONG_RUN_TERM = "long_run_native"
LONG_RUN_BYTES = 48 * MiB            # the JDK's C2 (Spark's settings, which pin no JVM option; + the native headroom holds 61)
LONG_RUN_CAPPED_BYTES = 40 * MiB     # with -XX:MaxNodeLimit=JIT_NODE_LIMIT
# C2's node limit (JDK default 80000) bounds the graph one compilation builds, and with it the compilation's arenas:
# a method whose graph would grow past it is given up and keeps its C1 code.
JIT_NODE_LIMIT = 20000
# The collector: G1's remembered sets and marking tables are resident in proportion to the heap; Serial's are
# not (0.3-1.4 MiB by NMT). Measured against Serial on the same runs (benchmarks/collector_choice.py): 3.3-4.7% of
# the heap. The JVM picks G1 itself only on a "server-class machine": 2 or more CPUs and 1792 MiB or more of
# memory, which in a container is its limit; pyd4j's flags pin the collector they were sized for.
G1_TABLES_FRACTION = 0.05
G1_TERM = "g1_tables"
SERVER_CLASS_BYTES = 1792 * MiB      # JDK: is_server_class_machine() needs 2 GiB less 256 MiB
SERVER_CLASS_CPUS = 2

# Java heap model (estimate): DL4J/ND4J objects besides the data, which lives off-heap.
HEAP_BASE_BYTES = 32 * MiB        # ND4J environment, configs, INDArray wrappers: 9-12 MiB used after a batch-1 warm-up, x~3
HEAP_PER_LAYER_BYTES = 1 * MiB    # per layer/vertex: config objects, param views, gradient views
HEAP_PER_STEP_BYTES = 64 * 1024   # per RNN time step and layer: per-step INDArray views during BPTT
HEAP_GC_FACTOR = 2.0              # live set x 2: room for the collector to work without thrashing
HEAP_MIN_BYTES = 64 * MiB         # G1 below this spends its time collecting; measured peak heap used 11-71 MiB


def assignments(environment: dict[str, str]) -> list[str]:
    """An environment as NAME=VALUE words (a shell line before `java`, an `export`)."""
    return [f"{k}={v}" for k, v in environment.items()]


class EstimateError(InputError):
    """A network, input type, batch or dtype pyd4j cannot estimate; the message names the fix."""


@dataclass(frozen=True)
class Estimate:
    """The memory a DL4J network needs at one minibatch size, term by term."""

    model: str
    model_kind: str                      # "MultiLayerNetwork" or "ComputationGraph"
    batch: int
    dtype: str
    mode: str                            # "train" or "infer"
    inputs: tuple[str, ...]              # input types, as DL4J prints them
    parameter_count: int
    layer_count: int
    terms: tuple[Term, ...]
    workspace_overallocation: float      # largest overallocationLimit among the workspaces in force
    prefetch_queue: int
    cpu_count: int = 1
    notes: tuple[str, ...] = field(default_factory=tuple)
    report_terms: tuple[Term, ...] = field(default_factory=tuple)
    """DL4J's NetworkMemoryReport, term by term: a cross-check printed beside the terms, never summed."""
    environment: dict[str, str] = field(default_factory=dict)
    """The job's environment the terms assume (glibc's malloc setting of pyd4j.sched.fitmem); pyd4j's
    flags set it in every form they are written in."""
    without_environment: Term | None = None
    """What the job may hold on top of the terms when `environment` is not set."""

    def environment_reason(self) -> str:
        """Why the job needs `environment`, and what leaving it out may cost ("" when it needs none)."""
        if not self.environment:
            return ""
        kept = self.without_environment
        return ("glibc's mmap threshold fixed, so the arrays DL4J frees (while its workspaces learn their size, and "
                "batch normalization's) go back to the system; the flags are sized for that (measured: 2-30% less "
                "memory, up to 3% slower)" + (
                    f" (without it glibc may keep up to {human_bytes(kept.bytes_at(self.batch))} more, over the container "
                    f"limit)" if kept is not None else ""))

    def at_batch(self, batch: int) -> "Estimate":
        """The same network at another minibatch (every term is linear in the batch, or zero from its below_batch on)."""
        check_batch(batch)
        return replace(self, batch=int(batch))

    def term_bytes(self, name: str) -> int:
        for term in self.terms:
            if term.name == name:
                return term.bytes_at(self.batch)
        raise KeyError(name)

    def beside_the_step_bytes(self) -> int:
        """Off-heap memory any training run of the network holds besides its training step's own, planned or
        not: the data pipeline and what glibc keeps of an LSTM's per-step pieces (the same glibc setting, the
        same DL4J layer code). A plan's device peak plus this is what the planned job holds off the heap."""
        from pyd4j.sched.fitmem import LSTM_KEPT_TERM  # noqa: PLC0415 - as _fit_terms imports the planner's model

        return sum(t.bytes_at(self.batch) for t in self.terms
                   if t.name == "prefetch_buffers" or t.name.startswith(LSTM_KEPT_TERM))

    def region_bytes(self, region: Region) -> int:
        return sum(t.bytes_at(self.batch) for t in self.terms if t.region == region)

    @property
    def offheap_bytes(self) -> int:
        """ND4J's native memory: arrays, workspaces, prefetch buffers."""
        return self.region_bytes("offheap")

    @property
    def heap_bytes(self) -> int:
        """The Java heap (-Xmx) the job needs."""
        return self.region_bytes("heap")

    @property
    def native_bytes(self) -> int:
        """The JVM's and native libraries' own memory outside heap and ND4J arrays."""
        return self.region_bytes("native")

    @property
    def total_bytes(self) -> int:
        return self.offheap_bytes + self.heap_bytes + self.native_bytes

    def breakdown(self) -> dict[str, int]:
        """term -> bytes at this batch."""
        return {t.name: t.bytes_at(self.batch) for t in self.terms}

    def biggest_term(self) -> Term:
        return max(self.terms, key=lambda t: t.bytes_at(self.batch))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["terms"] = [dict(asdict(t), bytes=t.bytes_at(self.batch)) for t in self.terms]
        d["report_terms"] = [dict(asdict(t), bytes=t.bytes_at(self.batch)) for t in self.report_terms]
        if self.without_environment is not None:
            d["without_environment"] = dict(asdict(self.without_environment), bytes=self.without_environment.bytes_at(self.batch))
        d.update(offheap_bytes=self.offheap_bytes, heap_bytes=self.heap_bytes,
                 native_bytes=self.native_bytes, total_bytes=self.total_bytes, breakdown=self.breakdown())
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Estimate":
        terms = tuple(Term(**{k: v for k, v in t.items() if k != "bytes"}) for t in d["terms"])
        report = tuple(Term(**{k: v for k, v in t.items() if k != "bytes"}) for t in d.get("report_terms", ()))
        keys = {f for f in cls.__dataclass_fields__}
        values = {k: v for k, v in d.items() if k in keys}
        unset = d.get("without_environment")
        values.update(terms=terms, inputs=tuple(d.get("inputs", ())), notes=tuple(d.get("notes", ())),
                      report_terms=report, environment=dict(d.get("environment") or {}),
                      without_environment=Term(**{k: v for k, v in unset.items() if k != "bytes"}) if unset else None)
        return cls(**values)


def check_batch(batch: Any) -> int:
    if isinstance(batch, bool) or not isinstance(batch, int) or not 0 < batch <= JAVA_INT_MAX:
        raise EstimateError(f"minibatch size {batch!r} is not a positive integer within Java's int "
                            f"(1..{JAVA_INT_MAX}); give e.g. --batch 32")
    return batch


def normalize_dtype(dtype: str) -> str:
    """'float' / 'FLOAT' / 'fp32' -> 'float32'; raises EstimateError naming the accepted ones."""
    key = str(dtype).strip().lower()
    if key not in _DTYPE_ALIASES:
        raise EstimateError(
            f"unknown dtype {dtype!r}; DL4J networks train in one of "
            f"{', '.join(sorted(DTYPE_BYTES))} (also: float, double, half)"
        )
    return _DTYPE_ALIASES[key]


def normalize_mode(mode: str) -> str:
    key = str(mode).strip().lower()
    if key in ("train", "training", "fit"):
        return "train"
    if key in ("infer", "inference", "output", "predict"):
        return "infer"
    raise EstimateError(f"unknown mode {mode!r}; use 'train' or 'infer'")


# ----------------------------------------------------------------------------- input types

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
        raise EstimateError(f"{where}: input type {spec!r} is not usable ({_problems(err)}); write e.g. "
                            f'{{"type": "convolutional", "height": 32, "width": 32, "channels": 3}}') from None


def read_sidecar(path: Path) -> list[dict[str, Any]]:
    """The input types in a `<name>.input.json` sidecar, checked."""
    try:
        doc = read_json(path, "input-type sidecar")
        return [spec.model_dump() for spec in _Sidecar.model_validate(doc).inputs]
    except InputError as err:
        raise EstimateError(f"{err}; fix it or pass --input") from None
    except ValidationError as err:
        raise EstimateError(f"input-type sidecar {str(path)!r} is malformed ({_problems(err)}); write it like "
                            f"examples/networks/lenet.input.json, or pass --input") from None

_INPUT_SPEC = re.compile(r"^\s*(ff|feedforward|cnn|conv|cnnflat|rnn|recurrent)\s*:\s*([\dx\s]+)$", re.I)


def parse_input_spec(spec: str) -> dict[str, Any]:
    """'ff:784', 'cnn:32x32x3' (HxWxC), 'cnnflat:28x28x1', 'rnn:32x50' (size x steps) -> sidecar dict."""
    match = _INPUT_SPEC.match(spec or "")
    if not match:
        raise EstimateError(
            f"cannot read input type {spec!r}; write ff:SIZE, cnn:HxWxC, cnnflat:HxWxC or rnn:SIZExSTEPS "
            f"(e.g. cnn:32x32x3)"
        )
    kind = match.group(1).lower()
    dims = [int(x) for x in match.group(2).lower().replace(" ", "").split("x") if x]
    wanted = {"ff": 1, "feedforward": 1, "cnn": 3, "conv": 3, "cnnflat": 3, "rnn": 2, "recurrent": 2}[kind]
    if len(dims) != wanted or any(not 0 < d <= JAVA_INT_MAX for d in dims):
        raise EstimateError(f"input type {spec!r} needs {wanted} dimension(s) from 1 to {JAVA_INT_MAX} for {kind}")
    if kind in ("ff", "feedforward"):
        return {"type": "feedForward", "size": dims[0]}
    if kind in ("cnn", "conv"):
        return {"type": "convolutional", "height": dims[0], "width": dims[1], "channels": dims[2]}
    if kind == "cnnflat":
        return {"type": "convolutionalFlat", "height": dims[0], "width": dims[1], "channels": dims[2]}
    return {"type": "recurrent", "size": dims[0], "timeSeriesLength": dims[1]}


def _input_elements(spec: dict[str, Any]) -> int:
    t = spec["type"]
    if t == "feedForward":
        return int(spec["size"])
    if t in ("convolutional", "convolutionalFlat"):
        return int(spec["height"]) * int(spec["width"]) * int(spec["channels"])
    return int(spec["size"]) * int(spec["timeSeriesLength"])


def sidecar_path(model_path: Path) -> Path:
    return model_path.with_name(model_path.name[: -len(".json")] + ".input.json") if model_path.name.endswith(".json") \
        else model_path.with_name(model_path.name + ".input.json")


def _derive_inputs(doc: dict[str, Any], kind: str) -> list[dict[str, Any]] | None:
    """Input types from the JSON itself: a first preprocessor, a first layer's nIn, or a graph's networkInputTypes."""
    if kind == "ComputationGraph":
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
    derived = _derive_inputs(doc, "ComputationGraph" if "vertices" in doc else "MultiLayerNetwork") or []
    out = []
    for k, shape in enumerate(shapes):
        dims = [int(d) for d in shape[1:]]
        where = f"input {k}'s shape {list(shape)}"
        if len(dims) == 1:
            same = [d for d in derived if _input_elements(d) == dims[0]] if k == 0 else []
            out.append(same[0] if same else check_input_spec({"type": "feedForward", "size": dims[0]}, where))
        elif len(dims) == 2:
            size, steps = (dims[1], dims[0]) if '"NWC"' in text else (dims[0], dims[1])
            out.append(check_input_spec({"type": "recurrent", "size": size, "timeSeriesLength": steps}, where))
        elif len(dims) == 3:
            c, h, w = (dims[2], dims[0], dims[1]) if '"NHWC"' in text else (dims[0], dims[1], dims[2])
            out.append(check_input_spec({"type": "convolutional", "height": h, "width": w, "channels": c}, where))
        else:
            raise EstimateError(f"{where} has {len(shape)} dimensions; pyd4j reads 2 (feed-forward), 3 (time series) "
                                f"or 4 (images): give the input type with --input")
    return out


def _input_type(spec: dict[str, Any]):
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
    raise EstimateError(f"unknown input type {t!r} in {spec}; use feedForward, convolutional, convolutionalFlat or recurrent")


# ----------------------------------------------------------------------------- loading

@dataclass
class _Loaded:
    name: str
    kind: str
    conf: Any
    inputs: list[dict[str, Any]]
    doc: dict[str, Any] = field(default_factory=dict)   # the configuration JSON, for the planner's graph


def _read_json_file(path: Path) -> tuple[str, dict[str, Any]]:
    try:
        text = read_text(path, "network configuration")
        doc = parse_json(text, f"network configuration {str(path)!r}")
    except InputError as err:
        raise EstimateError(f"{err}; give a DL4J configuration JSON written by MultiLayerConfiguration.toJson() / "
                            f"ComputationGraphConfiguration.toJson() (conf.toJson(); examples/networks/ has five)") from None
    if not isinstance(doc, dict):
        raise EstimateError(f"{path} holds a JSON {type(doc).__name__}, not a DL4J configuration object")
    return text, doc


def _kind_of(doc: dict[str, Any], where: str) -> str:
    if "vertices" in doc and "networkInputs" in doc:
        kind = "ComputationGraph"
    elif "confs" in doc:
        kind = "MultiLayerNetwork"
    else:
        raise EstimateError(
            f"{where} is JSON but not a DL4J network configuration (no 'confs' for a MultiLayerConfiguration, "
            f"no 'vertices' for a ComputationGraphConfiguration); write it with conf.toJson()"
        )
    _check_layers(doc, kind, where)
    return kind


def _check_layers(doc: dict[str, Any], kind: str, where: str) -> None:
    """The shape of a DL4J configuration, checked before DL4J sees it: a layer of 0 or fewer units
    would give a negative memory report and negative flags."""
    if kind == "MultiLayerNetwork":
        confs = doc["confs"]
        if not isinstance(confs, list) or not confs or not all(isinstance(c, dict) for c in confs):
            raise EstimateError(f"{where}: 'confs' must be a non-empty list of layer configurations; write it with conf.toJson()")
        layers = [(f"layer {i}", c.get("layer")) for i, c in enumerate(confs)]
    else:
        vertices = doc["vertices"]
        if not isinstance(vertices, dict) or not vertices:
            raise EstimateError(f"{where}: 'vertices' must be a non-empty object; write it with conf.toJson()")
        layers = [(f"vertex {name!r}", v["layerConf"].get("layer") if isinstance(v["layerConf"], dict) else None)
                  for name, v in vertices.items() if isinstance(v, dict) and "layerConf" in v]
    for label, layer in layers:
        if not isinstance(layer, dict):
            raise EstimateError(f"{where}: {label} has no layer object; write the configuration with conf.toJson()")
        for key in ("nin", "nout", "nIn", "nOut"):
            value = layer.get(key)
            # 0: DL4J writes it for a size it infers (a dropout vertex's nIn); a negative size is refused
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or not 0 <= value <= JAVA_INT_MAX):
                name = layer.get("layerName") or label
                raise EstimateError(f"{where}: {label} ({name}) has {key} = {value!r}; a layer's size must be a whole "
                                    f"number from 0 (inferred by DL4J) to {JAVA_INT_MAX}: fix the network configuration")


def read_config_file(path: str | Path) -> tuple[str, str]:
    """(JSON text, 'MultiLayerNetwork' or 'ComputationGraph') of a DL4J configuration file, checked
    without a JVM; raises EstimateError naming the file and what is wrong with it."""
    text, doc = _read_json_file(Path(path))
    return text, _kind_of(doc, str(path))


_UNKNOWN_TYPE = re.compile(r"Could not resolve type id '([^']+)'|Unknown layer type[^:]*: ?([\w.$]+)|ClassNotFoundException:? ?([\w.$]+)")


def _from_json(text: str, kind: str, where: str):
    import jpype  # noqa: PLC0415

    from pyd4j.jvm import translate  # noqa: PLC0415

    start_jvm()
    from org.deeplearning4j.nn.conf import ComputationGraphConfiguration, MultiLayerConfiguration  # noqa: PLC0415

    cls = ComputationGraphConfiguration if kind == "ComputationGraph" else MultiLayerConfiguration
    try:
        with stdout_to_stderr():
            return cls.fromJson(text)
    except jpype.JException as exc:
        message = _all_messages(exc)
        match = _UNKNOWN_TYPE.search(message)
        if match:
            bad = next(g for g in match.groups() if g)
            raise EstimateError(
                f"{where}: unknown layer/vertex type {bad!r} — it is not a class of DL4J 1.0.0-M2.1 on pyd4j's "
                f"classpath; use a built-in DL4J layer, or put the jar with your custom layer on PYD4J_CLASSPATH"
            ) from None
        raise EstimateError(f"{where}: DL4J cannot read this configuration: {translate(exc)}") from None


def _all_messages(exc) -> str:
    parts = []
    cur = exc
    while cur is not None:
        parts.append(f"{cur.getClass().getName()}: {cur.getMessage()}")
        cur = cur.getCause()
    return " | ".join(parts)


def start_jvm():
    """The in-process JVM (started with defaults if nothing started it yet)."""
    import pyd4j.jvm  # noqa: PLC0415

    with stdout_to_stderr():
        return pyd4j.jvm.start() if not pyd4j.jvm.is_started() else pyd4j.jvm.info()


def load(model: Any, input: str | dict | list | None = None) -> _Loaded:  # noqa: A002
    """A network configuration from a JSON path, JSON text or a live DL4J object, plus its input types."""
    inputs: list[dict[str, Any]] | None = None
    if isinstance(input, str):
        inputs = [parse_input_spec(s) for s in input.split(",")]
    elif isinstance(input, dict):
        inputs = [check_input_spec(input, "input")]
    elif isinstance(input, list):
        inputs = [parse_input_spec(s) if isinstance(s, str) else check_input_spec(s, "input") for s in input]

    text = None  # JSON read here is checked whole (layers, input types) before DL4J sees it
    if isinstance(model, (str, Path)) and not str(model).lstrip().startswith("{"):
        path = Path(model)
        text, doc = _read_json_file(path)
        where = str(path)
        kind = _kind_of(doc, where)
        name = path.name[: -len(".json")] if path.name.endswith(".json") else path.name
        if inputs is None:
            side = sidecar_path(path)
            if side.exists():
                inputs = read_sidecar(side)
    elif isinstance(model, str):
        try:
            doc = parse_json(model, "network JSON text")
        except InputError as err:
            raise EstimateError(str(err)) from None
        if not isinstance(doc, dict):
            raise EstimateError(f"network JSON text holds a JSON {type(doc).__name__}, not a DL4J configuration object")
        text, where, name = model, "network JSON text", "network"
        kind = _kind_of(doc, where)
    else:
        start_jvm()
        conf, kind = _conf_of_java_object(model)
        doc = json.loads(str(conf.toJson()))
        name = str(model.getClass().getSimpleName())
    if inputs is None and kind == "ComputationGraph":
        types = doc.get("networkInputTypes")
        if types:
            raise EstimateError("this graph's JSON records input types DL4J cannot map back; pass --input (e.g. cnn:32x32x3)")
    if inputs is None:
        inputs = _derive_inputs(doc, kind)
    if not inputs:
        raise EstimateError(
            f"cannot tell the input type of {name}: give --input (ff:SIZE, cnn:HxWxC, cnnflat:HxWxC, rnn:SIZExSTEPS) "
            f"or write a sidecar {name}.input.json like examples/networks/*.input.json"
        )
    if text is not None:
        conf = _from_json(text, kind, where)
    return _Loaded(name=name, kind=kind, conf=conf, inputs=inputs, doc=doc)


def _conf_of_java_object(obj: Any):
    name = str(obj.getClass().getName()) if hasattr(obj, "getClass") else type(obj).__name__
    if name.endswith("MultiLayerConfiguration"):
        return obj, "MultiLayerNetwork"
    if name.endswith("ComputationGraphConfiguration"):
        return obj, "ComputationGraph"
    if name.endswith("MultiLayerNetwork"):
        return obj.getLayerWiseConfigurations(), "MultiLayerNetwork"
    if name.endswith("ComputationGraph"):
        return obj.getConfiguration(), "ComputationGraph"
    raise EstimateError(
        f"cannot estimate a {name}: give a DL4J JSON file, a MultiLayerConfiguration, a "
        f"ComputationGraphConfiguration, a MultiLayerNetwork or a ComputationGraph"
    )


# ----------------------------------------------------------------------------- the estimate

_REPORT_TERMS = (
    ("parameters", ("PARAMETERS",), "both"),
    ("gradients", ("PARAMATER_GRADIENTS",), "train"),
    ("updater_state", ("UPDATER_STATE",), "train"),
    ("activations", ("ACTIVATIONS",), "both"),
    ("activation_gradients", ("ACTIVATION_GRADIENTS",), "train"),
    ("working_memory", ("WORKING_MEMORY_FIXED", "WORKING_MEMORY_VARIABLE", "CACHED_MEMORY_FIXED", "CACHED_MEMORY_VARIABLE"), "both"),
)


def _workspace_limits(loaded: _Loaded) -> dict[str, float]:
    """overallocationLimit of the workspaces DL4J's network class really uses (read by reflection)."""
    from org.deeplearning4j.nn.graph import ComputationGraph  # noqa: PLC0415
    from org.deeplearning4j.nn.multilayer import MultiLayerNetwork  # noqa: PLC0415

    cls = ComputationGraph if loaded.kind == "ComputationGraph" else MultiLayerNetwork
    net = cls(loaded.conf)  # no init(): no parameters allocated
    out = {}
    for fname in ("WS_ALL_LAYERS_ACT_CONFIG", "WS_LAYER_WORKING_MEM_CONFIG", "WS_LAYER_ACT_X_CONFIG", "WS_RNN_LOOP_WORKING_MEM_CONFIG"):
        fld = cls.class_.getDeclaredField(fname)
        fld.setAccessible(True)
        out[fname] = float(fld.get(net).getOverallocationLimit())
    return out


def estimate(model: Any, batch: int, dtype: str = "float32", mode: str = "train",
             input: str | dict | list | None = None,  # noqa: A002
             prefetch_queue: int = DL4J_FIT_PREFETCH_QUEUE, cpu_count: int | None = None) -> Estimate:
    """The memory `model` needs at minibatch `batch` in `dtype`, training or inferring.

    model: a DL4J JSON file path, JSON text, or a live MultiLayerConfiguration /
    ComputationGraphConfiguration / MultiLayerNetwork / ComputationGraph. input: the input
    type(s) when no `<name>.input.json` sidecar gives them ('cnn:32x32x3', see parse_input_spec).
    """
    check_batch(batch)
    dtype = normalize_dtype(dtype)
    mode = normalize_mode(mode)
    if prefetch_queue < 0:
        raise EstimateError(f"prefetch queue {prefetch_queue} is negative; DL4J's fit() uses {DL4J_FIT_PREFETCH_QUEUE}")
    loaded = load(model, input)
    from pyd4j.jvm import java_errors  # noqa: PLC0415

    with java_errors(), stdout_to_stderr():
        return _estimate_loaded(loaded, batch, dtype, mode, prefetch_queue, cpu_count)


def _estimate_loaded(loaded: _Loaded, batch: int, dtype: str, mode: str, prefetch_queue: int,
                     cpu_count: int | None) -> Estimate:
    from org.deeplearning4j.nn.conf import CacheMode  # noqa: PLC0415
    from org.deeplearning4j.nn.conf.memory import MemoryType, MemoryUseMode  # noqa: PLC0415
    from org.nd4j.linalg.api.buffer import DataType  # noqa: PLC0415

    in_types = [_input_type(s) for s in loaded.inputs]
    try:
        report = loaded.conf.getMemoryReport(*in_types) if loaded.kind == "ComputationGraph" \
            else loaded.conf.getMemoryReport(in_types[0])
    except Exception as exc:  # noqa: BLE001  (DL4J's message says which layer rejects the input)
        raise EstimateError(f"DL4J cannot build a memory report for {loaded.name} with input {loaded.inputs}: {exc}") from None
    use = MemoryUseMode.TRAINING if mode == "train" else MemoryUseMode.INFERENCE
    scale = DTYPE_BYTES[dtype] / 4  # the report is queried in FLOAT and scaled: it is linear in bytes/element

    def report_bytes(types: tuple[str, ...], mb: int) -> int:
        return sum(int(report.getMemoryBytes(getattr(MemoryType, t), mb, use, CacheMode.NONE, DataType.FLOAT)) for t in types)

    report_terms: list[Term] = []
    report_gaps: list[str] = []
    for name, types, when in _REPORT_TERMS:
        if when == "train" and mode != "train":
            continue
        try:
            one, two = report_bytes(types, 1), report_bytes(types, 2)
        except Exception as exc:  # noqa: BLE001  (DL4J's report of some layers lacks a figure: YOLO2's output layer)
            report_gaps.append(f"DL4J's NetworkMemoryReport cannot give {'+'.join(types)} for this network "
                               f"({type(exc).__name__}: {str(exc)[:160]}); that row is left out")
            continue
        per = (two - one) * scale
        fixed = one * scale - per
        report_terms.append(Term(name, "offheap", "dl4j-report", int(round(fixed)), int(round(per)),
                                 f"DL4J NetworkMemoryReport {'+'.join(types)}" + (f", scaled to {dtype}" if scale != 1 else "")))

    limits = _workspace_limits(loaded)
    ws_limit = max(limits.values())
    environment: dict[str, str] = {}
    unset: Term | None = None
    if mode == "train":
        terms, unset = _fit_terms(loaded, in_types, batch, dtype, limits, report, report_gaps)
        cross = report_terms
        from pyd4j.sched.fitmem import MALLOC_ENV  # noqa: PLC0415
        environment = dict(MALLOC_ENV)
    else:
        terms, cross = _inference_terms(loaded, report_terms, dtype, limits), []

    dsize = DTYPE_BYTES[dtype]
    sample_elems = sum(_input_elements(s) for s in loaded.inputs) + _label_elements(loaded, in_types)
    buffers = prefetch_queue + 2 if prefetch_queue else 1
    terms.append(Term("prefetch_buffers", "offheap", "estimate", PREFETCH_WORKSPACE_MIN_BYTES if prefetch_queue else 0,
                      sample_elems * dsize * buffers,
                      f"minibatches alive in the data pipeline: AsyncDataSetIterator queue {prefetch_queue} "
                      f"+ one being filled + one in use = {buffers} x (features + labels)"
                      + (f", in its prefetch workspace of at least {PREFETCH_WORKSPACE_MIN_BYTES // MiB} MiB" if prefetch_queue else "")))

    n_layers = int(_layer_count(loaded))
    n_params = int(report_bytes(("PARAMETERS",), 1) // 4)
    steps = max((int(s.get("timeSeriesLength", 0)) for s in loaded.inputs), default=0)
    live = HEAP_BASE_BYTES + HEAP_PER_LAYER_BYTES * n_layers + HEAP_PER_STEP_BYTES * steps * n_layers
    heap = max(HEAP_MIN_BYTES, int(live * HEAP_GC_FACTOR))
    terms.append(Term("java_heap", "heap", "estimate", heap, 0,
                      f"live Java objects ~{live // MiB} MiB (ND4J/DL4J state {HEAP_BASE_BYTES // MiB} MiB + "
                      f"{HEAP_PER_LAYER_BYTES // MiB} MiB x {n_layers} layers"
                      + (f" + {HEAP_PER_STEP_BYTES // 1024} KiB x {steps} steps x {n_layers} layers" if steps else "")
                      + f") x {HEAP_GC_FACTOR:g} for the collector, at least {HEAP_MIN_BYTES // MiB} MiB"))
    cpus = cpu_count if cpu_count is not None else (os.cpu_count() or 1)
    terms += jvm_native_terms(heap, cpus, n_layers)
    notes = (
        ("training terms are pyd4j's model of DL4J's fit() (pyd4j.sched.fitmem, the graph `pyd4j plan` plans); "
         "DL4J's NetworkMemoryReport is the cross-check beside them" if mode == "train" else
         "DL4J's report gives working memory as the largest layer's (not the sum): only one layer works at a time."),
        "dl4j-report terms are DL4J's NetworkMemoryReport; measured = read from the running JVM; estimate = pyd4j's model.",
        *report_gaps,
    )
    return Estimate(model=loaded.name, model_kind=loaded.kind, batch=batch, dtype=dtype, mode=mode,
                    inputs=tuple(str(t) for t in in_types), parameter_count=n_params, layer_count=n_layers,
                    terms=tuple(terms), workspace_overallocation=ws_limit, prefetch_queue=prefetch_queue,
                    cpu_count=cpus, notes=notes, report_terms=tuple(cross), environment=environment,
                    without_environment=unset)


def _fit_terms(loaded: _Loaded, in_types: list, batch: int, dtype: str, limits: dict[str, float], report,
               gaps: list[str]) -> tuple[list[Term], Term]:
    """DL4J's fit(), off the heap: the planner's graph of the network (pyd4j.sched.fitmem); and what glibc
    may keep on top without the model's malloc setting."""
    from pyd4j.sched.fitmem import MALLOC_ENV, REFERENCE_BATCH, FitWorkspaces, fit_terms, learning_bytes  # noqa: PLC0415
    from pyd4j.sched.updater_state import UnknownUpdater  # noqa: PLC0415

    graph = _graph(loaded, in_types, REFERENCE_BATCH, report, gaps)   # terms per sample: any batch gives the same
    ws = FitWorkspaces(activations=limits["WS_ALL_LAYERS_ACT_CONFIG"], working_memory=limits["WS_LAYER_WORKING_MEM_CONFIG"],
                       epsilons=limits["WS_LAYER_ACT_X_CONFIG"])
    try:
        parts = fit_terms(graph, ws)
    except UnknownUpdater as err:
        raise EstimateError(f"{loaded.name}: {err}") from None
    scale = DTYPE_BYTES[dtype] / graph.layers[0].itemsize   # the graph is in the configuration's data type
    setting = " ".join(assignments(MALLOC_ENV))
    unset = Term("kept_by_glibc", "offheap", "estimate", 0, int(round(learning_bytes(graph) * scale / graph.batch)),
                 f"without {setting}: arrays DL4J frees while its workspaces learn their size, which glibc may keep "
                 f"(5-108% of this measured)")
    return [replace(t, fixed_bytes=int(round(t.fixed_bytes * scale)), per_sample_bytes=int(round(t.per_sample_bytes * scale)),
                    below_batch=None if t.below_batch is None else math.ceil(t.below_batch / scale),   # pieces scale too
                    why=f"{t.why} (pyd4j.sched.fitmem)") for t in parts], unset


def _graph(loaded: _Loaded, in_types: list, batch: int, report, gaps: list[str]):
    """The planner's DL4J graph of the network at `batch`; shapes and parameter counts of the layers
    the planner has no rule for come from DL4J's own shape inference."""
    from pyd4j.sched.dl4j_json import graph_from_dl4j_json  # noqa: PLC0415
    from pyd4j.sched.graph import GraphError, LayerType  # noqa: PLC0415

    shapes = [_graph_shape(s) for s in loaded.inputs]
    doc = loaded.doc   # under truncated BPTT the graph is one segment: what fit() holds at a time
    shape = shapes if loaded.kind == "ComputationGraph" else shapes[0]
    info = _dl4j_info(loaded, in_types, batch, report, gaps)
    try:
        graph = graph_from_dl4j_json(doc, batch, shape, profile="dl4j", info=info)
        if any(layer.type is LayerType.OPAQUE for layer in graph.layers):
            graph = graph_from_dl4j_json(doc, batch, shape, profile="dl4j", info=_probed(info, doc, graph, loaded.name))
        return graph
    except GraphError as err:
        raise EstimateError(f"{loaded.name}: pyd4j's per-layer memory model cannot read this network ({err}); "
                            f"`pyd4j estimate --mode infer` gives DL4J's own report") from None


def _probed(info: dict[str, dict[str, Any]], doc: dict[str, Any], graph, where: str) -> dict[str, dict[str, Any]]:
    """`info` with the working memory of the graph's OPAQUE steps (the layers the planner has no
    model of: LSTM, ...) measured by probe iterations in DL4J (`pyd4j.memory.probe.fitted`: the steps
    DL4J's fit() runs, at two small batches) in place of DL4J's report's, which over-counts an
    LSTM's by about 1.6x. `pyd4j plan` measures them the same way."""
    from pyd4j.jvm.errors import JavaError  # noqa: PLC0415
    from pyd4j.memory.probe import FIT_BATCHES, fitted, of_configuration  # noqa: PLC0415
    from pyd4j.sched.graph import LayerType  # noqa: PLC0415

    inputs = [tuple(layer.out_shape) for layer in graph.layers if layer.type is LayerType.DATA]
    try:
        probed = fitted(of_configuration(doc, where))(inputs)
    except (EstimateError, JavaError) as err:   # no quiet fallback to DL4J's report, which over-counts an LSTM 1.6x
        opaque = ", ".join(layer.name for layer in graph.layers if layer.type is LayerType.OPAQUE)
        raise EstimateError(f"{where}: DL4J's probe iterations (batches {' and '.join(map(str, FIT_BATCHES))}) failed "
                            f"({err}); pyd4j measures the working memory of the layers it has no model of ({opaque}) "
                            "with them. Check that DL4J can train the network (a custom layer's jar goes on "
                            "PYD4J_CLASSPATH); `pyd4j estimate --mode infer` gives DL4J's own report") from None
    return {name: ({**v, "measured": probed[name]["measured"]} if "measured" in probed.get(name, {}) else v)
            for name, v in info.items()}


def _graph_shape(spec: dict[str, Any]) -> tuple[int, ...]:
    t = spec["type"]
    if t in ("convolutional", "convolutionalFlat"):
        return (int(spec["channels"]), int(spec["height"]), int(spec["width"]))
    if t == "recurrent":
        return (int(spec["size"]), int(spec["timeSeriesLength"]))
    return (int(spec["size"]),)


def _dl4j_info(loaded: _Loaded, in_types: list, batch: int, report, gaps: list[str]) -> dict[str, dict[str, Any]]:
    """Per layer or vertex name: DL4J's per-sample output shape and parameter count, and the
    working memory DL4J's own report gives it at `batch` -- the figures the planner uses for the
    layers it has no rule or measurement of (its OPAQUE nodes) until a probe measures them (`_probed`)."""
    from org.deeplearning4j.nn.conf import CacheMode  # noqa: PLC0415
    from org.deeplearning4j.nn.conf.memory import MemoryType, MemoryUseMode  # noqa: PLC0415
    from org.nd4j.linalg.api.buffer import DataType  # noqa: PLC0415

    reports = report.getLayerAndVertexReports()

    def working(name: str) -> dict[str, int]:
        r = reports.get(name)
        if r is None:
            return {}
        try:
            b = sum(int(r.getMemoryBytes(t, batch, MemoryUseMode.TRAINING, CacheMode.NONE, DataType.FLOAT))
                    for t in (MemoryType.WORKING_MEMORY_FIXED, MemoryType.WORKING_MEMORY_VARIABLE))
        except Exception as exc:  # noqa: BLE001  (a layer whose report has no training working memory: YOLO2's output)
            gaps.append(f"DL4J's report of {name!r} has no training working memory ({type(exc).__name__}); were the "
                        f"planner to need it (a layer it has no model of), its default for such a layer is used")
            return {}
        return {"measured": {"ws_forward": b, "ws_backward": b, "saved": 0}} if b else {}

    conf = loaded.conf
    info: dict[str, dict[str, Any]] = {}
    if loaded.kind == "ComputationGraph":
        types = conf.getLayerActivationTypes(*in_types)
        for name in conf.getVertices().keySet():
            info[str(name)] = {"shape": [int(d) for d in types.get(name).getShape(False)],
                               "params": int(conf.getVertices().get(name).numParams(True)), **working(name)}
        return info
    types = conf.getLayerActivationTypes(in_types[0])
    for i in range(int(conf.getConfs().size())):
        layer_conf = conf.getConf(i)
        layer = layer_conf.getLayer()
        name = str(layer.getLayerName()) if layer.getLayerName() is not None else f"layer{i}"
        info[name] = {"shape": [int(d) for d in types.get(i).getShape(False)],
                      "params": int(layer.initializer().numParams(layer_conf)), **working(name)}
    return info


def _inference_terms(loaded: _Loaded, report: list[Term], dtype: str, limits: dict[str, float]) -> list[Term]:
    """Inference: DL4J's report, its input preprocessors and its workspaces' over-allocation."""
    terms = list(report)
    pre_elems = _preprocessor_elements(loaded)
    if pre_elems:
        terms.append(Term("preprocessors", "offheap", "estimate", 0, pre_elems * DTYPE_BYTES[dtype],
                          "input preprocessors' outputs, missing from DL4J's report"))
    ws_limit = max(limits.values())
    act_fixed = sum(t.fixed_bytes for t in terms if t.name in ("activations", "working_memory", "preprocessors"))
    act_per = sum(t.per_sample_bytes for t in terms if t.name in ("activations", "working_memory", "preprocessors"))
    terms.append(Term("workspace_overallocation", "offheap", "measured", int(act_fixed * ws_limit), int(round(act_per * ws_limit)),
                      f"workspaces hold activations and working memory and over-allocate by their overallocationLimit, "
                      f"read from DL4J's {loaded.kind} ({', '.join(f'{k}={v:g}' for k, v in limits.items())})"))
    return terms


def jvm_native_bytes(cpus: int, layers: int) -> int:
    """The JVM's and native libraries' resident memory outside the heap and ND4J's arrays, under any collector
    (the JIT compiler's peak not included: a term of its own)."""
    return JVM_NATIVE_BASE_BYTES + NATIVE_PER_LAYER_BYTES * layers + NATIVE_PER_CPU_BYTES * cpus


def jvm_native_terms(heap_bytes: int, cpus: int, layers: int) -> list[Term]:
    """The JVM's own resident memory: what any collector needs, and G1's tables (which flags drop where they pin
    the Serial collector)."""
    return [Term("jvm_native", "native", "estimate", jvm_native_bytes(cpus, layers), 0,
                 f"the JVM's and native libraries' resident memory: {JVM_NATIVE_BASE_BYTES // MiB} MiB (classes, JIT code, "
                 f"threads, libnd4j/oneDNN/OpenBLAS) + {NATIVE_PER_LAYER_BYTES // 1024} KiB x {layers} layers (ND4J's "
                 f"cached shapes, oneDNN's primitives) + {NATIVE_PER_CPU_BYTES // MiB} MiB x {cpus} CPUs; measured as "
                 f"RSS, 102-141 MiB from 3 to 175 layers"),
            Term(LONG_RUN_TERM, "native", "measured", LONG_RUN_BYTES, 0,
                 f"what a long run holds beyond the base (fitted on 3 iterations): the JIT compiler's code and C2's "
                 f"arenas while it compiles the job's hot loop; measured up to 61 MiB over 1000-3000 iterations, "
                 f"{LONG_RUN_CAPPED_BYTES // MiB} MiB where C2's node limit is pinned (at most 36 MiB measured)"),
            Term(G1_TERM, "native", "estimate", int(heap_bytes * G1_TABLES_FRACTION), 0,
                 f"G1's remembered sets and marking tables, {G1_TABLES_FRACTION:.0%} of the heap, measured against the "
                 f"Serial collector; only where the JVM runs G1 (the JVM's default with {SERVER_CLASS_CPUS}+ CPUs and "
                 f"{SERVER_CLASS_BYTES // MiB}+ MiB)")]


def collector(container_bytes: int, cpus: int) -> str:
    """The collector a JDK 17 JVM picks by itself in a container of `container_bytes` with `cpus` CPUs."""
    return "G1" if cpus >= SERVER_CLASS_CPUS and container_bytes >= SERVER_CLASS_BYTES else "Serial"


def _layer_count(loaded: _Loaded) -> int:
    if loaded.kind == "ComputationGraph":
        return int(loaded.conf.getVertices().size())
    return int(loaded.conf.getConfs().size())


def _preprocessor_elements(loaded: _Loaded) -> int:
    """Per-example elements output by the network's input preprocessors."""
    if loaded.kind != "MultiLayerNetwork":
        return 0
    conf = loaded.conf
    types = conf.getLayerActivationTypes(_input_type(loaded.inputs[0]))
    total = 0
    for i in range(int(conf.getConfs().size())):
        if conf.getInputPreProcess(i) is not None:
            before = _input_type(loaded.inputs[0]) if i == 0 else types.get(i - 1)
            total += int(before.arrayElementsPerExample())
    return total


def _label_elements(loaded: _Loaded, in_types: list) -> int:
    conf = loaded.conf
    if loaded.kind == "ComputationGraph":
        types = conf.getLayerActivationTypes(*in_types)
        return sum(int(types.get(o).arrayElementsPerExample()) for o in conf.getNetworkOutputs())
    types = conf.getLayerActivationTypes(in_types[0])
    return int(types.get(types.size() - 1).arrayElementsPerExample())
