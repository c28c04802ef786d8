"""The reference executor's layer kernels: numpy-style array code (numpy or cupy, as `xp`) for each
layer's forward and backward step, and what each backward kernel reads (`KERNEL_READS`), which a plan's
framework must keep (`check_framework`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pyd4j.sched.graph import Graph, Layer, LayerType

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
framework keeps at least these tensors for each backward step (`check_framework`)."""


def check_framework(graph: Graph) -> None:
    """Refuse a graph whose framework lets a backward step drop a tensor the kernels
    here read (the plan would free it before the kernel reads it)."""
    fw = graph.framework
    for layer in graph.layers:
        if not graph.has_backward(layer.id):
            continue
        variant = layer.attrs.get("variant")
        key = f"{layer.type.value}.{variant}" if variant else layer.type.value
        need = KERNEL_READS.get(key, KERNEL_READS.get(layer.type.value, frozenset()))
        step = fw.of(layer).backward
        missing = need - (step.reads if step is not None else frozenset())
        if missing:
            raise ValueError(
                f"the executor's {key} kernel reads {sorted(missing)} in backward, which framework "
                f"{fw.name!r} does not keep for layer {layer.name!r}; plan the graph under a "
                "framework that does (graph.with_framework('cudnn'))")


def backward(xp: Any, layer: Layer, xs: list[Any], y: Any, dy: Any | None, w: Any,
             labels: Any, seed: int, in_shapes: list[tuple[int, ...]] | None = None
             ) -> tuple[list[Any | None], Any | None]:
    """(gradient per input occurrence, flat parameter gradient). Reads only what
    `KERNEL_READS` names (the rest may be None); `in_shapes` are the inputs' shapes."""
    kernel = _BACKWARD.get(layer.type)
    if kernel is None:
        raise ValueError(f"the executor cannot run {layer.type.value} layer {layer.name!r}")
    return kernel(xp, layer, xs, y, dy, w, labels, seed, in_shapes)


Grads = tuple[list[Any | None], Any | None]


def _softmax_backward(xp: Any, layer: Layer, xs: list[Any], y: Any, dy: Any, w: Any, labels: Any, seed: int,
                      in_shapes: list[tuple[int, ...]] | None) -> Grads:
    onehot = xp.zeros_like(y)
    onehot[xp.arange(y.shape[0]), labels] = 1.0
    return [(y - onehot) / y.shape[0]], None


def _conv_backward(xp: Any, layer: Layer, xs: list[Any], y: Any, dy: Any, w: Any, labels: Any, seed: int,
                   in_shapes: list[tuple[int, ...]] | None) -> Grads:
    a = layer.attrs
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


def _fc_backward(xp: Any, layer: Layer, xs: list[Any], y: Any, dy: Any, w: Any, labels: Any, seed: int,
                 in_shapes: list[tuple[int, ...]] | None) -> Grads:
    params = _split_params(layer, w)
    x2 = xs[0].reshape(xs[0].shape[0], -1)
    grads = [(x2.T @ dy).reshape(-1)]
    if len(params) > 1:
        grads.append(dy.sum(axis=0))
    return [(dy @ params[0].T).reshape(xs[0].shape)], xp.concatenate(grads)


def _pool_backward(xp: Any, layer: Layer, xs: list[Any], y: Any, dy: Any, w: Any, labels: Any, seed: int,
                   in_shapes: list[tuple[int, ...]] | None) -> Grads:
    a = layer.attrs
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


def _act_backward(xp: Any, layer: Layer, xs: list[Any], y: Any, dy: Any, w: Any, labels: Any, seed: int,
                  in_shapes: list[tuple[int, ...]] | None) -> Grads:
    return [_act_grad(xp, layer.attrs.get("fn", "relu"), xs[0], y, dy)], None


def _bn_backward(xp: Any, layer: Layer, xs: list[Any], y: Any, dy: Any, w: Any, labels: Any, seed: int,
                 in_shapes: list[tuple[int, ...]] | None) -> Grads:
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


def _lrn_backward(xp: Any, layer: Layer, xs: list[Any], y: Any, dy: Any, w: Any, labels: Any, seed: int,
                  in_shapes: list[tuple[int, ...]] | None) -> Grads:
    a = layer.attrs
    x = xs[0]
    scale = _lrn_scale(xp, layer, x)
    size, alpha, beta = a["size"], a["alpha"], a["beta"]
    r = _channel_window_sum(xp, dy * y / scale, size)
    return [dy * scale ** (-beta) - (2.0 * alpha * beta / size) * x * r], None


def _dropout_backward(xp: Any, layer: Layer, xs: list[Any], y: Any, dy: Any, w: Any, labels: Any, seed: int,
                      in_shapes: list[tuple[int, ...]] | None) -> Grads:
    mask = xp.asarray(_dropout_mask(layer, layer.out_shape, seed))
    return [dy * mask / (1.0 - layer.attrs["p"])], None


def _concat_backward(xp: Any, layer: Layer, xs: list[Any], y: Any, dy: Any, w: Any, labels: Any, seed: int,
                     in_shapes: list[tuple[int, ...]] | None) -> Grads:
    out, off = [], 0
    for shape in in_shapes or [x.shape for x in xs]:
        out.append(dy[:, off:off + shape[1]])
        off += shape[1]
    return out, None


def _fork_backward(xp: Any, layer: Layer, xs: list[Any], y: Any, dy: Any, w: Any, labels: Any, seed: int,
                   in_shapes: list[tuple[int, ...]] | None) -> Grads:
    return [dy], None


def _sum_backward(xp: Any, layer: Layer, xs: list[Any], y: Any, dy: Any, w: Any, labels: Any, seed: int,
                  in_shapes: list[tuple[int, ...]] | None) -> Grads:
    return [dy for _ in xs], None


def _eltwise_backward(xp: Any, layer: Layer, xs: list[Any], y: Any, dy: Any, w: Any, labels: Any, seed: int,
                      in_shapes: list[tuple[int, ...]] | None) -> Grads:
    a = layer.attrs
    if a.get("op", "sum") == "sum":
        return [dy for _ in xs], None
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


_BACKWARD = {
    LayerType.SOFTMAX: _softmax_backward, LayerType.CONV: _conv_backward, LayerType.FC: _fc_backward,
    LayerType.POOL: _pool_backward, LayerType.ACT: _act_backward, LayerType.BN: _bn_backward,
    LayerType.LRN: _lrn_backward, LayerType.DROPOUT: _dropout_backward, LayerType.CONCAT: _concat_backward,
    LayerType.FORK: _fork_backward, LayerType.JOIN: _sum_backward, LayerType.ELTWISE: _eltwise_backward,
}


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


