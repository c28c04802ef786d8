"""A framework's dependencies (`pyd4j.sched.deps`) applied to one graph: per layer, the tensors each
step reads and writes, which in-place rewrites the graph permits, and the bytes of scratch, state and
every tensor. `Graph.deps` asks `graph_deps`, which caches the result on the graph."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyd4j.sched.deps import DepsError, FrameworkDeps, LayerDeps, StepDeps, chunkable, chunked_scratch
from pyd4j.sched.layer import LayerType
from pyd4j.sched.plan import ALIGNMENT, aligned

if TYPE_CHECKING:
    from pyd4j.sched.graph import Graph
    from pyd4j.sched.layer import Layer

NO_GRADIENT = (LayerType.DATA, LayerType.SOFTMAX)


@dataclass
class GraphDeps:
    """A framework's dependencies applied to one graph. Lists are indexed by layer id; "Y of j" /
    "DY of j" are the tensors `tid(j, Kind.Y)` / `tid(j, Kind.DY)`.

    In-place rewrites are the ones the framework allows *and* the graph permits:
    - `fwd_inplace[i] = j`: FORWARD (and RECOMPUTE) of i may write its output over Y of j, its
      only input, because i is j's only consumer and no backward step reads Y of j;
    - `bwd_inplace[i] = (j, source)`: BACKWARD of i may write input j's gradient over the
      tensor `source` (its DY, or its Y), because i is the first layer of the backward pass to
      contribute to DY of j and both have the same size.
    """

    framework: FrameworkDeps
    fwd_reads: list[tuple[int, ...]]  # layers whose Y the FORWARD step reads
    rc_reads: list[tuple[int, ...]]  # ... the RECOMPUTE step
    bwd_reads: list[tuple[int, ...]]  # ... the BACKWARD step
    bwd_dy: list[bool]  # BACKWARD reads its own DY
    bwd_dx: list[tuple[int, ...]]  # layers whose DY the BACKWARD step writes (adds to)
    bwd_dw: list[bool]  # BACKWARD writes DW (and applies the update)
    fwd_inplace: list[int]
    bwd_inplace: list[tuple[int, int] | None]
    ws_fwd: list[int]  # mandatory scratch of each step, aligned (framework scratch "held": the
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
    # each step's own scratch (aligned, never held), and whether the framework holds one scratch
    # workspace for the whole iteration: a plan whose CONV records run batch-chunk algorithms
    # has its scratch from these (`pyd4j.sched.simulator.record_scratch`)
    step_ws: tuple[list[int], list[int], list[int]] = ([], [], [])
    held: bool = False
    # the smallest scratch of each step any algorithm allows (equal to ws_* unless the framework
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
    """The dependency model of `graph` under its framework (cached on the graph)."""
    cached = getattr(graph, "_deps", None)
    if cached is not None and len(cached.fwd_reads) == len(graph.layers):
        return cached
    deps = _apply(graph, graph.framework)
    graph._deps = deps
    return deps


def optimizer_state_bytes(layer: "Layer") -> int:
    """A layer's resident optimizer state (the M tensor): the elements its graph's builder recorded
    (`attrs["state_elems"]`; a DL4J network's: what its updater keeps, `pyd4j.dl4j.updater_state`:
    Adam two per parameter, Sgd none); else one per parameter (SGD with momentum, the release code's)."""
    elems = layer.attrs.get("state_elems")
    return layer.param_bytes if elems is None else int(elems) * layer.itemsize


@dataclass
class _Steps:
    """What `_apply` gathers layer by layer, indexed by layer id."""

    fwd_reads: list[tuple[int, ...]] = field(default_factory=list)
    rc_reads: list[tuple[int, ...]] = field(default_factory=list)
    bwd_reads: list[tuple[int, ...]] = field(default_factory=list)
    bwd_dy: list[bool] = field(default_factory=list)
    bwd_dx: list[tuple[int, ...]] = field(default_factory=list)
    bwd_dw: list[bool] = field(default_factory=list)
    ws_fwd: list[int] = field(default_factory=list)
    ws_bwd: list[int] = field(default_factory=list)
    ws_rc: list[int] = field(default_factory=list)
    algo_ws: list[bool] = field(default_factory=list)
    state_bytes: list[int] = field(default_factory=list)
    state_names: list[dict[str, int]] = field(default_factory=list)
    saved_bytes: list[int] = field(default_factory=list)
    entries: list[LayerDeps] = field(default_factory=list)


def _apply(graph: "Graph", fw: FrameworkDeps) -> GraphDeps:
    layers = graph.layers
    has_grad = [layer.type not in NO_GRADIENT for layer in layers]
    steps = _Steps()
    flags: dict[int, tuple] = {}  # per framework entry: what its steps read and write
    for layer in layers:
        _add_layer(graph, fw, layer, steps, flags, has_grad)
    ysz = [aligned(layer.out_bytes) for layer in layers]
    psz = [aligned(layer.param_bytes) for layer in layers]
    fwd_inplace, bwd_inplace = _inplace(graph, steps, ysz)
    step_ws = (steps.ws_fwd, steps.ws_bwd, steps.ws_rc)
    ws, mins = _scratch(graph, fw, step_ws)
    nbytes = _tensor_bytes(graph, has_grad, steps)
    asz = [-(-b // ALIGNMENT) * ALIGNMENT for b in nbytes]
    return GraphDeps(fw, steps.fwd_reads, steps.rc_reads, steps.bwd_reads, steps.bwd_dy, steps.bwd_dx,
                     steps.bwd_dw, fwd_inplace, bwd_inplace, *ws, steps.algo_ws, steps.state_bytes,
                     steps.state_names, steps.saved_bytes, fw.keep_dw, ysz, psz, nbytes, asz, step_ws,
                     fw.scratch == "held", *mins)


def _entry_flags(e: LayerDeps) -> tuple:
    """What a framework entry's steps read and write, and which hold scratch."""
    b = e.backward or StepDeps()
    return ("x" in e.forward.reads, "x" in e.recompute.reads, "x" in b.reads, "y" in b.reads, "dy" in b.reads,
            "dx" in b.writes, "dw" in b.writes, e.forward.algorithm_workspace or b.algorithm_workspace,
            bool(e.forward.workspace), bool(b.workspace), bool(e.recompute.workspace))


def _add_layer(graph: "Graph", fw: FrameworkDeps, layer: "Layer", steps: _Steps, flags: dict[int, tuple],
               has_grad: list[bool]) -> None:
    """One layer's reads, writes, scratch, state and saved tensors appended to `steps`."""
    i = layer.id
    e = fw.of(layer)
    steps.entries.append(e)
    f = flags.get(id(e))
    if f is None:
        f = flags[id(e)] = _entry_flags(e)
    fx, rx, bx, by, bdy, bdx, bdw, aw, wf, wb, wr = f
    saved = aligned(e.saved.of(graph, layer)) if e.saved else 0
    measured = layer.attrs.get("measured")   # a probe iteration's figures replace the entry's
    if measured:
        saved = aligned(int(measured.get("saved", 0)))
    idrop = fw.input_dropout
    if idrop is not None and layer.attrs.get("idropout") is not None:
        saved += aligned(idrop.saved.of(graph, layer))
        if layer.type is not LayerType.SOFTMAX:   # a loss layer drops its input inside backprop
            bx = bx and idrop.backward_reads_x
    ins = layer.inputs if len(layer.inputs) < 2 else tuple(dict.fromkeys(layer.inputs))
    steps.fwd_reads.append(ins if fx else ())
    steps.rc_reads.append(ins if rx else ())
    has_bwd = layer.type is not LayerType.DATA
    b = e.backward
    if has_bwd and b is None:
        raise DepsError(f"framework {fw.name!r} has no backward step for "
                        f"{layer.type.value} layer {layer.name!r}")
    if not has_bwd:
        bx = by = bdy = bdx = bdw = wb = False
    reads = ins if bx else ()
    if by and i not in reads:
        reads = reads + (i,)
    steps.bwd_reads.append(reads)
    steps.bwd_dy.append(bdy and has_grad[i])
    steps.bwd_dx.append(tuple(j for j in ins if has_grad[j]) if bdx else ())
    steps.bwd_dw.append(bdw and bool(layer.param_shapes))
    if measured:
        steps.ws_fwd.append(aligned(int(measured.get("ws_forward", 0))))
        steps.ws_bwd.append(aligned(int(measured.get("ws_backward", 0))) if has_bwd else 0)
        steps.ws_rc.append(steps.ws_fwd[-1])
    else:
        steps.ws_fwd.append(aligned(e.forward.workspace.of(graph, layer)) if wf else 0)
        steps.ws_bwd.append(aligned(b.workspace.of(graph, layer)) if wb else 0)
        steps.ws_rc.append(aligned(e.recompute.workspace.of(graph, layer)) if wr else 0)
    steps.algo_ws.append(aw)
    parts = {k: s.of(graph, layer) for k, s in e.state.items()} if e.state else {}
    steps.state_names.append(parts)
    steps.state_bytes.append(aligned(sum(parts.values())) if parts else 0)
    if saved and steps.state_bytes[-1]:
        raise DepsError(f"layer {layer.name!r}: persistent state and saved tensors share one "
                        "tensor id; a framework gives a layer one or the other")
    steps.saved_bytes.append(saved)


def _inplace(graph: "Graph", steps: _Steps, ysz: list[int]) -> tuple[list[int], list[tuple[int, int] | None]]:
    """The in-place rewrites the framework allows and the graph permits (see `GraphDeps`)."""
    n = len(graph.layers)
    cons = graph.consumers
    read_in_bwd = [False] * n
    for reads in steps.bwd_reads:
        for j in reads:
            read_in_bwd[j] = True
    fwd_inplace = [-1] * n
    bwd_inplace: list[tuple[int, int] | None] = [None] * n
    for layer in graph.layers:
        i = layer.id
        e = steps.entries[i]
        if e.forward.inplace == "x" and len(layer.inputs) == 1:
            j = layer.inputs[0]
            if cons[j] == [i] and not read_in_bwd[j] and ysz[j] == ysz[i]:
                fwd_inplace[i] = j
        src_role = e.backward.inplace if e.backward is not None else None
        if src_role and graph.has_backward(i) and len(set(layer.inputs)) == len(layer.inputs):
            if src_role == "dy" and not steps.bwd_dy[i]:
                continue
            source = 5 * i + (1 if src_role == "dy" else 0)  # tid(i, DY / Y)
            for j in steps.bwd_dx[i]:
                if cons[j][-1] == i and ysz[j] == ysz[i]:
                    bwd_inplace[i] = (j, source)
                    break
    return fwd_inplace, bwd_inplace


def _scratch(graph: "Graph", fw: FrameworkDeps, step_ws: tuple[list[int], list[int], list[int]]
             ) -> tuple[tuple[list[int], list[int], list[int]], list[list[int]]]:
    """Each step's scratch as the plan holds it (one held workspace for every step under a held
    framework), and the smallest any of the framework's batch-chunk algorithms allows."""
    n = len(graph.layers)
    ws_fwd, ws_bwd, ws_rc = step_ws
    chunks = max(fw.chunk_counts, default=0)
    mins = [list(w) for w in step_ws]
    if chunks > 1:
        for layer in graph.layers:
            if chunkable(layer):
                i = layer.id
                for k, w in enumerate(step_ws):
                    mins[k][i] = min(w[i], chunked_scratch(graph, layer, k == 1, w[i], chunks))
    if fw.scratch == "held":
        held_ws = max(ws_fwd + ws_bwd + ws_rc, default=0)
        ws_fwd, ws_bwd, ws_rc = [held_ws] * n, [held_ws] * n, [held_ws] * n
        held_min = max(mins[0] + mins[1] + mins[2], default=0)
        mins = [[held_min] * n for _ in range(3)]
    return (ws_fwd, ws_bwd, ws_rc), mins


def _tensor_bytes(graph: "Graph", has_grad: list[bool], steps: _Steps) -> list[int]:
    """Unaligned bytes of every tensor id: per layer Y, DY, W, DW, M, then one state tensor each."""
    n = len(graph.layers)
    nbytes = [0] * (6 * n)
    for layer in graph.layers:
        i = layer.id
        base = 5 * i
        nbytes[base] = layer.out_bytes
        if has_grad[i]:
            nbytes[base + 1] = layer.out_bytes
        if layer.param_bytes:
            nbytes[base + 2] = nbytes[base + 3] = layer.param_bytes
            nbytes[base + 4] = optimizer_state_bytes(layer)
        nbytes[5 * n + i] = steps.state_bytes[i] or steps.saved_bytes[i]
    return nbytes
