"""The lower bound on peak device memory under the graph's dependency model.

Definition (no policy may redefine it):

    lower_bound = resident + max over steps s of need(s)

- resident: what every plan holds for the whole run (`resident_tensors`; the simulator refuses
  a plan that frees one or starts computing before it is allocated): parameters W, SGD momentum
  M (one more copy of the parameters), the persistent per-layer state the framework's dependencies
  name (cuDNN's BN running statistics, dropout reserve space: `pyd4j.sched.deps`), and the
  parameter gradients dW when the framework keeps them;
- need(s), for every FORWARD and BACKWARD step s (each runs once in every plan; a RECOMPUTE is
  optional, so it does not count): the tensors the dependency model says s reads and writes,
  all at once, plus its mandatory scratch:
  - FORWARD of layer i: the outputs of the inputs it reads and its own output (nothing more when
    the model lets it write in place over its input);
  - BACKWARD of layer i: the outputs it reads (its inputs' and/or its own), the gradient of its
    output when it reads it, the gradients of its inputs it writes (one less when the model lets
    it write one over a tensor it reads), and its dW when the framework releases dW after the
    update (a BACKWARD applies the update in the same step) -- plus every gradient that is
    being accumulated across it: a gradient lives on the device from its first contribution
    to the step that reads it (gradients never move to the host, and a partial sum cannot be
    freed), so a gradient with a contribution before step i and its reader after step i is
    held during step i (the shortcut gradient of a residual block during the branch's steps).
  - both steps of a layer with `saved` tensors (what DL4J's batch normalization and dropout
    keep from the forward to the backward step) also hold those: the forward step writes them
    and the backward step reads them. Other layers' saved tensors are not counted (a plan may
    drop them and rebuild them by recomputation).
  The simulator checks exactly these tensors at every compute record and refuses to free a
  partial gradient or move a gradient to the host, so no plan goes below the bound.

For a DL4J network (framework `dl4j`, `pyd4j.dl4j.graph`) the model is DL4J's measured one:
parameters, updater state and parameter gradients are resident (DL4J keeps its flattened
gradient view for the whole run); the scratch is DL4J's working-memory workspace, as large as
the largest step's need and held throughout (framework scratch "held": every step counts it); no
backward step reads its own output. A step's mandatory scratch is the least any of the framework's
own convolution algorithms allows (DL4J: a convolution run in as many batch chunks as it may,
`pyd4j.sched.deps.chunked_scratch`; `GraphDeps.ws_fwd_min` / `ws_bwd_min`).

The optional convolution workspace of a faster algorithm is not part of the bound (the
no-workspace algorithm always exists); `workspace_bytes` reports the largest workspace of the
fastest algorithm separately. All sizes are `aligned` (see `pyd4j.sched.plan`).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyd4j.sched.graph import Graph, LayerType
from pyd4j.sched.plan import aligned, gc_paused, state_tid


@dataclass(frozen=True)
class Bound:
    """The bound and its parts (`l_peak_step`: "FORWARD" or "BACKWARD" of `l_peak_layer`)."""

    resident_bytes: int
    l_peak_bytes: int
    l_peak_layer: str
    workspace_bytes: int
    l_peak_step: str = "BACKWARD"

    @property
    def lower_bound_bytes(self) -> int:
        return self.resident_bytes + self.l_peak_bytes


def resident_tensors(graph: Graph) -> list[int]:
    """Tensors every plan allocates before its first compute step and never frees."""
    d = graph.deps
    n = len(graph.layers)
    kinds = (2, 3, 4) if d.keep_dw else (2, 4)
    out = [t for layer in graph.layers if layer.param_shapes for t in (5 * layer.id + k for k in kinds) if d.nbytes[t]]
    out += [state_tid(n, i) for i in range(n) if d.state_bytes[i]]
    return out


def resident_bytes(graph: Graph) -> int:
    """Parameters + optimizer state (+ gradients when kept) + persistent state, aligned per tensor."""
    d = graph.deps
    return sum(d.asz[t] for t in resident_tensors(graph))


def held_gradients(graph: Graph) -> list[int]:
    """Bytes of the gradients accumulating across each layer's BACKWARD step (not touched by
    it), per layer id: a gradient's first contribution comes before the step, its reader after."""
    d = graph.deps
    layers = graph.layers
    n = len(layers)
    order = [i for i in range(n - 1, -1, -1) if graph.has_backward(i)]
    pos = {i: p for p, i in enumerate(order)}
    first = [-1] * n
    last = [-1] * n
    for p, i in enumerate(order):
        for j in d.bwd_dx[i]:
            if first[j] < 0:
                first[j] = p
            last[j] = p
    for j in range(n):
        if first[j] >= 0 and d.bwd_dy[j] and j in pos:
            last[j] = pos[j]
    m = len(order)
    diff = [0] * (m + 1)
    ysz = d.ysz
    for j in range(n):
        if first[j] >= 0 and last[j] - first[j] > 1:
            diff[first[j] + 1] += ysz[j]
            diff[last[j]] -= ysz[j]
    held = [0] * n
    run = 0
    for p, i in enumerate(order):
        run += diff[p]
        touched = sum(ysz[j] for j in d.bwd_dx[i] if first[j] < p < last[j])
        held[i] = run - touched
    return held


def step_working_sets(graph: Graph) -> tuple[list[int], list[int]]:
    """(need of each FORWARD step, need of each BACKWARD step) per layer id (0: no such step);
    a BACKWARD step's need includes the gradients held across it (`held_gradients`)."""
    memo = graph._memo.get("step_working_sets")
    if memo is not None:
        return memo
    d = graph.deps
    layers = graph.layers
    ysz = d.ysz
    held = held_gradients(graph)
    fwd, bwd = [], []
    for layer in layers:
        i = layer.id
        need = sum(ysz[j] for j in d.fwd_reads[i]) + d.ws_fwd_min[i] + d.saved_bytes[i]
        if d.fwd_inplace[i] < 0:
            need += ysz[i]
        fwd.append(need)
        if not graph.has_backward(i):
            bwd.append(0)
            continue
        need = sum(ysz[j] for j in d.bwd_reads[i]) + d.ws_bwd_min[i] + d.saved_bytes[i]
        if d.bwd_dy[i]:
            need += ysz[i]
        need += sum(ysz[j] for j in d.bwd_dx[i])
        ip = d.bwd_inplace[i]
        if ip is not None:
            need -= ysz[ip[0]]
        if d.bwd_dw[i] and not d.keep_dw:
            need += d.psz[i]
        bwd.append(need + held[i])
    graph._memo["step_working_sets"] = (fwd, bwd)
    return fwd, bwd


def layer_working_sets(graph: Graph) -> list[int]:
    """l_i: the larger need of layer i's FORWARD and BACKWARD steps."""
    fwd, bwd = step_working_sets(graph)
    return [max(f, b) for f, b in zip(fwd, bwd)]


@gc_paused
def lower_bound(graph: Graph, costmodel=None) -> Bound:
    """The bound for `graph`; with a cost model, also the largest fastest-algorithm workspace."""
    fwd, bwd = step_working_sets(graph)
    kf = max(range(len(fwd)), key=fwd.__getitem__)
    kb = max(range(len(bwd)), key=bwd.__getitem__)
    k, need, step = (kb, bwd[kb], "BACKWARD") if bwd[kb] >= fwd[kf] else (kf, fwd[kf], "FORWARD")
    ws = 0
    if costmodel is not None:
        for layer in graph.layers:
            if layer.type is LayerType.CONV:
                opts = costmodel.conv_options(graph, layer.id)
                ws = max(ws, aligned(opts[0][1]))
    return Bound(resident_bytes(graph), need, graph.layers[k].name, ws, step)
