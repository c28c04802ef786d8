"""The reference plan executor: runs a plan for real, one record at a time.

Compute is the layer kernels of pyd4j.device.kernels: numpy-style array code on views the backend
hands out (`backend.xp`: numpy for `HostBackend`, cupy for a GPU backend); every device byte goes through the backend, so its
arena enforces the byte budget and measures the peak. `reference_run` computes the same
iteration the plain way (everything kept in a dict) with the same layer kernels: a plan that
frees, offloads and recomputes must give bit-identical gradients and updated parameters.

Conventions: DY buffers are zeroed at ALLOC and every backward step adds its contribution
(the same order in both runs); BACKWARD also applies SGD with momentum
(m = momentum * m + dw; w -= lr * m). DROPOUT masks depend only on (seed, layer), so a
recomputed dropout is the same dropout. Labels (one int per sample) live with the executor,
not in device memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from pyd4j.device.backend import WORKSPACE, Backend, BackendStats
from pyd4j.device.kernels import KERNEL_READS, backward, check_framework, forward
from pyd4j.sched.graph import Graph, Layer, LayerType
from pyd4j.sched.plan import Kind, Op, Plan, tid

__all__ = ["KERNEL_READS", "RunResult", "backward", "check_framework", "execute", "forward", "init_params",
           "random_batch", "reference_run"]


def init_params(graph: Graph, seed: int = 0) -> dict[int, np.ndarray]:
    """Deterministic parameters per layer (He-style for weights, BN: gamma 1, beta 0)."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(graph.dtype)
    out = {}
    for layer in graph.layers:
        if not layer.param_shapes:
            continue
        if layer.type is LayerType.BN:
            c = layer.out_shape[1]
            w = np.concatenate([1.0 + 0.1 * rng.standard_normal(c), 0.1 * rng.standard_normal(c)])
        else:
            parts = []
            for q, shape in enumerate(layer.param_shapes):
                fan_in = math.prod(shape[1:]) if layer.type is LayerType.CONV else shape[0]
                scale = math.sqrt(2.0 / fan_in) if q == 0 else 0.1
                parts.append(scale * rng.standard_normal(math.prod(shape)))
            w = np.concatenate(parts)
        out[layer.id] = w.astype(dt)
    return out


def random_batch(graph: Graph, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A deterministic input batch and labels for `graph`."""
    rng = np.random.default_rng(seed + 1)
    data = graph.layers[0]
    classes = data.attrs.get("classes") or graph.layers[-1].out_shape[1]
    x = rng.standard_normal(data.out_shape).astype(np.dtype(graph.dtype))
    return x, rng.integers(0, classes, size=data.out_shape[0])


@dataclass
class RunResult:
    """Loss, parameter gradients and updated parameters (flat, per layer id)."""

    loss: float
    grads: dict[int, np.ndarray]
    params: dict[int, np.ndarray]
    stats: BackendStats | None = None


def _loss(y: np.ndarray, labels: np.ndarray) -> float:
    return float(-np.log(y[np.arange(len(labels)), labels]).mean())


# -- the plain run ------------------------------------------------------------------------------
def reference_run(graph: Graph, x: np.ndarray, labels: np.ndarray,
                  params: dict[int, np.ndarray], lr: float = 0.01, momentum: float = 0.9,
                  seed: int = 0) -> RunResult:
    """One training iteration the plain way: keep everything, no memory management."""
    xp = np
    layers = graph.layers
    ys: dict[int, np.ndarray] = {}
    for layer in layers:
        if layer.type is LayerType.DATA:
            ys[layer.id] = x.copy()
        else:
            # stored contiguous, as in a device buffer: reductions then see the same layout
            ys[layer.id] = np.ascontiguousarray(forward(xp, layer, [ys[j] for j in layer.inputs],
                                                        params.get(layer.id), seed))
    dys = {i: np.zeros(layers[i].out_shape, np.dtype(graph.dtype))
           for i in range(len(layers)) if graph.has_grad(i)}
    w = {k: v.copy() for k, v in params.items()}
    grads: dict[int, np.ndarray] = {}
    loss = 0.0
    for i in range(len(layers) - 1, -1, -1):
        layer = layers[i]
        if not graph.has_backward(i):
            continue
        if layer.type is LayerType.SOFTMAX:
            loss += _loss(ys[i], labels)
        dxs, dw = backward(xp, layer, [ys[j] for j in layer.inputs], ys[i], dys.get(i),
                           w.get(i), labels, seed)
        for j, dx in zip(layer.inputs, dxs):
            if graph.has_grad(j):
                dys[j] += dx
        if layer.param_shapes:
            g = np.zeros_like(w[i])
            g += dw
            m = np.zeros_like(w[i])
            m *= momentum
            m += g
            w[i] -= lr * m
            grads[i] = g
    return RunResult(loss, grads, w)




# -- the plan executor ------------------------------------------------------------------------
def execute(plan: Plan, backend: Backend, x: np.ndarray, labels: np.ndarray,
            params: dict[int, np.ndarray], lr: float = 0.01, momentum: float = 0.9,
            seed: int = 0) -> RunResult:
    """Run `plan` record by record on `backend`; returns gradients and updated parameters.

    Each compute record gets views of exactly the tensors the graph's dependency model says it
    reads; an in-place step writes over the tensor the MOVE after it names, and a step's
    mandatory scratch is allocated with its optional workspace. Parameter gradients are copied
    to the host right after their BACKWARD step (a framework may release dW there)."""
    check_framework(plan.graph)
    run = _PlanRun(plan, backend, x, labels, params, lr, momentum, seed)
    for k, s in enumerate(plan.steps):
        run.step(k, s)
    return run.result()


class _PlanRun:
    """One iteration of a plan on a backend: what is allocated, what is being prefetched, the loss and
    the gradients so far."""

    def __init__(self, plan: Plan, backend: Backend, x: np.ndarray, labels: np.ndarray,
                 params: dict[int, np.ndarray], lr: float, momentum: float, seed: int) -> None:
        self.plan, self.backend, self.x, self.labels, self.params = plan, backend, x, labels, params
        self.lr, self.momentum, self.seed = lr, momentum, seed
        g = self.g = plan.graph
        self.d = g.deps
        self.layers = g.layers
        self.xp = backend.xp
        self.dt = np.dtype(g.dtype)
        self.labels_dev = self.xp.asarray(labels)
        self.in_shapes = [[self.layers[j].out_shape for j in layer.inputs] for layer in self.layers]
        self.scratch = {Op.FORWARD: self.d.ws_fwd, Op.BACKWARD: self.d.ws_bwd, Op.RECOMPUTE: self.d.ws_rc}
        self.allocated: set[int] = set()
        self.pending: set[int] = set()
        self.grads: dict[int, np.ndarray] = {}
        self.loss = 0.0

    def shape_of(self, t: int) -> tuple[int, ...]:
        layer = self.layers[t // 5]
        return layer.out_shape if t % 5 in (Kind.Y, Kind.DY) else (layer.param_elems,)

    def view(self, t: int) -> Any:
        return self.backend.view(t, self.shape_of(t), self.dt)

    def step(self, k: int, s: Any) -> None:
        backend, op = self.backend, s.op
        if op == Op.ALLOC:
            self.alloc(s.arg)
        elif op == Op.FREE:
            backend.free(s.arg)
            self.allocated.discard(s.arg)
            self.pending.discard(s.arg)
        elif op == Op.MOVE:
            backend.rename(s.src, s.arg)
            self.allocated.discard(s.src)
            self.allocated.add(s.arg)
        elif op == Op.OFFLOAD:
            backend.offload(s.arg)
        elif op == Op.PREFETCH:
            backend.prefetch(s.arg)
            self.pending.add(s.arg)
        else:
            self.compute(k, s)

    def alloc(self, t: int) -> None:
        nb, backend = self.plan.nbytes, self.backend
        backend.alloc(t, nb[t])
        self.allocated.add(t)
        if t >= 5 * len(self.layers):  # persistent state: the kernels here recompute what it would hold
            backend.upload(t, np.zeros(nb[t], np.uint8))
            return
        kind = t % 5
        if kind == Kind.W:
            backend.upload(t, self.params[t // 5].astype(self.dt, copy=False))
        elif kind != Kind.Y:
            backend.upload(t, np.zeros(self.shape_of(t), self.dt))

    def compute(self, k: int, s: Any) -> None:
        """A FORWARD, RECOMPUTE or BACKWARD record: its scratch, the prefetches it reads waited for, the kernel."""
        op, i, d, steps = s.op, s.arg, self.d, self.plan.steps
        layer = self.layers[i]
        ws = self.scratch[op][i]
        if ws or s.ws:
            self.backend.alloc(WORKSPACE, ws + s.ws)
        reads = d.bwd_reads[i] if op == Op.BACKWARD else (d.fwd_reads[i] if op == Op.FORWARD else d.rc_reads[i])
        moved = steps[k + 1].src if k + 1 < len(steps) and steps[k + 1].op == Op.MOVE else -1
        for t in [tid(j, Kind.Y) for j in reads] + ([moved] if moved >= 0 else []):
            if t in self.pending:
                self.backend.wait(t)
                self.pending.discard(t)
        w = self.view(tid(i, Kind.W)) if layer.param_shapes else None
        if op == Op.BACKWARD:
            self.backward_step(layer, reads, moved, w)
        elif layer.type is LayerType.DATA:
            self.backend.upload(tid(i, Kind.Y), self.x.astype(self.dt, copy=False))
        else:
            xs = [self.view(tid(j, Kind.Y)) for j in layer.inputs]
            out = forward(self.xp, layer, xs, w, self.seed)
            target = tid(i, Kind.Y) if tid(i, Kind.Y) in self.allocated else moved
            self.backend.view(target, layer.out_shape, self.dt)[...] = out
        if ws or s.ws:
            self.backend.free(WORKSPACE)

    def backward_step(self, layer: Layer, reads: Any, moved: int, w: Any) -> None:
        """The layer's backward kernel; input gradients added to theirs (or written over the tensor the MOVE
        names, after the others), then SGD with momentum on its parameters."""
        i, dt, view = layer.id, self.dt, self.view
        xs = [view(tid(j, Kind.Y)) if j in reads else None for j in layer.inputs]
        y = view(tid(i, Kind.Y)) if i in reads else None
        dy = view(tid(i, Kind.DY)) if self.d.bwd_dy[i] else None
        if layer.type is LayerType.SOFTMAX:
            self.loss += _loss(self.backend.download(tid(i, Kind.Y), layer.out_shape, dt), self.labels)
        dxs, dw = backward(self.xp, layer, xs, y, dy, w, self.labels_dev, self.seed, self.in_shapes[i])
        in_place = None
        for j, dx in zip(layer.inputs, dxs):
            if not self.g.has_grad(j):
                continue
            if tid(j, Kind.DY) in self.allocated:
                buf = view(tid(j, Kind.DY))
                buf += dx
            else:  # written over the tensor the MOVE names, after the others
                in_place = (j, dx)
        if in_place is not None:
            self.backend.view(moved, self.layers[in_place[0]].out_shape, dt)[...] = in_place[1]
        if layer.param_shapes:
            gw = view(tid(i, Kind.DW))
            gw += dw
            m = view(tid(i, Kind.M))
            m *= self.momentum
            m += gw
            w -= self.lr * m
            self.grads[i] = self.backend.download(tid(i, Kind.DW), (layer.param_elems,), dt)

    def result(self) -> RunResult:
        new_params = {}
        for layer in self.layers:
            if layer.param_shapes:
                new_params[layer.id] = self.backend.download(tid(layer.id, Kind.W), (layer.param_elems,), self.dt)
        return RunResult(self.loss, self.grads, new_params, self.backend.stats())
