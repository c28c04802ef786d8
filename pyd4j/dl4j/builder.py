"""One planner node per DL4J layer or graph vertex, shapes and FLOPs as DL4J computes them."""

from __future__ import annotations

import math
from typing import Any

from pyd4j.dl4j.layer_rules import (ELTWISE_OPS, LOSS_LAYERS, GraphError, UnsupportedLayer, activation, check_nin,
                                    opaque_shape, preprocessed, retain, simple_name, spatial, whole, window)
from pyd4j.sched.graph import Graph, LayerType


class Builder:
    """Adds one node per DL4J layer; shapes and FLOPs as DL4J computes them."""

    def __init__(self, g: Graph, info: dict[str, dict[str, Any]] | None = None) -> None:
        self.g = g
        self.info = info or {}

    def layer(self, layer: dict[str, Any], x: int, dl4j: dict[str, Any],
              preprocessor: dict[str, Any] | None = None) -> int:
        g = self.g
        kind = simple_name(layer["@class"])
        name = layer.get("layerName") or f"layer{dl4j.get('layer', len(g.layers))}"
        attrs: dict[str, Any] = {"dl4j": {**dl4j, "class": kind}}
        p = retain(layer)
        if p is not None:
            attrs["idropout"] = p
        for key, field in (("updater", "iupdater"), ("bias_updater", "biasUpdater")):
            if isinstance(layer.get(field), dict) and layer[field].get("@class"):
                attrs[key] = simple_name(layer[field]["@class"])   # what fit()'s updater keeps (pyd4j.dl4j.fitmem)
        if preprocessor is not None:
            attrs["preprocessor"] = simple_name(preprocessor["@class"])
        xs = preprocessed(preprocessor, g.shape(x), g.batch, name)   # what DL4J's layer is given
        check_nin(layer, kind, xs, name)
        step = _STEPS.get(kind)
        if step is not None:
            return step(self, layer, x, xs, name, attrs)
        if kind in LOSS_LAYERS:
            return self._loss(kind, layer, x, xs, name, attrs)
        return self._opaque(kind, layer, (x,), name, attrs, [xs])

    # One method per DL4J layer kind the planner measures. `xs` is what DL4J's layer is given: its
    # first entry the batch, or batch x time steps for a layer a preprocessor applies to every step.

    def _conv(self, layer: dict[str, Any], x: int, xs: tuple[int, ...], name: str, attrs: dict[str, Any]) -> int:
        n = xs[0]
        c, h, w = self._chw(xs, name)
        (kh, kw), (sh, _), (ph, pw), _ = window(layer, name)
        oh, ow = spatial(layer, h, w, name)
        cout = whole(layer["nout"], f"{name}: nOut")
        params: tuple[tuple[int, ...], ...] = ((cout, c, kh, kw),)
        if layer.get("hasBias", True):
            params += ((cout,),)
        macs = n * cout * oh * ow * c * kh * kw
        return self.g._add(LayerType.CONV, (x,), (n, cout, oh, ow), name, params, 2.0 * macs,
                           4.0 * macs, kernel=(kh, kw), stride=sh, pad=(ph, pw), bias=bool(len(params) > 1),
                           act=activation(layer), **attrs)

    def _dense(self, layer: dict[str, Any], x: int, xs: tuple[int, ...], name: str, attrs: dict[str, Any]) -> int:
        n, f = xs[0], math.prod(xs[1:])
        cout = whole(layer["nout"], f"{name}: nOut")
        params = ((f, cout),) + (((cout,),) if layer.get("hasBias", True) else ())
        macs = n * f * cout
        output = simple_name(layer["@class"]) == "OutputLayer"
        if output:
            attrs["loss"] = simple_name(layer.get("lossFn", {}).get("@class", "?"))
        return self.g._add(LayerType.SOFTMAX if output else LayerType.FC, (x,), (n, cout), name, params,
                           2.0 * macs, 4.0 * macs, act=activation(layer), bias=len(params) > 1, **attrs)

    def _subsampling(self, layer: dict[str, Any], x: int, xs: tuple[int, ...], name: str,
                     attrs: dict[str, Any]) -> int:
        n = xs[0]
        c, h, w = self._chw(xs, name)
        (kh, kw), (sh, _), (ph, _), _ = window(layer, name)
        mode = {"MAX": "max", "AVG": "avg"}.get(layer.get("poolingType", "MAX"))
        oh, ow = spatial(layer, h, w, name)
        if mode is None:   # PNORM: not measured, an opaque step
            return self.g._add(LayerType.OPAQUE, (x,), (n, c, oh, ow), name, (),
                               float(n * c * oh * ow * kh * kw), **attrs)
        return self.g._add(LayerType.POOL, (x,), (n, c, oh, ow), name, (),
                           float(n * c * oh * ow * kh * kw), kernel=kh, stride=sh, pad=ph,
                           mode=mode, **({"variant": "avg"} if mode == "avg" else {}), **attrs)

    def _global_pooling(self, layer: dict[str, Any], x: int, xs: tuple[int, ...], name: str,
                        attrs: dict[str, Any]) -> int:
        n = xs[0]
        mode = {"MAX": "max", "AVG": "avg"}.get(layer.get("poolingType", "MAX"))
        collapse = layer.get("collapseDimensions", True)
        if len(xs) != 4:   # over time (N, C, T) or a 3-D map (N, C, D, H, W): DL4J's own step, opaque
            out = (n, xs[1]) if collapse else (n, xs[1], *(1,) * (len(xs) - 2))
            return self.g._add(LayerType.OPAQUE, (x,), out, name, (), float(math.prod(xs)), **attrs)
        c, h, w = self._chw(xs, name)
        if mode is None or not collapse:   # not measured: opaque
            out = (n, c) if collapse else (n, c, 1, 1)
            return self.g._add(LayerType.OPAQUE, (x,), out, name, (), float(n * c * h * w), **attrs)
        return self.g._add(LayerType.POOL, (x,), (n, c), name, (), float(n * c * h * w),
                           kernel=h, stride=h, pad=0, mode=mode, global_pool=True,
                           variant=f"global_{mode}", **attrs)

    def _batch_norm(self, layer: dict[str, Any], x: int, xs: tuple[int, ...], name: str,
                    attrs: dict[str, Any]) -> int:
        c = xs[1]
        # the trainer can run it in two passes over batch slices (org.pyd4j.train.SlicedBatchNorm)
        sliceable = (len(xs) in (2, 4) and not layer.get("lockGammaBeta") and not layer.get("idropout")
                     and layer.get("cnn2DFormat", "NCHW") == "NCHW")
        return self.g._add(LayerType.BN, (x,), xs, name, ((4 * c,),), 8.0 * math.prod(xs),
                           **({"sliceable": True} if sliceable else {}), **attrs)

    def _activation(self, layer: dict[str, Any], x: int, xs: tuple[int, ...], name: str,
                    attrs: dict[str, Any]) -> int:
        sliceable = {"sliceable": True} if not layer.get("idropout") else {}   # element by element: bit for bit
        return self.g._add(LayerType.ACT, (x,), xs, name, fn=activation(layer), **sliceable, **attrs)

    def _dropout(self, layer: dict[str, Any], x: int, xs: tuple[int, ...], name: str, attrs: dict[str, Any]) -> int:
        p = attrs.pop("idropout", None)   # its dropout is the node itself, not an input dropout
        return self.g._add(LayerType.DROPOUT, (x,), xs, name, p=1.0 - (p if p is not None else 1.0), **attrs)

    def _lrn(self, layer: dict[str, Any], x: int, xs: tuple[int, ...], name: str, attrs: dict[str, Any]) -> int:
        self._chw(xs, name)
        size = whole(layer.get("n", 5), f"{name}: n")
        return self.g._add(LayerType.LRN, (x,), xs, name, fwd=float(math.prod(xs) * (size + 4)),
                           size=size, alpha=float(layer.get("alpha", 1e-4)),
                           beta=float(layer.get("beta", 0.75)), k=float(layer.get("k", 2.0)), **attrs)

    def _loss(self, kind: str, layer: dict[str, Any], x: int, xs: tuple[int, ...], name: str,
              attrs: dict[str, Any]) -> int:
        """A loss layer other than OutputLayer: the loss node (its backward step starts the
        gradient), with DL4J's parameters (RnnOutputLayer: W, b; CenterLossOutputLayer: W, b and
        the class centres; the others none)."""
        g, n = self.g, xs[0]
        attrs["loss"] = simple_name(layer.get("lossFn", {}).get("@class", kind))
        if kind in ("RnnOutputLayer", "CenterLossOutputLayer"):
            f = xs[1] if kind == "RnnOutputLayer" else math.prod(xs[1:])
            cout = whole(layer["nout"], f"{name}: nOut")
            params: tuple[tuple[int, ...], ...] = ((f, cout),)
            if layer.get("hasBias", True):
                params += ((cout,),)
            if kind == "CenterLossOutputLayer":
                params += ((cout, f),)
            out = (n, cout, *xs[2:]) if kind == "RnnOutputLayer" else (n, cout)
            macs = math.prod(out) * f
            return g._add(LayerType.SOFTMAX, (x,), out, name, params, 2.0 * macs, 4.0 * macs,
                          act=activation(layer), **attrs)
        return g._add(LayerType.SOFTMAX, (x,), xs, name, fwd=5.0 * math.prod(xs), act=activation(layer), **attrs)

    def _opaque(self, kind: str, conf: dict[str, Any], xs: tuple[int, ...], name: str,
                attrs: dict[str, Any], shapes: list[tuple[int, ...]] | None = None) -> int:
        """A layer or vertex without a measured model: an OPAQUE node, its output shape and
        parameter shapes from the rules below or from DL4J's own shape inference (`info`);
        `shapes`: its inputs' shapes as it reads them (after a layer's input preprocessor)."""
        g = self.g
        attrs["dl4j"]["class"] = kind
        known = self.info.get(name)
        inputs = ({layer.name: tuple(layer.out_shape) for layer in g.layers if layer.type is LayerType.DATA}
                  if kind == "DuplicateToTimeSeriesVertex" else None)   # the one rule that names a network input
        try:
            shape, params = opaque_shape(kind, conf, shapes or [g.shape(x) for x in xs], name, inputs)
        except UnsupportedLayer:
            if known is None:
                raise
            shape, params = None, None
        if known is not None:   # DL4J's own shape inference and parameter count win
            # DL4J's shapes are per example; the batch is the rule's (a StackVertex multiplies it)
            batch = shape[0] if shape is not None else g.batch
            dl4j = (batch, *known["shape"]) if known.get("shape") is not None else shape
            # but not a series' length where the rule has one: DL4J's input types cannot carry it past a
            # DuplicateToTimeSeriesVertex (which takes another input's length at run time; its type says 1)
            same_series = shape is not None and dl4j is not None and len(shape) == len(dl4j) == 3 and shape[:2] == dl4j[:2]
            shape = shape if same_series else dl4j
            if params is None or sum(math.prod(p) for p in params) != known.get("params", 0):
                params = ((int(known["params"]),),) if known.get("params") else ()
            if known.get("measured"):
                attrs["measured"] = known["measured"]
        assert shape is not None
        fwd = float(max(math.prod(shape), sum(math.prod(g.shape(x)) for x in xs)))
        if params:
            fwd = max(fwd, 2.0 * math.prod(shape[:1]) * sum(math.prod(p) for p in params))
        return g._add(LayerType.OPAQUE, tuple(xs), tuple(int(d) for d in shape), name, params or (), fwd, **attrs)

    @staticmethod
    def _chw(shape: tuple[int, ...], name: str) -> tuple[int, int, int]:
        if len(shape) != 4:
            raise GraphError(f"layer {name!r} expects an NCHW input, got {shape}")
        return shape[1], shape[2], shape[3]


def vertex(b: Builder, name: str, vertex: dict[str, Any], xs: list[int]) -> int:
    kind = simple_name(vertex["@class"])
    g = b.g
    dl4j = {"vertex": name, "class": kind}
    if kind == "LayerVertex":
        if len(xs) != 1:
            raise GraphError(f"layer vertex {name!r} has {len(xs)} inputs")
        layer = dict(vertex["layerConf"]["layer"])
        layer["layerName"] = name
        return b.layer(layer, xs[0], {"vertex": name}, vertex.get("preProcessor"))
    if kind in ("ElementWiseVertex", "MergeVertex"):
        batches = [g.shape(x)[0] for x in xs]
        if len(set(batches)) > 1:   # a StackVertex multiplies the batch, an UnstackVertex divides it
            raise GraphError(f"{kind} {name!r} combines inputs of batch sizes {batches} (shapes "
                             f"{[g.shape(x) for x in xs]}): its inputs must agree in the batch; put an "
                             "UnstackVertex after a StackVertex before combining their outputs with others")
    if kind == "ElementWiseVertex":
        op = vertex.get("op", "Add")
        if op not in ELTWISE_OPS:
            raise UnsupportedLayer(f"ElementWiseVertex op {op} of vertex {name!r}")
        i = g.join(xs, name=name) if op == "Add" else g.eltwise(xs, ELTWISE_OPS[op], name=name)
        g.layers[i].attrs.update(dl4j={**dl4j, "op": op})
        return i
    if kind == "MergeVertex":
        shapes = [g.shape(x) for x in xs]
        if all(len(s) in (2, 3) for s in shapes):  # merging feature vectors or sequences (N, C, T)
            if len({s[2:] for s in shapes}) != 1:
                raise GraphError(f"merge vertex {name!r}: inputs {shapes} differ beyond the channels")
            i = g._add(LayerType.CONCAT, tuple(xs), (shapes[0][0], sum(s[1] for s in shapes), *shapes[0][2:]), name)
        else:
            i = g.concat(xs, name=name)
        g.layers[i].attrs["dl4j"] = dl4j
        return i
    return b._opaque(kind, vertex, tuple(xs), name, {"dl4j": dl4j})


_STEPS = {
    "ConvolutionLayer": Builder._conv, "Convolution2D": Builder._conv,
    "DenseLayer": Builder._dense, "OutputLayer": Builder._dense,
    "SubsamplingLayer": Builder._subsampling, "GlobalPoolingLayer": Builder._global_pooling,
    "BatchNormalization": Builder._batch_norm, "ActivationLayer": Builder._activation,
    "DropoutLayer": Builder._dropout, "LocalResponseNormalization": Builder._lrn,
}
