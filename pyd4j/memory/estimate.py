"""What a DL4J network needs in memory: the planner's per-layer model of DL4J's fit(), DL4J's report beside it.

`estimate(model, batch, dtype, mode)` reads a MultiLayerConfiguration or ComputationGraphConfiguration
(a DL4J JSON file, its text, or a live Java object) in the in-process JVM. Training, its off-heap
terms are the one DL4J memory model `pyd4j.dl4j.fitmem` (the graph `pyd4j plan` plans, with the
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

import math
import os
from dataclasses import asdict, dataclass, field, replace
from typing import Any


from pyd4j.dl4j.config import ConfigurationError, network_of
from pyd4j.dl4j.fitmem import Region, Term
from pyd4j.dl4j.inference import workspace_line
from pyd4j.dl4j.input_types import array_shape, input_elements, java_input_type, planner_shape
from pyd4j.dl4j.load import Loaded, load
from pyd4j.dl4j.sizecheck import parameter_count
from pyd4j.dtypes import numpy_dtype
from pyd4j.inputs import JAVA_INT_MAX, InputError
from pyd4j.memory.jvm_overhead import jvm_native_terms
from pyd4j.output import human_bytes, stdout_to_stderr

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
    """The job's environment the terms assume (glibc's malloc setting of pyd4j.dl4j.fitmem); pyd4j's
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
        from pyd4j.dl4j.fitmem import LSTM_KEPT_TERM  # noqa: PLC0415 - as _fit_terms imports the planner's model

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


# ----------------------------------------------------------------------------- the estimate

_REPORT_TERMS = (
    ("parameters", ("PARAMETERS",), "both"),
    ("gradients", ("PARAMATER_GRADIENTS",), "train"),
    ("updater_state", ("UPDATER_STATE",), "train"),
    ("activations", ("ACTIVATIONS",), "both"),
    ("activation_gradients", ("ACTIVATION_GRADIENTS",), "train"),
    ("working_memory", ("WORKING_MEMORY_FIXED", "WORKING_MEMORY_VARIABLE", "CACHED_MEMORY_FIXED", "CACHED_MEMORY_VARIABLE"), "both"),
)


def _workspace_limits(loaded: Loaded) -> dict[str, float]:
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


def _dl4j_report(loaded: Loaded, in_types: list, mode: str, gaps: list[str]) -> Any:
    """DL4J's NetworkMemoryReport, or None for inference when DL4J cannot build it (inference measures
    what it needs; the report is its cross-check). fit()'s model reads layers' working memory from it."""
    try:
        return loaded.conf.getMemoryReport(*in_types) if loaded.kind == "ComputationGraph" \
            else loaded.conf.getMemoryReport(in_types[0])
    except Exception as exc:  # noqa: BLE001  (DL4J's message says which layer rejects the input)
        said = f"DL4J cannot build a memory report for {loaded.name} with input {loaded.inputs}: {exc}"
        if mode == "train":
            raise EstimateError(said) from None
        gaps.append(f"{said}; DL4J's report is left out")
        return None


def _report_terms(report: Any, mode: str, dtype: str, gaps: list[str]) -> list[Term]:
    """DL4J's report's rows as terms (lines through batches 1 and 2); a row it cannot give goes to `gaps`."""
    from org.deeplearning4j.nn.conf import CacheMode  # noqa: PLC0415
    from org.deeplearning4j.nn.conf.memory import MemoryType, MemoryUseMode  # noqa: PLC0415
    from org.nd4j.linalg.api.buffer import DataType  # noqa: PLC0415

    use = MemoryUseMode.TRAINING if mode == "train" else MemoryUseMode.INFERENCE
    scale = DTYPE_BYTES[dtype] / 4  # the report is queried in FLOAT and scaled: it is linear in bytes/element

    def report_bytes(types: tuple[str, ...], mb: int) -> int:
        return sum(int(report.getMemoryBytes(getattr(MemoryType, t), mb, use, CacheMode.NONE, DataType.FLOAT)) for t in types)

    terms: list[Term] = []
    for name, types, when in _REPORT_TERMS:
        if report is None or (when == "train" and mode != "train"):
            continue
        try:
            one, two = report_bytes(types, 1), report_bytes(types, 2)
        except Exception as exc:  # noqa: BLE001  (DL4J's report of some layers lacks a figure: YOLO2's output layer)
            gaps.append(f"DL4J's NetworkMemoryReport cannot give {'+'.join(types)} for this network "
                        f"({type(exc).__name__}: {str(exc)[:160]}); that row is left out")
            continue
        per = (two - one) * scale
        fixed = one * scale - per
        terms.append(Term(name, "offheap", "dl4j-report", int(round(fixed)), int(round(per)),
                          f"DL4J NetworkMemoryReport {'+'.join(types)}" + (f", scaled to {dtype}" if scale != 1 else "")))
    return terms


def _estimate_loaded(loaded: Loaded, batch: int, dtype: str, mode: str, prefetch_queue: int,
                     cpu_count: int | None) -> Estimate:
    in_types = [java_input_type(s) for s in loaded.inputs]
    report_gaps: list[str] = []
    report = _dl4j_report(loaded, in_types, mode, report_gaps)
    report_terms = _report_terms(report, mode, dtype, report_gaps)

    limits = _workspace_limits(loaded)
    ws_limit = max(limits.values())
    environment: dict[str, str] = {}
    unset: Term | None = None
    if mode == "train":
        terms, unset = _fit_terms(loaded, in_types, batch, dtype, limits, report, report_gaps)
        cross = report_terms
        from pyd4j.dl4j.fitmem import MALLOC_ENV  # noqa: PLC0415
        environment = dict(MALLOC_ENV)
    else:
        terms, cross = _inference_terms(loaded, report_terms, dtype), [t for t in report_terms if t.name != "parameters"]

    dsize = DTYPE_BYTES[dtype]
    sample_elems = sum(input_elements(s) for s in loaded.inputs) + _label_elements(loaded, in_types)
    buffers = prefetch_queue + 2 if prefetch_queue else 1
    terms.append(Term("prefetch_buffers", "offheap", "estimate", PREFETCH_WORKSPACE_MIN_BYTES if prefetch_queue else 0,
                      sample_elems * dsize * buffers,
                      f"minibatches alive in the data pipeline: AsyncDataSetIterator queue {prefetch_queue} "
                      f"+ one being filled + one in use = {buffers} x (features + labels)"
                      + (f", in its prefetch workspace of at least {PREFETCH_WORKSPACE_MIN_BYTES // MiB} MiB" if prefetch_queue else "")))

    n_layers = int(_layer_count(loaded))
    n_params = parameter_count(loaded.conf)
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
        ("training terms are pyd4j's model of DL4J's fit() (pyd4j.dl4j.fitmem, the graph `pyd4j plan` plans); "
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


def _fit_terms(loaded: Loaded, in_types: list, batch: int, dtype: str, limits: dict[str, float], report,
               gaps: list[str]) -> tuple[list[Term], Term]:
    """DL4J's fit(), off the heap: the planner's graph of the network (pyd4j.dl4j.fitmem); and what glibc
    may keep on top without the model's malloc setting."""
    from pyd4j.dl4j.fitmem import MALLOC_ENV, REFERENCE_BATCH, FitWorkspaces, fit_terms, learning_bytes  # noqa: PLC0415
    from pyd4j.dl4j.updater_state import UnknownUpdater  # noqa: PLC0415

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
                    why=f"{t.why} (pyd4j.dl4j.fitmem)") for t in parts], unset


def _graph(loaded: Loaded, in_types: list, batch: int, report, gaps: list[str]):
    """The planner's DL4J graph of the network at `batch`; shapes and parameter counts of the layers
    the planner has no rule for come from DL4J's own shape inference."""
    from pyd4j.dl4j.graph import graph_from_dl4j_json  # noqa: PLC0415
    from pyd4j.sched.graph import GraphError, LayerType  # noqa: PLC0415

    shapes = [planner_shape(s) for s in loaded.inputs]
    doc = loaded.doc   # under truncated BPTT the graph is one segment: what fit() holds at a time
    shape = shapes if loaded.kind == "ComputationGraph" else shapes[0]
    info = _dl4j_info(loaded, in_types, batch, report, gaps)
    try:
        graph = graph_from_dl4j_json(doc, batch, shape, framework="dl4j", info=info)
        if any(layer.type is LayerType.OPAQUE for layer in graph.layers):
            graph = graph_from_dl4j_json(doc, batch, shape, framework="dl4j", info=_probed(info, doc, graph, loaded.name))
        return graph
    except GraphError as err:
        raise EstimateError(f"{loaded.name}: pyd4j's per-layer memory model cannot read this network ({err}); "
                            f"`pyd4j estimate --mode infer` gives DL4J's own report") from None


def _probed(info: dict[str, dict[str, Any]], doc: dict[str, Any], graph, where: str) -> dict[str, dict[str, Any]]:
    """`info` with the working memory of the graph's OPAQUE steps (the layers the planner has no
    model of: LSTM, ...) measured by probe iterations in DL4J (`pyd4j.dl4j.probe.fitted`: the steps
    DL4J's fit() runs, at two small batches) in place of DL4J's report's, which over-counts an
    LSTM's by about 1.6x. `pyd4j plan` measures them the same way."""
    from pyd4j.jvm.errors import JavaError  # noqa: PLC0415
    from pyd4j.dl4j.probe import FIT_BATCHES, fitted, of_configuration  # noqa: PLC0415
    from pyd4j.sched.graph import LayerType  # noqa: PLC0415

    inputs = [tuple(layer.out_shape) for layer in graph.layers if layer.type is LayerType.DATA]
    try:
        probed = fitted(of_configuration(doc, where))(inputs)
    except (ConfigurationError, JavaError) as err:   # no quiet fallback to DL4J's report, which over-counts an LSTM 1.6x
        opaque = ", ".join(layer.name for layer in graph.layers if layer.type is LayerType.OPAQUE)
        raise EstimateError(f"{where}: DL4J's probe iterations (batches {' and '.join(map(str, FIT_BATCHES))}) failed "
                            f"({err}); pyd4j measures the working memory of the layers it has no model of ({opaque}) "
                            "with them. Check that DL4J can train the network (a custom layer's jar goes on "
                            "PYD4J_CLASSPATH); `pyd4j estimate --mode infer` gives DL4J's own report") from None
    return {name: ({**v, "measured": probed[name]["measured"]} if "measured" in probed.get(name, {}) else v)
            for name, v in info.items()}


def _dl4j_info(loaded: Loaded, in_types: list, batch: int, report, gaps: list[str]) -> dict[str, dict[str, Any]]:
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


def _inference_terms(loaded: Loaded, report: list[Term], dtype: str) -> list[Term]:
    """Inference: the parameters (DL4J's report, exact), DL4J's inference workspaces as output() settles
    them (`pyd4j.dl4j.inference`: measured at batch 1 and a second batch, a line in the batch) and the input and
    output arrays of one call. DL4J's report of activations and working memory is only the cross-check:
    it was 0.25-1.65x of the workspaces output() really holds on zoo networks."""
    net = loaded.live if loaded.live is not None else network_of(loaded.conf, loaded.kind, init=True)
    np_dtype = numpy_dtype(str(net.params().dataType().name()))
    itemsize = np_dtype.itemsize
    fixed, per, out_bytes = workspace_line(net, [array_shape(s, 1)[1:] for s in loaded.inputs], np_dtype)
    scale = DTYPE_BYTES[dtype] / itemsize
    in_elems = sum(input_elements(s) for s in loaded.inputs)
    terms = [t for t in report if t.name == "parameters"] or [
        Term("parameters", "offheap", "estimate", parameter_count(loaded.conf) * DTYPE_BYTES[dtype], 0,
             "the parameters DL4J allocates (numParams of each layer; DL4J's report has no figure for this network)")]
    terms.append(Term("inference_workspaces", "offheap", "measured", int(fixed * scale), int(round(per * scale)),
                      "DL4J's inference workspaces once output() has settled them, measured at batch 1 and a "
                      "larger batch (a line in the batch)"
                      + (f", scaled to {dtype}" if scale != 1 else "")))
    terms.append(Term("call_arrays", "offheap", "estimate", 0, int(round((in_elems * itemsize + out_bytes) * scale)),
                      "the input and output arrays of one output() call"
                      + (f", scaled to {dtype}" if scale != 1 else "")))
    return terms


def _layer_count(loaded: Loaded) -> int:
    if loaded.kind == "ComputationGraph":
        return int(loaded.conf.getVertices().size())
    return int(loaded.conf.getConfs().size())


def _label_elements(loaded: Loaded, in_types: list) -> int:
    conf = loaded.conf
    if loaded.kind == "ComputationGraph":
        types = conf.getLayerActivationTypes(*in_types)
        return sum(int(types.get(o).arrayElementsPerExample()) for o in conf.getNetworkOutputs())
    types = conf.getLayerActivationTypes(in_types[0])
    return int(types.get(types.size() - 1).arrayElementsPerExample())
