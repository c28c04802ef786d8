"""The reference plan executor: runs a plan for real, one record at a time.

Compute is numpy-style array code on views the backend hands out (`backend.xp`: numpy for
`HostBackend`, cupy for a GPU backend); every device byte goes through the backend, so its
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

from pyd4j.agent.backend import WORKSPACE, Backend, BackendStats
from pyd4j.sched.graph import Graph, Layer, LayerType
from pyd4j.sched.plan import Kind, Op, Plan, tid

BN_EPS = 1e-5


# -- layer kernels (pure functions of arrays) --------------------------------------------------
def _windows(xp: Any, x: Any, kh: int, kw: int, stride: int, ph: int, pw: int, oh: int, ow: int,
             fill: float) -> tuple[Any, Any]:
    """(padded x, strided windows view of shape (N, C, OH, OW, KH, KW))."""
    n, c, h, w = x.shape
    hp = max(h + 2 * ph, (oh - 1) * stride + kh)
    wp = max(w + 2 * pw, (ow - 1) * stride + kw)
    xp_ = xp.full((n, c, hp, wp), fill, dtype=x.dtype)
    xp_[:, :, ph:ph + h, pw:pw + w] = x
    s = xp_.strides
    win = xp.lib.stride_tricks.as_strided(
        xp_, (n, c, oh, ow, kh, kw), (s[0], s[1], s[2] * stride, s[3] * stride, s[2], s[3]))
    return xp_, win


def _unwindow(xp: Any, dwin: Any, shape: tuple[int, ...], kh: int, kw: int, stride: int,
              ph: int, pw: int) -> Any:
    """Sum window gradients (N, C, OH, OW, KH, KW) back onto the input (col2im)."""
    n, c, h, w = shape
    oh, ow = dwin.shape[2], dwin.shape[3]
    hp = max(h + 2 * ph, (oh - 1) * stride + kh)
    wp = max(w + 2 * pw, (ow - 1) * stride + kw)
    dxp = xp.zeros((n, c, hp, wp), dtype=dwin.dtype)
    for a in range(kh):
        for b in range(kw):
            dxp[:, :, a:a + stride * oh:stride, b:b + stride * ow:stride] += dwin[:, :, :, :, a, b]
    return dxp[:, :, ph:ph + h, pw:pw + w]


def _conv_cols(xp: Any, layer: Layer, x: Any) -> Any:
    """A conv layer's input patches (im2col): one row of C*KH*KW values per output position."""
    a = layer.attrs
    kh, kw = a["kernel"]
    (ph, pw), s = a["pad"], a["stride"]
    n, _, oh, ow = layer.out_shape
    _, win = _windows(xp, x, kh, kw, s, ph, pw, oh, ow, 0.0)
    return win.transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, -1)


def _group_slices(layer: Layer, cols: int, outs: int) -> list[tuple[slice, slice]]:
    """(patch-matrix columns, output channels) of each group of a grouped convolution."""
    g = layer.attrs.get("groups", 1)
    c, k = cols // g, outs // g
    return [(slice(i * c, (i + 1) * c), slice(i * k, (i + 1) * k)) for i in range(g)]


def _split_params(layer: Layer, w: Any) -> list[Any]:
    out, off = [], 0
    for shape in layer.param_shapes:
        size = math.prod(shape)
        out.append(w[off:off + size].reshape(shape))
        off += size
    return out


def _dropout_mask(layer: Layer, shape: tuple[int, ...], seed: int) -> np.ndarray:
    rng = np.random.default_rng([seed, layer.id])
    return (rng.random(shape) >= layer.attrs["p"]).astype(np.dtype(layer.dtype))


def forward(xp: Any, layer: Layer, xs: list[Any], w: Any, seed: int) -> Any:
    """Output of `layer` for inputs `xs` and flat parameters `w`."""
    t = layer.type
    a = layer.attrs
    if t is LayerType.CONV:
        kernel, bias = (_split_params(layer, w) + [None])[:2]
        n, k, oh, ow = layer.out_shape
        cols = _conv_cols(xp, layer, xs[0])
        if layer.attrs.get("groups", 1) == 1:
            out = cols @ kernel.reshape(k, -1).T
        else:
            kmat = kernel.reshape(k, -1)
            out = xp.concatenate([cols[:, c] @ kmat[o].T for c, o in
                                  _group_slices(layer, cols.shape[1], k)], axis=1)
        if bias is not None:
            out = out + bias
        return out.reshape(n, oh, ow, k).transpose(0, 3, 1, 2)
    if t is LayerType.FC:
        weight, bias = (_split_params(layer, w) + [None])[:2]
        out = xs[0].reshape(xs[0].shape[0], -1) @ weight
        return out + bias if bias is not None else out
    if t is LayerType.POOL:
        x = xs[0]
        k, s, p = a["kernel"], a["stride"], a["pad"]
        n, c, oh, ow = layer.out_shape
        fill = -np.inf if a["mode"] == "max" else 0.0
        _, win = _windows(xp, x, k, k, s, p, p, oh, ow, fill)
        win = win.reshape(n, c, oh, ow, k * k)
        return win.max(axis=-1) if a["mode"] == "max" else win.sum(axis=-1) / (k * k)
    if t is LayerType.ACT:
        return _act(xp, a.get("fn", "relu"), xs[0])
    if t is LayerType.BN:
        x = xs[0]
        gamma, beta = _bn_affine(layer, w)
        xhat, _ = _bn_norm(xp, x)
        return xhat * gamma + beta
    if t is LayerType.LRN:
        x = xs[0]
        scale = _lrn_scale(xp, layer, x)
        return x * scale ** (-a["beta"])
    if t is LayerType.DROPOUT:
        mask = xp.asarray(_dropout_mask(layer, xs[0].shape, seed))
        return xs[0] * mask / (1.0 - a["p"])
    if t is LayerType.SOFTMAX:
        z = xs[0] - xs[0].max(axis=1, keepdims=True)
        e = xp.exp(z)
        return e / e.sum(axis=1, keepdims=True)
    if t is LayerType.CONCAT:
        return xp.concatenate(xs, axis=1)
    if t is LayerType.FORK:
        return xs[0].copy()
    if t is LayerType.JOIN or (t is LayerType.ELTWISE and a.get("op", "sum") == "sum"):
        out = xs[0].copy()
        for x in xs[1:]:
            out = out + x
        return out
    if t is LayerType.ELTWISE:
        out = xs[0].copy()
        for x in xs[1:]:
            out = out * x if a["op"] == "prod" else xp.maximum(out, x)
        return out
    raise ValueError(f"the executor cannot run {t.value} layer {layer.name!r}")


KERNEL_READS: dict[str, frozenset[str]] = {
    "CONV": frozenset({"x", "dy", "w"}), "FC": frozenset({"x", "dy", "w"}),
    "POOL": frozenset({"x", "dy"}), "ACT": frozenset({"x", "y", "dy"}),
    "BN": frozenset({"x", "dy", "w"}), "LRN": frozenset({"x", "y", "dy"}),
    "DROPOUT": frozenset({"dy"}), "SOFTMAX": frozenset({"y"}), "CONCAT": frozenset({"dy"}),
    "FORK": frozenset({"dy"}), "JOIN": frozenset({"dy"}), "ELTWISE.sum": frozenset({"dy"}),
    "ELTWISE.prod": frozenset({"x", "dy"}), "ELTWISE.max": frozenset({"x", "y", "dy"}),
}
"""What the backward kernels below read, by layer key: a plan runs here only when its graph's
dependency profile keeps at least these tensors for each backward step (`check_profile`)."""


def check_profile(graph: Graph) -> None:
    """Refuse a graph whose dependency profile lets a backward step drop a tensor the kernels
    here read (the plan would free it before the kernel reads it)."""
    prof = graph.profile
    for layer in graph.layers:
        if not graph.has_backward(layer.id):
            continue
        variant = layer.attrs.get("variant")
        key = f"{layer.type.value}.{variant}" if variant else layer.type.value
        need = KERNEL_READS.get(key, KERNEL_READS.get(layer.type.value, frozenset()))
        step = prof.of(layer).backward
        missing = need - (step.reads if step is not None else frozenset())
        if missing:
            raise ValueError(
                f"the executor's {key} kernel reads {sorted(missing)} in backward, which profile "
                f"{prof.name!r} does not keep for layer {layer.name!r}; plan the graph under a "
                "profile that does (graph.with_profile('cudnn'))")


def backward(xp: Any, layer: Layer, xs: list[Any], y: Any, dy: Any | None, w: Any,
             labels: Any, seed: int, in_shapes: list[tuple[int, ...]] | None = None
             ) -> tuple[list[Any | None], Any | None]:
    """(gradient per input occurrence, flat parameter gradient). Reads only what
    `KERNEL_READS` names (the rest may be None); `in_shapes` are the inputs' shapes."""
    t = layer.type
    a = layer.attrs
    if t is LayerType.SOFTMAX:
        onehot = xp.zeros_like(y)
        onehot[xp.arange(y.shape[0]), labels] = 1.0
        return [(y - onehot) / y.shape[0]], None
    if t is LayerType.CONV:
        params = _split_params(layer, w)
        kernel = params[0]
        x = xs[0]
        kh, kw = a["kernel"]
        (ph, pw), s = a["pad"], a["stride"]
        n, k, oh, ow = layer.out_shape
        cols = _conv_cols(xp, layer, x)
        do = dy.transpose(0, 2, 3, 1).reshape(-1, k)
        kmat = kernel.reshape(k, -1)
        if a.get("groups", 1) == 1:
            grads = [(do.T @ cols).reshape(-1)]
            dcols = do @ kmat
        else:
            groups = _group_slices(layer, cols.shape[1], k)
            grads = [xp.concatenate([do[:, o].T @ cols[:, c] for c, o in groups]).reshape(-1)]
            dcols = xp.concatenate([do[:, o] @ kmat[o] for c, o in groups], axis=1)
        if len(params) > 1:
            grads.append(do.sum(axis=0))
        dcols = dcols.reshape(n, oh, ow, x.shape[1], kh, kw)
        dx = _unwindow(xp, dcols.transpose(0, 3, 1, 2, 4, 5), x.shape, kh, kw, s, ph, pw)
        return [dx], xp.concatenate(grads)
    if t is LayerType.FC:
        params = _split_params(layer, w)
        x2 = xs[0].reshape(xs[0].shape[0], -1)
        grads = [(x2.T @ dy).reshape(-1)]
        if len(params) > 1:
            grads.append(dy.sum(axis=0))
        return [(dy @ params[0].T).reshape(xs[0].shape)], xp.concatenate(grads)
    if t is LayerType.POOL:
        x = xs[0]
        k, s, p = a["kernel"], a["stride"], a["pad"]
        n, c, oh, ow = layer.out_shape
        if a["mode"] == "max":
            _, win = _windows(xp, x, k, k, s, p, p, oh, ow, -np.inf)
            arg = win.reshape(n, c, oh, ow, k * k).argmax(axis=-1)
            sel = (arg[..., None] == xp.arange(k * k)).astype(x.dtype)
            dwin = (sel * dy[..., None]).reshape(n, c, oh, ow, k, k)
        else:
            dwin = xp.broadcast_to((dy / (k * k))[..., None, None], (n, c, oh, ow, k, k))
        return [_unwindow(xp, dwin, x.shape, k, k, s, p, p)], None
    if t is LayerType.ACT:
        return [_act_grad(xp, a.get("fn", "relu"), xs[0], y, dy)], None
    if t is LayerType.BN:
        x = xs[0]
        gamma, _ = _bn_affine(layer, w)
        xhat, inv = _bn_norm(xp, x)
        axes = (0,) if x.ndim == 2 else (0, 2, 3)
        m = x.size // x.shape[1]
        dgamma = (dy * xhat).sum(axis=axes)
        dbeta = dy.sum(axis=axes)
        dxhat = dy * gamma
        shape = (1, -1) if x.ndim == 2 else (1, -1, 1, 1)
        dx = (inv / m) * (m * dxhat - dxhat.sum(axis=axes).reshape(shape)
                          - xhat * (dxhat * xhat).sum(axis=axes).reshape(shape))
        return [dx], xp.concatenate([dgamma, dbeta])
    if t is LayerType.LRN:
        x = xs[0]
        scale = _lrn_scale(xp, layer, x)
        size, alpha, beta = a["size"], a["alpha"], a["beta"]
        r = _channel_window_sum(xp, dy * y / scale, size)
        return [dy * scale ** (-beta) - (2.0 * alpha * beta / size) * x * r], None
    if t is LayerType.DROPOUT:
        mask = xp.asarray(_dropout_mask(layer, layer.out_shape, seed))
        return [dy * mask / (1.0 - a["p"])], None
    if t is LayerType.CONCAT:
        out, off = [], 0
        for shape in in_shapes or [x.shape for x in xs]:
            out.append(dy[:, off:off + shape[1]])
            off += shape[1]
        return out, None
    if t is LayerType.FORK:
        return [dy], None
    if t is LayerType.JOIN or (t is LayerType.ELTWISE and a.get("op", "sum") == "sum"):
        return [dy for _ in xs], None
    if t is LayerType.ELTWISE:
        out = []
        for q, x in enumerate(xs):
            if a["op"] == "prod":
                other = None
                for r, x2 in enumerate(xs):
                    if r != q:
                        other = x2 if other is None else other * x2
                out.append(dy * other)
            else:
                out.append(dy * (x == y).astype(dy.dtype))
        return out, None
    raise ValueError(f"the executor cannot run {t.value} layer {layer.name!r}")


def _act(xp: Any, fn: str, x: Any) -> Any:
    if fn == "relu":
        return xp.maximum(x, 0)
    if fn == "tanh":
        return xp.tanh(x)
    if fn == "sigmoid":
        return 1.0 / (1.0 + xp.exp(-x))
    raise ValueError(f"activation {fn!r} not in (relu, tanh, sigmoid)")


def _act_grad(xp: Any, fn: str, x: Any, y: Any, dy: Any) -> Any:
    if fn == "relu":
        return dy * (x > 0).astype(dy.dtype)
    if fn == "tanh":
        return dy * (1.0 - y * y)
    return dy * y * (1.0 - y)


def _bn_affine(layer: Layer, w: Any) -> tuple[Any, Any]:
    c = layer.out_shape[1]
    shape = (1, c) if len(layer.out_shape) == 2 else (1, c, 1, 1)
    return w[:c].reshape(shape), w[c:2 * c].reshape(shape)


def _bn_norm(xp: Any, x: Any) -> tuple[Any, Any]:
    axes = (0,) if x.ndim == 2 else (0, 2, 3)
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    inv = 1.0 / xp.sqrt(var + BN_EPS)
    return (x - mean) * inv, inv


def _channel_window_sum(xp: Any, v: Any, size: int) -> Any:
    half = size // 2
    c = v.shape[1]
    padded = xp.zeros((v.shape[0], c + size - 1) + v.shape[2:], dtype=v.dtype)
    padded[:, half:half + c] = v
    out = padded[:, 0:c].copy()
    for o in range(1, size):
        out = out + padded[:, o:o + c]
    return out


def _lrn_scale(xp: Any, layer: Layer, x: Any) -> Any:
    a = layer.attrs
    return a["k"] + (a["alpha"] / a["size"]) * _channel_window_sum(xp, x * x, a["size"])


# -- parameters and inputs ----------------------------------------------------------------------
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
    to the host right after their BACKWARD step (a profile may release dW there)."""
    g = plan.graph
    check_profile(g)
    d = g.deps
    layers = g.layers
    n = len(layers)
    xp = backend.xp
    nb = plan.nbytes
    dt = np.dtype(g.dtype)
    labels_dev = xp.asarray(labels)
    in_shapes = [[layers[j].out_shape for j in layer.inputs] for layer in layers]
    scratch = {Op.FORWARD: d.ws_fwd, Op.BACKWARD: d.ws_bwd, Op.RECOMPUTE: d.ws_rc}

    def shape_of(t: int) -> tuple[int, ...]:
        layer = layers[t // 5]
        return layer.out_shape if t % 5 in (Kind.Y, Kind.DY) else (layer.param_elems,)

    def view(t: int) -> Any:
        return backend.view(t, shape_of(t), dt)

    allocated: set[int] = set()
    pending: set[int] = set()
    grads: dict[int, np.ndarray] = {}
    loss = 0.0
    steps = plan.steps
    for k, s in enumerate(steps):
        op = s.op
        if op == Op.ALLOC:
            t = s.arg
            backend.alloc(t, nb[t])
            allocated.add(t)
            if t >= 5 * n:  # persistent state: the kernels here recompute what it would hold
                backend.upload(t, np.zeros(nb[t], np.uint8))
                continue
            kind = t % 5
            if kind == Kind.W:
                backend.upload(t, params[t // 5].astype(dt, copy=False))
            elif kind != Kind.Y:
                backend.upload(t, np.zeros(shape_of(t), dt))
        elif op == Op.FREE:
            backend.free(s.arg)
            allocated.discard(s.arg)
            pending.discard(s.arg)
        elif op == Op.MOVE:
            backend.rename(s.src, s.arg)
            allocated.discard(s.src)
            allocated.add(s.arg)
        elif op == Op.OFFLOAD:
            backend.offload(s.arg)
        elif op == Op.PREFETCH:
            backend.prefetch(s.arg)
            pending.add(s.arg)
        else:
            i = s.arg
            layer = layers[i]
            ws = scratch[op][i]
            if ws or s.ws:
                backend.alloc(WORKSPACE, ws + s.ws)
            reads = d.bwd_reads[i] if op == Op.BACKWARD else (
                d.fwd_reads[i] if op == Op.FORWARD else d.rc_reads[i])
            moved = steps[k + 1].src if k + 1 < len(steps) and steps[k + 1].op == Op.MOVE else -1
            for t in [tid(j, Kind.Y) for j in reads] + ([moved] if moved >= 0 else []):
                if t in pending:
                    backend.wait(t)
                    pending.discard(t)
            w = view(tid(i, Kind.W)) if layer.param_shapes else None
            if op == Op.BACKWARD:
                xs = [view(tid(j, Kind.Y)) if j in reads else None for j in layer.inputs]
                y = view(tid(i, Kind.Y)) if i in reads else None
                dy = view(tid(i, Kind.DY)) if d.bwd_dy[i] else None
                if layer.type is LayerType.SOFTMAX:
                    loss += _loss(backend.download(tid(i, Kind.Y), layer.out_shape, dt), labels)
                dxs, dw = backward(xp, layer, xs, y, dy, w, labels_dev, seed, in_shapes[i])
                in_place = None
                for j, dx in zip(layer.inputs, dxs):
                    if not g.has_grad(j):
                        continue
                    if tid(j, Kind.DY) in allocated:
                        buf = view(tid(j, Kind.DY))
                        buf += dx
                    else:  # written over the tensor the MOVE names, after the others
                        in_place = (j, dx)
                if in_place is not None:
                    backend.view(moved, layers[in_place[0]].out_shape, dt)[...] = in_place[1]
                if layer.param_shapes:
                    gw = view(tid(i, Kind.DW))
                    gw += dw
                    m = view(tid(i, Kind.M))
                    m *= momentum
                    m += gw
                    w -= lr * m
                    grads[i] = backend.download(tid(i, Kind.DW), (layer.param_elems,), dt)
            elif layer.type is LayerType.DATA:
                backend.upload(tid(i, Kind.Y), x.astype(dt, copy=False))
            else:
                xs = [view(tid(j, Kind.Y)) for j in layer.inputs]
                out = forward(xp, layer, xs, w, seed)
                target = tid(i, Kind.Y) if tid(i, Kind.Y) in allocated else moved
                backend.view(target, layer.out_shape, dt)[...] = out
            if ws or s.ws:
                backend.free(WORKSPACE)
    new_params = {}
    for layer in layers:
        if layer.param_shapes:
            new_params[layer.id] = backend.download(tid(layer.id, Kind.W), (layer.param_elems,), dt)
    return RunResult(loss, grads, new_params, backend.stats())
