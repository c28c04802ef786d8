"""The per-op dependency model: what each layer's FORWARD, BACKWARD and RECOMPUTE step must
hold on the device, in named framework profiles.

Everything that decides memory -- the bound (`pyd4j.sched.bounds`), the records
(`pyd4j.sched.emit`), the checks and accounting of the simulator, the recomputation policy
and the executors -- asks this module instead of assuming "backward reads the inputs and the
output". The table itself is data (`deps.json`, next to this module):

- a profile (`cudnn`: cuDNN layers as the SuperNeurons release code registers their
  dependencies; `dl4j`: Deeplearning4j's layers) maps a layer type, or `TYPE.variant` for a
  layer whose `attrs["variant"]` is set (`ELTWISE.prod`, `ACT.fused`), to the roles each step
  reads and writes -- x (the inputs' outputs), y (its own output), dy, dx, w, dw -- plus
  in-place rules, mandatory scratch (`workspace`), named persistent per-layer `state`
  (cuDNN's BN running statistics, dropout reserve space), what a forward step keeps for its own
  backward step (`saved`: DL4J's batch-norm xMu/xHat, dropout masks), a profile-wide
  `input_dropout` (what a layer with input dropout keeps, whether its backward still reads its
  inputs), a profile-wide `keep_dw` and, for a framework whose convolutions have their own
  algorithms, `conv_algorithms` (the cost model offers these instead of its device table; DL4J's
  are batch chunks, see `chunked_scratch`);
- a graph carries its profile (`Graph(..., profile="cudnn")`, the default);
- `graph_deps(graph)` applies the profile to one graph: per layer, the tensors each step reads
  and writes, which in-place rewrites are possible, and the bytes of scratch and state.

Correcting an entry from measurements: edit `deps.json`, or pass a JSON document of the same
shape (only the entries to change) to `profile(name, overrides)`; an entry given there replaces
the table's entry of that layer key and step (`{"profiles": {"dl4j": {"layers": {"BN":
{"backward": {...}}}}}}`). A new profile is a new key under `profiles`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyd4j.sched.layer import LayerType
from pyd4j.sched.plan import ALIGNMENT, aligned

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
DEFAULT_PROFILE = "cudnn"


class DepsError(ValueError):
    """A profile or an entry of the dependency table is malformed or missing."""


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
    """Whether a step of `layer` may run in batch chunks (a profile's `batch_chunks` algorithms;
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
    """A layer type's steps under one profile, and its persistent state."""

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
class Profile:
    """A named framework profile: one `LayerDeps` per layer key, `keep_dw`, `input_dropout`,
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
        """The entry for `layer`: `TYPE.variant` when the layer has a variant and the profile
        an entry for it, else `TYPE`."""
        variant = layer.attrs.get("variant")
        if variant is not None:
            hit = self.layers.get(f"{layer.type.value}.{variant}")
            if hit is not None:
                return hit
        hit = self.layers.get(layer.type.value)
        if hit is None:
            raise DepsError(f"profile {self.name!r} has no entry for {layer.type.value} layer "
                            f"{layer.name!r}; add one to deps.json or an overrides document")
        return hit

    @classmethod
    def from_doc(cls, name: str, doc: dict[str, Any]) -> "Profile":
        layers = {}
        for key, entry in doc.get("layers", {}).items():
            if key.startswith("_"):
                continue
            where = f"profile {name!r}, {key}"
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
                raise DepsError(f"profile {name!r}, input_dropout: unknown keys {sorted(bad)}")
            input_dropout = InputDropout(Size.from_doc(idrop.get("saved"), f"profile {name!r}, input_dropout"),
                                         bool(idrop.get("backward_reads_x", True)))
        scratch = doc.get("scratch", "step")
        if scratch not in SCRATCH:
            raise DepsError(f"profile {name!r}: scratch {scratch!r}; use one of {sorted(SCRATCH)}")
        algos = []
        for k, a in enumerate(doc.get("conv_algorithms", ())):
            entry = {key: v for key, v in a.items() if not key.startswith("_")}
            bad = set(entry) - CONV_ALGO_KEYS
            if bad or "name" not in entry or "speed" not in entry:
                raise DepsError(f"profile {name!r}, conv_algorithms[{k}]: keys {sorted(entry)}; an "
                                f"algorithm has name and speed, optionally batch_chunks")
            chunks = int(entry.get("batch_chunks", 0))
            if chunks < 0 or (k == 0 and chunks > 1):
                raise DepsError(f"profile {name!r}, conv_algorithms[{k}]: batch_chunks {chunks}; "
                                "the first algorithm is the default (1 chunk or none)")
            algos.append(entry)
        return cls(name, doc.get("description", ""), bool(doc.get("keep_dw", False)), layers,
                   input_dropout, scratch, tuple(algos))


def _table() -> dict[str, Any]:
    with resources.files("pyd4j.sched").joinpath("deps.json").open() as f:
        return json.load(f)


_TABLE: dict[str, Any] | None = None
_PROFILES: dict[str, Profile] = {}


def profile_names() -> list[str]:
    """Names of the built-in profiles."""
    global _TABLE
    if _TABLE is None:
        _TABLE = _table()
    return sorted(_TABLE["profiles"])


def profile(name: "str | Profile" = DEFAULT_PROFILE,
            overrides: dict[str, Any] | str | Path | None = None) -> Profile:
    """A built-in profile by name, with `overrides` (a dict or JSON file shaped like deps.json,
    partial allowed) replacing entries step by step."""
    global _TABLE
    if isinstance(name, Profile) and overrides is None:
        return name
    key = name.name if isinstance(name, Profile) else name
    if overrides is None and key in _PROFILES:
        return _PROFILES[key]
    if _TABLE is None:
        _TABLE = _table()
    extra: dict[str, Any] = {}
    if overrides is not None:
        extra = overrides if isinstance(overrides, dict) else json.loads(Path(overrides).read_text())
        extra = extra.get("profiles", {}).get(key, {})
    if key not in _TABLE["profiles"] and not extra:
        raise DepsError(f"unknown dependency profile {key!r}; known: {profile_names()}")
    doc = json.loads(json.dumps(_TABLE["profiles"].get(key, {})))
    for k, v in extra.items():
        if k == "layers":
            for lk, entry in v.items():
                doc.setdefault("layers", {}).setdefault(lk, {}).update(entry)
        else:
            doc[k] = v
    prof = Profile.from_doc(key, doc)
    if overrides is None:
        _PROFILES[key] = prof
    return prof


@dataclass
class GraphDeps:
    """A profile applied to one graph. Lists are indexed by layer id; "Y of j" / "DY of j" are
    the tensors `tid(j, Kind.Y)` / `tid(j, Kind.DY)`.

    In-place rewrites are the ones the profile allows *and* the graph permits:
    - `fwd_inplace[i] = j`: FORWARD (and RECOMPUTE) of i may write its output over Y of j, its
      only input, because i is j's only consumer and no backward step reads Y of j;
    - `bwd_inplace[i] = (j, source)`: BACKWARD of i may write input j's gradient over the
      tensor `source` (its DY, or its Y), because i is the first layer of the backward pass to
      contribute to DY of j and both have the same size.
    """

    profile: Profile
    fwd_reads: list[tuple[int, ...]]  # layers whose Y the FORWARD step reads
    rc_reads: list[tuple[int, ...]]  # ... the RECOMPUTE step
    bwd_reads: list[tuple[int, ...]]  # ... the BACKWARD step
    bwd_dy: list[bool]  # BACKWARD reads its own DY
    bwd_dx: list[tuple[int, ...]]  # layers whose DY the BACKWARD step writes (adds to)
    bwd_dw: list[bool]  # BACKWARD writes DW (and applies the update)
    fwd_inplace: list[int]
    bwd_inplace: list[tuple[int, int] | None]
    ws_fwd: list[int]  # mandatory scratch of each step, aligned (profile scratch "held": the
    ws_bwd: list[int]  # largest step's, for every step: the workspace is there throughout)
    ws_rc: list[int]
    algo_ws: list[bool]  # the layer's steps may take an optional algorithm workspace
    state_bytes: list[int]  # persistent extra state, aligned (one tensor per layer)
    state_names: list[dict[str, int]]  # its parts, unaligned
    saved_bytes: list[int]  # kept from FORWARD/RECOMPUTE to BACKWARD, aligned (the same tensor id)
    keep_dw: bool
    ysz: list[int]  # aligned bytes of each layer's output (and of its gradient)
    psz: list[int]  # aligned bytes of each layer's parameters (W and dW each; M, the optimizer state: `optimizer_state_bytes`)
    nbytes: list[int]  # unaligned bytes of every tensor id (0: not a tensor of the graph)
    asz: list[int]  # the same, aligned
    # each step's own scratch (aligned, never held), and whether the profile holds one scratch
    # workspace for the whole iteration: a plan whose CONV records run batch-chunk algorithms
    # has its scratch from these (`pyd4j.sched.simulator.record_scratch`)
    step_ws: tuple[list[int], list[int], list[int]] = ([], [], [])
    held: bool = False
    # the smallest scratch of each step any algorithm allows (equal to ws_* unless the profile
    # has batch-chunk algorithms): what the lower bound counts
    ws_fwd_min: list[int] = field(default_factory=list)
    ws_bwd_min: list[int] = field(default_factory=list)
    ws_rc_min: list[int] = field(default_factory=list)

    @property
    def resident_state_bytes(self) -> int:
        return sum(self.state_bytes)

    def inplace_owner(self) -> list[int]:
        """owner[j]: the layer whose output finally holds Y of j's buffer after the in-place
        forward steps that may follow it (j itself when none): the tensor a policy keeps,
        offloads or drops in place of j."""
        n = len(self.fwd_inplace)
        nxt = [-1] * n
        for i, j in enumerate(self.fwd_inplace):
            if j >= 0:
                nxt[j] = i
        owner = list(range(n))
        for j in range(n - 1, -1, -1):
            if nxt[j] >= 0:
                owner[j] = owner[nxt[j]]
        return owner


def graph_deps(graph: "Graph") -> GraphDeps:
    """The dependency model of `graph` under its profile (cached on the graph)."""
    cached = getattr(graph, "_deps", None)
    if cached is not None and len(cached.fwd_reads) == len(graph.layers):
        return cached
    deps = _apply(graph, graph.profile)
    graph._deps = deps
    return deps


def optimizer_state_bytes(layer: "Layer") -> int:
    """A layer's resident optimizer state (the M tensor): the elements its graph's builder recorded
    (`attrs["state_elems"]`; a DL4J network's: what its updater keeps, `pyd4j.dl4j.updater_state`:
    Adam two per parameter, Sgd none); else one per parameter (SGD with momentum, the release code's)."""
    elems = layer.attrs.get("state_elems")
    return layer.param_bytes if elems is None else int(elems) * layer.itemsize


def _apply(graph: "Graph", prof: Profile) -> GraphDeps:
    layers = graph.layers
    n = len(layers)
    cons = graph.consumers
    obytes = [layer.out_bytes for layer in layers]
    pbytes = [layer.param_bytes for layer in layers]
    ysz = [aligned(b) for b in obytes]
    psz = [aligned(b) for b in pbytes]
    no_grad = (LayerType.DATA, LayerType.SOFTMAX)
    has_grad = [layer.type not in no_grad for layer in layers]
    fwd_reads, rc_reads, bwd_reads = [], [], []
    bwd_dy, bwd_dx, bwd_dw = [], [], []
    ws_fwd, ws_bwd, ws_rc, algo_ws = [], [], [], []
    state_bytes, state_names, saved_bytes = [], [], []
    idrop = prof.input_dropout
    entries = []
    flags: dict[int, tuple] = {}  # per entry: what its steps read and write
    none = StepDeps()
    for layer in layers:
        i = layer.id
        e = prof.of(layer)
        entries.append(e)
        f = flags.get(id(e))
        if f is None:
            b = e.backward or none
            f = flags[id(e)] = ("x" in e.forward.reads, "x" in e.recompute.reads,
                                "x" in b.reads, "y" in b.reads, "dy" in b.reads,
                                "dx" in b.writes, "dw" in b.writes,
                                e.forward.algorithm_workspace or b.algorithm_workspace,
                                bool(e.forward.workspace), bool(b.workspace),
                                bool(e.recompute.workspace))
        fx, rx, bx, by, bdy, bdx, bdw, aw, wf, wb, wr = f
        saved = aligned(e.saved.of(graph, layer)) if e.saved else 0
        measured = layer.attrs.get("measured")   # a probe iteration's figures replace the entry's
        if measured:
            saved = aligned(int(measured.get("saved", 0)))
        if idrop is not None and layer.attrs.get("idropout") is not None:
            saved += aligned(idrop.saved.of(graph, layer))
            if layer.type is not LayerType.SOFTMAX:   # a loss layer drops its input inside backprop
                bx = bx and idrop.backward_reads_x
        ins = layer.inputs if len(layer.inputs) < 2 else tuple(dict.fromkeys(layer.inputs))
        fwd_reads.append(ins if fx else ())
        rc_reads.append(ins if rx else ())
        has_bwd = layer.type is not LayerType.DATA
        b = e.backward
        if has_bwd and b is None:
            raise DepsError(f"profile {prof.name!r} has no backward step for "
                            f"{layer.type.value} layer {layer.name!r}")
        if not has_bwd:
            bx = by = bdy = bdx = bdw = wb = False
        reads = ins if bx else ()
        if by and i not in reads:
            reads = reads + (i,)
        bwd_reads.append(reads)
        bwd_dy.append(bdy and has_grad[i])
        bwd_dx.append(tuple(j for j in ins if has_grad[j]) if bdx else ())
        bwd_dw.append(bdw and bool(layer.param_shapes))
        if measured:
            ws_fwd.append(aligned(int(measured.get("ws_forward", 0))))
            ws_bwd.append(aligned(int(measured.get("ws_backward", 0))) if has_bwd else 0)
            ws_rc.append(ws_fwd[-1])
        else:
            ws_fwd.append(aligned(e.forward.workspace.of(graph, layer)) if wf else 0)
            ws_bwd.append(aligned(b.workspace.of(graph, layer)) if wb else 0)
            ws_rc.append(aligned(e.recompute.workspace.of(graph, layer)) if wr else 0)
        algo_ws.append(aw)
        if e.state:
            parts = {k: s.of(graph, layer) for k, s in e.state.items()}
            state_names.append(parts)
            state_bytes.append(aligned(sum(parts.values())))
        else:
            state_names.append({})
            state_bytes.append(0)
        if saved and state_bytes[-1]:
            raise DepsError(f"layer {layer.name!r}: persistent state and saved tensors share one "
                            "tensor id; a profile gives a layer one or the other")
        saved_bytes.append(saved)
    read_in_bwd = [False] * n
    for reads in bwd_reads:
        for j in reads:
            read_in_bwd[j] = True
    fwd_inplace = [-1] * n
    bwd_inplace: list[tuple[int, int] | None] = [None] * n
    for layer in layers:
        i = layer.id
        e = entries[i]
        if e.forward.inplace == "x" and len(layer.inputs) == 1:
            j = layer.inputs[0]
            if cons[j] == [i] and not read_in_bwd[j] and ysz[j] == ysz[i]:
                fwd_inplace[i] = j
        src_role = e.backward.inplace if e.backward is not None else None
        if src_role and graph.has_backward(i) and len(set(layer.inputs)) == len(layer.inputs):
            if src_role == "dy" and not bwd_dy[i]:
                continue
            source = 5 * i + (1 if src_role == "dy" else 0)  # tid(i, DY / Y)
            for j in bwd_dx[i]:
                if cons[j][-1] == i and ysz[j] == ysz[i]:
                    bwd_inplace[i] = (j, source)
                    break
    step_ws = (ws_fwd, ws_bwd, ws_rc)
    chunks = max(prof.chunk_counts, default=0)
    mins = [list(w) for w in step_ws]
    if chunks > 1:
        for layer in layers:
            if chunkable(layer):
                i = layer.id
                for k, w in enumerate(step_ws):
                    mins[k][i] = min(w[i], chunked_scratch(graph, layer, k == 1, w[i], chunks))
    if prof.scratch == "held":
        held_ws = max(ws_fwd + ws_bwd + ws_rc, default=0)
        ws_fwd, ws_bwd, ws_rc = [held_ws] * n, [held_ws] * n, [held_ws] * n
        held_min = max(mins[0] + mins[1] + mins[2], default=0)
        mins = [[held_min] * n for _ in range(3)]
    nbytes = [0] * (6 * n)
    for layer in layers:
        i = layer.id
        base = 5 * i
        nbytes[base] = obytes[i]
        if has_grad[i]:
            nbytes[base + 1] = obytes[i]
        if pbytes[i]:
            nbytes[base + 2] = nbytes[base + 3] = pbytes[i]
            nbytes[base + 4] = optimizer_state_bytes(layer)
        nbytes[5 * n + i] = state_bytes[i] or saved_bytes[i]
    asz = [-(-b // ALIGNMENT) * ALIGNMENT for b in nbytes]
    return GraphDeps(prof, fwd_reads, rc_reads, bwd_reads, bwd_dy, bwd_dx, bwd_dw, fwd_inplace,
                     bwd_inplace, ws_fwd, ws_bwd, ws_rc, algo_ws, state_bytes, state_names,
                     saved_bytes, prof.keep_dw, ysz, psz, nbytes, asz, step_ws,
                     prof.scratch == "held", *mins)
