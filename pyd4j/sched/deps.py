"""The per-op dependency model: what each layer's FORWARD, BACKWARD and RECOMPUTE step must
hold on the device, per framework (the dependencies of each named framework's layers).

Everything that decides memory -- the bound (`pyd4j.sched.bounds`), the records
(`pyd4j.sched.emit`), the checks and accounting of the simulator, the recomputation policy
and the executors -- asks this module instead of assuming "backward reads the inputs and the
output". The table itself is data (`deps.json`, next to this module):

- a framework (`cudnn`: cuDNN layers as the SuperNeurons release code registers their
  dependencies; `dl4j`: Deeplearning4j's layers) maps a layer type, or `TYPE.variant` for a
  layer whose `attrs["variant"]` is set (`ELTWISE.prod`, `ACT.fused`), to the roles each step
  reads and writes -- x (the inputs' outputs), y (its own output), dy, dx, w, dw -- plus
  in-place rules, mandatory scratch (`workspace`), named persistent per-layer `state`
  (cuDNN's BN running statistics, dropout reserve space), what a forward step keeps for its own
  backward step (`saved`: DL4J's batch-norm xMu/xHat, dropout masks), a framework-wide
  `input_dropout` (what a layer with input dropout keeps, whether its backward still reads its
  inputs), a framework-wide `keep_dw` and, for a framework whose convolutions have their own
  algorithms, `conv_algorithms` (the cost model offers these instead of its device table; DL4J's
  are batch chunks, see `chunked_scratch`);
- a graph carries its framework (`Graph(..., framework="cudnn")`, the default; `graph.framework`);
- `pyd4j.sched.graph_deps` applies the framework's dependencies to one graph: per layer, the tensors each step
  reads and writes, which in-place rewrites are possible, and the bytes of scratch and state.

Correcting an entry from measurements: edit `deps.json`, or pass a JSON document of the same
shape (only the entries to change) to `framework_deps(name, overrides)`; an entry given there
replaces the table's entry of that layer key and step (`{"frameworks": {"dl4j": {"layers": {"BN":
{"backward": {...}}}}}}`; documents written with the old key `profiles` are read alike). A new
framework is a new key under `frameworks`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyd4j.sched.plan import aligned

if TYPE_CHECKING:
    from pyd4j.sched.graph import Graph
    from pyd4j.sched.layer import Layer

ROLES = ("x", "y", "dy", "dx", "w", "dw")
READ_ROLES = frozenset({"x", "y", "dy", "w"})
WRITE_ROLES = frozenset({"y", "dx", "dw"})
SIZE_TERMS = ("y", "x", "im2col", "channels", "bytes")
SCRATCH = {"step": "each step holds its own scratch while it runs",
           "held": "one scratch workspace, as large as the largest step's, held for the whole iteration "
                   "(DL4J's working-memory workspace, which learns its size and keeps it)"}
DEFAULT_FRAMEWORK = "cudnn"


class DepsError(ValueError):
    """A framework or an entry of the dependency table is malformed or missing."""


@dataclass(frozen=True)
class Size:
    """Bytes as a sum of multiples: of the layer's output (`y`), of all its inputs (`x`), of a
    CONV layer's patch matrix (`im2col`), of per-channel values (`channels`), plus `bytes`."""

    y: float = 0.0
    x: float = 0.0
    im2col: float = 0.0
    channels: float = 0.0
    bytes: int = 0

    @classmethod
    def from_doc(cls, doc: dict[str, Any] | None, where: str) -> "Size":
        doc = doc or {}
        bad = set(doc) - set(SIZE_TERMS)
        if bad:
            raise DepsError(f"{where}: unknown size terms {sorted(bad)}; use {list(SIZE_TERMS)}")
        return cls(**{k: float(v) if k != "bytes" else int(v) for k, v in doc.items()})

    def __bool__(self) -> bool:
        return any((self.y, self.x, self.im2col, self.channels, self.bytes))

    def of(self, graph: "Graph", layer: "Layer") -> int:
        """Unaligned bytes for `layer` of `graph`."""
        if not self:
            return 0
        total = self.y * layer.out_bytes + float(self.bytes)
        if self.x:
            total += self.x * sum(graph.layers[j].out_bytes for j in layer.inputs)
        if self.channels:
            total += self.channels * layer.out_shape[1] * layer.itemsize
        if self.im2col:
            if "kernel" not in layer.attrs:
                raise DepsError(f"layer {layer.name!r} ({layer.type.value}) has no patch matrix "
                                "(im2col is for CONV layers)")
            total += self.im2col * im2col_bytes(graph, layer)
        return int(math.ceil(total))


def im2col_bytes(graph: "Graph", layer: "Layer") -> int:
    """Bytes of a CONV layer's patch matrix: C*KH*KW values per output position and sample
    (C / groups for a grouped convolution, which runs one group at a time)."""
    n, c = graph.layers[layer.inputs[0]].out_shape[:2]
    c //= layer.attrs.get("groups", 1)
    _, _, oh, ow = layer.out_shape
    kh, kw = layer.attrs["kernel"]
    return c * kh * kw * oh * ow * n * layer.itemsize


def chunkable(layer: "Layer") -> bool:
    """Whether a step of `layer` may run in batch chunks (a framework's `batch_chunks` algorithms;
    org.pyd4j.train.ChunkedStep): a plain DL4J ConvolutionLayer, or a LocalResponseNormalization
    (its backward step holds eight input-sized arrays), without input dropout (one mask is drawn for
    the whole batch). Both compute each sample on its own and keep nothing from forward for
    backward. An input preprocessor (a reshape per sample) runs on the whole batch first. A layer
    in its sliced form (variant `sliced`: batch normalization in two passes, an activation layer)
    runs in slices too."""
    dl4j = layer.attrs.get("dl4j", {})
    kind = (layer.type.value, dl4j.get("class"))
    if layer.attrs.get("variant") == "sliced":   # `pyd4j.sched.choose.sliced_variant`
        return True
    if layer.type.value == "BN":   # DL4J's own: its statistics span the batch
        return False
    return (kind in (("CONV", "ConvolutionLayer"), ("CONV", "Convolution2D"), ("LRN", "LocalResponseNormalization"))
            and layer.attrs.get("idropout") is None)


def chunk_rows(batch: int, chunks: int) -> int:
    """Samples in the largest of `chunks` batch slices (the first slices take the remainder)."""
    return -(-batch // max(1, min(chunks, batch)))


def chunked_scratch(graph: "Graph", layer: "Layer", backward: bool, scratch: int, chunks: int) -> int:
    """Aligned bytes a step with mandatory scratch `scratch` (unheld) holds when it runs in
    `chunks` batch slices: the scratch of the largest slice (everything DL4J's convolution allocates
    scales with the batch: the patch matrix, its gradient, the col2im buffer, the pre-activation
    and its copies) plus what the slicing itself holds while the step runs -- the slice's output
    (FORWARD, copied into the whole output) or the slice's input gradient and the running sum of
    the parameter gradients (BACKWARD)."""
    n = layer.out_shape[0]
    rows = chunk_rows(n, chunks)
    if rows >= n:
        return scratch
    if backward:
        extra = sum(graph.layers[j].out_bytes for j in layer.inputs) * rows / n + layer.param_bytes
    else:
        extra = layer.out_bytes * rows / n
    return aligned(math.ceil(scratch * rows / n + extra))


@dataclass(frozen=True)
class StepDeps:
    """What one step of a layer reads and writes (roles), and what else it must hold."""

    reads: frozenset[str] = frozenset()
    writes: frozenset[str] = frozenset()
    inplace: str | None = None  # forward: "x"; backward: "dy" or "y"
    workspace: Size = Size()
    algorithm_workspace: bool = False

    @classmethod
    def from_doc(cls, doc: dict[str, Any], where: str, backward: bool) -> "StepDeps":
        bad = set(doc) - {"reads", "writes", "inplace", "workspace", "algorithm_workspace"}
        if bad:
            raise DepsError(f"{where}: unknown keys {sorted(bad)}")
        reads, writes = frozenset(doc.get("reads", ())), frozenset(doc.get("writes", ()))
        if reads - READ_ROLES:
            raise DepsError(f"{where}: reads {sorted(reads - READ_ROLES)}; a step reads from "
                            f"{sorted(READ_ROLES)}")
        if writes - WRITE_ROLES:
            raise DepsError(f"{where}: writes {sorted(writes - WRITE_ROLES)}; a step writes "
                            f"{sorted(WRITE_ROLES)}")
        inplace = doc.get("inplace")
        allowed = ("dy", "y") if backward else ("x",)
        if inplace is not None and (inplace not in allowed or inplace not in reads):
            raise DepsError(f"{where}: inplace {inplace!r} must be one of {allowed} and read "
                            "by the step")
        return cls(reads, writes, inplace, Size.from_doc(doc.get("workspace"), where),
                   bool(doc.get("algorithm_workspace", False)))


@dataclass(frozen=True)
class LayerDeps:
    """A layer type's steps under one framework, and its persistent state."""

    forward: StepDeps
    backward: StepDeps | None
    recompute: StepDeps
    state: dict[str, Size] = field(default_factory=dict)
    saved: Size = Size()


@dataclass(frozen=True)
class InputDropout:
    """What a layer with input dropout keeps from its forward to its backward step (`saved`),
    and whether its backward still reads its inputs' outputs."""

    saved: Size = Size()
    backward_reads_x: bool = True


CONV_ALGO_KEYS = frozenset({"name", "speed", "batch_chunks"})


@dataclass(frozen=True)
class FrameworkDeps:
    """A named framework's dependencies: one `LayerDeps` per layer key, `keep_dw`, `input_dropout`,
    and the framework's own convolution algorithms (`conv_algorithms`, empty: the cost model's
    device table applies)."""

    name: str
    description: str
    keep_dw: bool
    layers: dict[str, LayerDeps]
    input_dropout: InputDropout | None = None
    scratch: str = "step"  # "step": each step's scratch only while it runs; "held": see SCRATCH
    conv_algorithms: tuple[dict[str, Any], ...] = ()

    @property
    def chunk_counts(self) -> tuple[int, ...]:
        """Batch chunks of each of `conv_algorithms` (0: not a batch-chunk algorithm)."""
        return tuple(int(a.get("batch_chunks", 0)) for a in self.conv_algorithms)

    def of(self, layer: "Layer") -> LayerDeps:
        """The entry for `layer`: `TYPE.variant` when the layer has a variant and the framework
        an entry for it, else `TYPE`."""
        variant = layer.attrs.get("variant")
        if variant is not None:
            hit = self.layers.get(f"{layer.type.value}.{variant}")
            if hit is not None:
                return hit
        hit = self.layers.get(layer.type.value)
        if hit is None:
            raise DepsError(f"framework {self.name!r} has no entry for {layer.type.value} layer "
                            f"{layer.name!r}; add one to deps.json or an overrides document")
        return hit

    @classmethod
    def from_doc(cls, name: str, doc: dict[str, Any]) -> "FrameworkDeps":
        layers = {}
        for key, entry in doc.get("layers", {}).items():
            if key.startswith("_"):
                continue
            where = f"framework {name!r}, {key}"
            bad = {k for k in entry if not k.startswith("_")} - {"forward", "backward",
                                                                 "recompute", "state",
                                                                 "saved"}
            if bad:
                raise DepsError(f"{where}: unknown keys {sorted(bad)}")
            if "forward" not in entry:
                raise DepsError(f"{where}: no forward step")
            fwd = StepDeps.from_doc(entry["forward"], f"{where} forward", False)
            bwd = (StepDeps.from_doc(entry["backward"], f"{where} backward", True)
                   if entry.get("backward") else None)
            rc = (StepDeps.from_doc(entry["recompute"], f"{where} recompute", False)
                  if entry.get("recompute") else fwd)
            state = {k: Size.from_doc(v, f"{where} state {k}")
                     for k, v in entry.get("state", {}).items()}
            saved = Size.from_doc(entry.get("saved"), f"{where} saved")
            if state and saved:
                raise DepsError(f"{where}: a layer has persistent state or saved tensors, not both")
            layers[key] = LayerDeps(fwd, bwd, rc, state, saved)
        idrop = doc.get("input_dropout")
        input_dropout = None
        if idrop is not None:
            bad = {k for k in idrop if not k.startswith("_")} - {"saved", "backward_reads_x"}
            if bad:
                raise DepsError(f"framework {name!r}, input_dropout: unknown keys {sorted(bad)}")
            input_dropout = InputDropout(Size.from_doc(idrop.get("saved"), f"framework {name!r}, input_dropout"),
                                         bool(idrop.get("backward_reads_x", True)))
        scratch = doc.get("scratch", "step")
        if scratch not in SCRATCH:
            raise DepsError(f"framework {name!r}: scratch {scratch!r}; use one of {sorted(SCRATCH)}")
        algos = []
        for k, a in enumerate(doc.get("conv_algorithms", ())):
            entry = {key: v for key, v in a.items() if not key.startswith("_")}
            bad = set(entry) - CONV_ALGO_KEYS
            if bad or "name" not in entry or "speed" not in entry:
                raise DepsError(f"framework {name!r}, conv_algorithms[{k}]: keys {sorted(entry)}; an "
                                f"algorithm has name and speed, optionally batch_chunks")
            chunks = int(entry.get("batch_chunks", 0))
            if chunks < 0 or (k == 0 and chunks > 1):
                raise DepsError(f"framework {name!r}, conv_algorithms[{k}]: batch_chunks {chunks}; "
                                "the first algorithm is the default (1 chunk or none)")
            algos.append(entry)
        return cls(name, doc.get("description", ""), bool(doc.get("keep_dw", False)), layers,
                   input_dropout, scratch, tuple(algos))


def _table() -> dict[str, Any]:
    with resources.files("pyd4j.sched").joinpath("deps.json").open() as f:
        return json.load(f)


_TABLE: dict[str, Any] | None = None
_FRAMEWORKS: dict[str, FrameworkDeps] = {}


def framework_names() -> list[str]:
    """Names of the built-in frameworks."""
    global _TABLE
    if _TABLE is None:
        _TABLE = _table()
    return sorted(_TABLE["frameworks"])


def framework_deps(name: "str | FrameworkDeps" = DEFAULT_FRAMEWORK,
                   overrides: dict[str, Any] | str | Path | None = None) -> FrameworkDeps:
    """A built-in framework's dependencies by name, with `overrides` (a dict or JSON file shaped like deps.json,
    partial allowed) replacing entries step by step."""
    global _TABLE
    if isinstance(name, FrameworkDeps) and overrides is None:
        return name
    key = name.name if isinstance(name, FrameworkDeps) else name
    if overrides is None and key in _FRAMEWORKS:
        return _FRAMEWORKS[key]
    if _TABLE is None:
        _TABLE = _table()
    extra: dict[str, Any] = {}
    if overrides is not None:
        extra = overrides if isinstance(overrides, dict) else json.loads(Path(overrides).read_text())
        # "profiles": the key's old name, in override documents users already have
        extra = {**extra.get("profiles", {}), **extra.get("frameworks", {})}.get(key, {})
    if key not in _TABLE["frameworks"] and not extra:
        raise DepsError(f"unknown framework {key!r}; known: {framework_names()}")
    doc = json.loads(json.dumps(_TABLE["frameworks"].get(key, {})))
    for k, v in extra.items():
        if k == "layers":
            for lk, entry in v.items():
                doc.setdefault("layers", {}).setdefault(lk, {}).update(entry)
        else:
            doc[k] = v
    fw = FrameworkDeps.from_doc(key, doc)
    if overrides is None:
        _FRAMEWORKS[key] = fw
    return fw
