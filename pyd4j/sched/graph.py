"""Graph IR for the planner: layers in topological order, each producing one output tensor.

Shapes are NCHW for feature maps and (N, F) for vectors; the batch is the first dimension.
Each layer records its forward and backward FLOPs and its parameter shapes; the tensors a layer
owns (output, its gradient, parameters, their gradient, momentum) are described by `tensors()`.
A tensor may feed several layers (fork); FORK/JOIN/CONCAT/ELTWISE layers exist for graphs that
spell these out (SuperNeurons' own graphs do).

The last layers must be SOFTMAX loss layers (softmax + cross-entropy): their backward step
starts the gradient, so their output has no gradient tensor.

A graph carries its framework (`pyd4j.sched.deps`; default `cudnn`): which tensors each layer's steps
read and write, and what persistent state its layers keep.
"""

from __future__ import annotations

import math
from typing import Any, Iterator

from pyd4j.sched import deps as _deps
from pyd4j.sched.graph_deps import GraphDeps, graph_deps
from pyd4j.sched.layer import CHEAP, CHEAP_STRUCTURAL, DTYPE_BYTES, GraphError, Layer, LayerType, Tensor
from pyd4j.sched.plan import Kind, state_tid, tid

__all__ = ["CHEAP", "CHEAP_STRUCTURAL", "DTYPE_BYTES", "Graph", "GraphError", "Layer", "LayerType", "Tensor"]

class Graph:
    """A network as a DAG of layers, built in topological order by the builder methods."""

    def __init__(self, name: str, batch: int, dtype: str = "float32",
                 framework: "str | _deps.FrameworkDeps" = _deps.DEFAULT_FRAMEWORK) -> None:
        if batch < 1:
            raise GraphError(f"batch must be >= 1, got {batch}")
        if dtype not in DTYPE_BYTES:
            raise GraphError(f"dtype {dtype!r} not in {sorted(DTYPE_BYTES)}")
        self.name = name
        self.batch = batch
        self.dtype = dtype
        self.framework = _deps.framework_deps(framework)
        self.layers: list[Layer] = []
        self._consumers: list[list[int]] | None = None
        self._deps: GraphDeps | None = None
        self._memo: dict[str, Any] = {}  # derived tables (bounds, decisions), reset on change

    @property
    def deps(self) -> GraphDeps:
        """The dependency model applied to this graph (see `pyd4j.sched.graph_deps`)."""
        return graph_deps(self)

    @property
    def profile(self) -> "_deps.FrameworkDeps":
        """The old name of `framework`, kept for code written against it."""
        return self.framework

    def with_framework(self, framework: "str | _deps.FrameworkDeps") -> "Graph":
        """The same layers under another framework's dependencies (a shallow copy)."""
        g = Graph(self.name, self.batch, self.dtype, framework)
        g.layers = list(self.layers)
        return g

    # -- structure ------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.layers)

    def __iter__(self) -> Iterator[Layer]:
        return iter(self.layers)

    @property
    def consumers(self) -> list[list[int]]:
        """consumers[i]: layers reading layer i's output, in topological order."""
        if self._consumers is None:
            cons: list[list[int]] = [[] for _ in self.layers]
            for layer in self.layers:
                for j in dict.fromkeys(layer.inputs):
                    cons[j].append(layer.id)
            self._consumers = cons
        return self._consumers

    def has_grad(self, i: int) -> bool:
        """Whether layer i's output has a gradient tensor (not data, not a loss output)."""
        t = self.layers[i].type
        return t is not LayerType.DATA and t is not LayerType.SOFTMAX

    def grad_inputs(self, i: int) -> list[int]:
        """Distinct inputs of layer i whose gradient its backward step writes."""
        return [j for j in dict.fromkeys(self.layers[i].inputs) if self.has_grad(j)]

    def has_backward(self, i: int) -> bool:
        """Layers with a backward step: everything but DATA."""
        return self.layers[i].type is not LayerType.DATA

    def tensors(self) -> list[Tensor]:
        """Every tensor of the IR with its shape, dtype and size (persistent state last)."""
        out: list[Tensor] = []
        for layer in self.layers:
            out.append(Tensor(tid(layer.id, Kind.Y), f"{layer.name}:Y", Kind.Y, layer.out_shape,
                              layer.dtype, layer.out_bytes))
            if self.has_grad(layer.id):
                out.append(Tensor(tid(layer.id, Kind.DY), f"{layer.name}:DY", Kind.DY,
                                  layer.out_shape, layer.dtype, layer.out_bytes))
            if layer.param_shapes:
                for kind in (Kind.W, Kind.DW, Kind.M):
                    nbytes = self.deps.nbytes[tid(layer.id, kind)]
                    if nbytes:   # M, the updater's state, is absent under a stateless updater (Sgd, NoOp)
                        out.append(Tensor(tid(layer.id, kind), f"{layer.name}:{kind.name}", kind,
                                          (nbytes // layer.itemsize,), layer.dtype, nbytes))
        n = len(self.layers)
        d = self.deps
        for layer, state, saved in zip(self.layers, d.state_bytes, d.saved_bytes):
            if state or saved:  # persistent state, or what the forward step keeps for backward
                out.append(Tensor(state_tid(n, layer.id), f"{layer.name}:STATE", None,
                                  (state or saved,), "uint8", state or saved))
        return out

    def nbytes_table(self) -> list[int]:
        """nbytes[t] for every tensor id (0 where a layer does not own that kind); state
        tensors' sizes are already aligned. A copy of the dependency model's table."""
        return list(self.deps.nbytes)

    def validate(self) -> None:
        """Check topological order, inputs and that every sink is a SOFTMAX loss."""
        for layer in self.layers:
            for j in layer.inputs:
                if not 0 <= j < layer.id:
                    raise GraphError(f"layer {layer.name!r} reads layer {j}, not before it")
            if layer.type is LayerType.DATA and layer.inputs:
                raise GraphError(f"DATA layer {layer.name!r} cannot have inputs")
        for layer in self.layers:
            if not self.consumers[layer.id] and layer.type is not LayerType.SOFTMAX:
                raise GraphError(
                    f"layer {layer.name!r} ({layer.type.value}) has no consumers; every output "
                    "of the network must end in a SOFTMAX loss layer"
                )

    @property
    def n_params(self) -> int:
        return sum(layer.param_elems for layer in self.layers)

    def count(self, ltype: LayerType) -> int:
        return sum(1 for layer in self.layers if layer.type is ltype)

    # -- builders -------------------------------------------------------------------------
    def _add(self, ltype: LayerType, inputs: tuple[int, ...], out_shape: tuple[int, ...],
             name: str | None, params: tuple[tuple[int, ...], ...] = (), fwd: float = 0.0,
             bwd: float | None = None, **attrs: Any) -> int:
        i = len(self.layers)
        for j in inputs:
            if not 0 <= j < i:
                raise GraphError(f"{ltype.value} layer reads unknown layer id {j}")
        if any(d <= 0 for d in out_shape):
            raise GraphError(f"{ltype.value} layer {name or i} has empty output shape {out_shape}")
        elems = math.prod(out_shape)
        fwd = fwd or float(elems)
        layer = Layer(i, name or f"{ltype.value.lower()}{i}", ltype, inputs, out_shape,
                      self.dtype, params, fwd, 2.0 * fwd if bwd is None else bwd, attrs)
        self.layers.append(layer)
        self._consumers = None
        self._deps = None
        self._memo = {}
        return i

    def shape(self, i: int) -> tuple[int, ...]:
        return self.layers[i].out_shape

    def data(self, *sample_shape: int, name: str = "data", classes: int | None = None) -> int:
        """Input batch of shape (batch, *sample_shape)."""
        return self._add(LayerType.DATA, (), (self.batch, *sample_shape), name, fwd=0.0, bwd=0.0,
                         classes=classes)

    def conv(self, x: int, out_channels: int, kernel: int | tuple[int, int], stride: int = 1,
             pad: int = 0, bias: bool = True, name: str | None = None, groups: int = 1) -> int:
        """Convolution; `groups` > 1 splits input and output channels into that many groups,
        each output group reading its input group only (Caffe's grouped AlexNet: 2)."""
        n, c, h, w = self._nchw(x, "CONV")
        if groups < 1 or c % groups or out_channels % groups:
            raise GraphError(f"conv {name or len(self.layers)}: {groups} groups do not divide "
                             f"{c} input and {out_channels} output channels")
        kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
        ph, pw = (pad, pad) if isinstance(pad, int) else pad
        oh, ow = (h + 2 * ph - kh) // stride + 1, (w + 2 * pw - kw) // stride + 1
        params: tuple[tuple[int, ...], ...] = ((out_channels, c // groups, kh, kw),)
        if bias:
            params += ((out_channels,),)
        macs = n * out_channels * oh * ow * (c // groups) * kh * kw
        extra = {"groups": groups} if groups > 1 else {}
        return self._add(LayerType.CONV, (x,), (n, out_channels, oh, ow), name, params,
                         2.0 * macs, 4.0 * macs, kernel=(kh, kw), stride=stride, pad=(ph, pw),
                         bias=bias, **extra)

    def fc(self, x: int, out_features: int, bias: bool = True, name: str | None = None) -> int:
        shape = self.shape(x)
        n, f = shape[0], math.prod(shape[1:])
        params: tuple[tuple[int, ...], ...] = ((f, out_features),)
        if bias:
            params += ((out_features,),)
        macs = n * f * out_features
        return self._add(LayerType.FC, (x,), (n, out_features), name, params, 2.0 * macs,
                         4.0 * macs, bias=bias)

    def pool(self, x: int, kernel: int, stride: int | None = None, pad: int = 0,
             mode: str = "max", name: str | None = None, ceil: bool = True) -> int:
        """Pooling window; `ceil` rounds the output size up as Caffe does (floor: TF 'valid')."""
        n, c, h, w = self._nchw(x, "POOL")
        stride = stride or kernel
        if ceil:
            oh = -(-(h + 2 * pad - kernel) // stride) + 1
            ow = -(-(w + 2 * pad - kernel) // stride) + 1
            if pad and (oh - 1) * stride >= h + pad:
                oh -= 1
            if pad and (ow - 1) * stride >= w + pad:
                ow -= 1
        else:
            oh = (h + 2 * pad - kernel) // stride + 1
            ow = (w + 2 * pad - kernel) // stride + 1
        if mode not in ("max", "avg"):
            raise GraphError(f"pool mode {mode!r} not in ('max', 'avg')")
        return self._add(LayerType.POOL, (x,), (n, c, oh, ow), name,
                         fwd=float(n * c * oh * ow * kernel * kernel), kernel=kernel,
                         stride=stride, pad=pad, mode=mode, ceil=ceil)

    def global_pool(self, x: int, name: str | None = None) -> int:
        n, c, h, w = self._nchw(x, "POOL")
        if h != w:
            raise GraphError(f"global pool needs a square map, got {h}x{w}")
        return self.pool(x, h, h, 0, "avg", name=name)

    def act(self, x: int, fn: str = "relu", name: str | None = None, fused: bool = False) -> int:
        """Activation; `fused`: the activation of the layer before it (DL4J's Dense and
        Convolution layers apply theirs in place), variant `fused` of the dependency model."""
        if fused:
            return self._add(LayerType.ACT, (x,), self.shape(x), name, fn=fn, variant="fused")
        return self._add(LayerType.ACT, (x,), self.shape(x), name, fn=fn)

    def bn(self, x: int, name: str | None = None) -> int:
        shape = self.shape(x)
        return self._add(LayerType.BN, (x,), shape, name, ((2 * shape[1],),),
                         fwd=8.0 * math.prod(shape))

    def lrn(self, x: int, size: int = 5, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0,
            name: str | None = None) -> int:
        self._nchw(x, "LRN")
        shape = self.shape(x)
        return self._add(LayerType.LRN, (x,), shape, name, fwd=float(math.prod(shape) * (size + 4)),
                         size=size, alpha=alpha, beta=beta, k=k)

    def dropout(self, x: int, p: float = 0.5, name: str | None = None) -> int:
        if not 0.0 <= p < 1.0:
            raise GraphError(f"dropout p must be in [0, 1), got {p}")
        return self._add(LayerType.DROPOUT, (x,), self.shape(x), name, p=p)

    def softmax(self, x: int, name: str | None = None) -> int:
        shape = self.shape(x)
        if len(shape) != 2:
            raise GraphError(f"SOFTMAX expects (N, classes), got {shape}")
        return self._add(LayerType.SOFTMAX, (x,), shape, name, fwd=5.0 * math.prod(shape))

    def concat(self, xs: list[int], name: str | None = None) -> int:
        shapes = [self._nchw(x, "CONCAT") for x in xs]
        n, _, h, w = shapes[0]
        if any((s[0], s[2], s[3]) != (n, h, w) for s in shapes):
            raise GraphError(f"CONCAT inputs differ in N/H/W: {shapes}")
        return self._add(LayerType.CONCAT, tuple(xs), (n, sum(s[1] for s in shapes), h, w), name)

    def fork(self, x: int, name: str | None = None) -> int:
        return self._add(LayerType.FORK, (x,), self.shape(x), name)

    def join(self, xs: list[int], name: str | None = None) -> int:
        return self._same_shape(LayerType.JOIN, xs, name)

    def eltwise(self, xs: list[int], op: str = "sum", name: str | None = None) -> int:
        if op not in ("sum", "prod", "max"):
            raise GraphError(f"eltwise op {op!r} not in ('sum', 'prod', 'max')")
        return self._same_shape(LayerType.ELTWISE, xs, name, op=op, variant=op)

    def _same_shape(self, ltype: LayerType, xs: list[int], name: str | None, **attrs: Any) -> int:
        shapes = {self.shape(x) for x in xs}
        if len(shapes) != 1 or len(xs) < 2:
            raise GraphError(f"{ltype.value} needs >= 2 inputs of one shape, got {sorted(shapes)}")
        return self._add(ltype, tuple(xs), self.shape(xs[0]), name,
                         fwd=float(len(xs) * math.prod(self.shape(xs[0]))), **attrs)

    def _nchw(self, x: int, what: str) -> tuple[int, int, int, int]:
        shape = self.shape(x)
        if len(shape) != 4:
            raise GraphError(f"{what} expects an NCHW input, layer {x} gives {shape}")
        return shape  # type: ignore[return-value]
