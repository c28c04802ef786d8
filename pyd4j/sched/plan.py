"""Schedule records: what a plan tells an executor to do, one record at a time.

A plan is a flat list of `Step` records replayed in order by the simulator
(`pyd4j.sched.simulator`) and by executors (`pyd4j.device.executor`). Memory is accounted in
*program order*: a tensor occupies `aligned(nbytes)` device bytes from its ALLOC record to its
FREE record, and a compute step's convolution workspace occupies `aligned(ws)` bytes during that
step only. Executors use the same rule (`aligned`), which is why an executor's measured peak can
equal the simulator's peak exactly.

Tensor ids are derived from layer ids (see `tid`): each layer `i` owns its output Y, the gradient
of its output dY, and, when it has parameters, W (parameters), dW (their gradient) and M
(SGD-momentum state). A layer with persistent extra state under the graph's framework
(BN statistics, dropout masks; `pyd4j.sched.deps`) owns one more tensor, `state_tid(n, i)`,
numbered after all the others (n = number of layers), so the ids above never change.

In-place steps (`pyd4j.sched.graph_deps.GraphDeps.fwd_inplace` / `bwd_inplace`) write their result
over a tensor they read; the MOVE record right after such a compute record renames that buffer:
`Step(Op.MOVE, dst, src=src)` -- no copy, no allocation; `src` is no longer allocated, `dst` is.
A FORWARD/RECOMPUTE record whose output is not allocated, or a BACKWARD record writing a
gradient that is not allocated, is always followed by the MOVE that names where the result went.
Which tensors a compute record reads and writes is the dependency model's answer for its layer
and op; a BACKWARD record of a layer with parameters writes dW and applies the update
(dW allocated around it, or for the whole run when the framework keeps dW).
"""

from __future__ import annotations

import functools
import gc
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Callable, NamedTuple, TypeVar

ALIGNMENT = 256
"""Every device allocation is rounded up to this many bytes (cudaMalloc's granularity).
Executors' arenas apply the same rule, so accounted bytes agree exactly."""


F = TypeVar("F", bound=Callable[..., Any])


def gc_paused(fn: F) -> F:
    """Run `fn` with Python's cyclic garbage collector paused (restored after). Plans are
    hundreds of thousands of small tuples in acyclic lists: without this, collections that walk
    every live record cost more than building them."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not gc.isenabled():
            return fn(*args, **kwargs)
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            gc.enable()

    return wrapper  # type: ignore[return-value]


def aligned(nbytes: int, alignment: int = ALIGNMENT) -> int:
    """Bytes an allocation of `nbytes` occupies on the device (0 stays 0)."""
    return -(-int(nbytes) // alignment) * alignment


class Op(IntEnum):
    """What a record does. Compute records name a layer, memory records name a tensor."""

    ALLOC = 0
    FREE = 1
    OFFLOAD = 2  # async device -> host copy; the device buffer stays until FREE
    PREFETCH = 3  # async host -> device copy into an ALLOCated buffer
    FORWARD = 4
    BACKWARD = 5  # gradient of the layer's inputs and parameters, then the SGD-momentum update
    RECOMPUTE = 6  # forward again during the backward pass, to rebuild a dropped output
    MOVE = 7  # the buffer of tensor `src` becomes tensor `arg`'s (after an in-place step)


COMPUTE_OPS = (Op.FORWARD, Op.BACKWARD, Op.RECOMPUTE)


class Kind(IntEnum):
    """The five tensors a layer may own; `tid(layer, kind)` gives the tensor id."""

    Y = 0
    DY = 1
    W = 2
    DW = 3
    M = 4


N_KINDS = 5


def tid(layer: int, kind: Kind | int) -> int:
    """Tensor id of `kind` owned by `layer`."""
    return layer * N_KINDS + int(kind)


def state_tid(n_layers: int, layer: int) -> int:
    """Tensor id of `layer`'s persistent extra state in a graph of `n_layers` layers."""
    return N_KINDS * n_layers + layer


def tensor_layer(t: int) -> int:
    """Layer that owns tensor `t` (not for state tensors: see `state_tid`)."""
    return t // N_KINDS


def tensor_kind(t: int) -> Kind:
    """Which of the layer's tensors `t` is."""
    return Kind(t % N_KINDS)


class Step(NamedTuple):
    """One record. `arg` is a tensor id for memory ops and a layer id for compute ops;
    `ws` is the optional algorithm workspace (bytes) and `algo` the index of the convolution
    algorithm in the cost model's table, both meaningful for compute records of CONV layers only
    (a step's mandatory scratch comes from the dependency model, not from the record); `src` is
    the renamed tensor of a MOVE record (-1 otherwise)."""

    op: Op
    arg: int
    ws: int = 0
    algo: int = 0
    src: int = -1


@dataclass
class Plan:
    """A policy's output: the records plus what is needed to replay them.

    `nbytes[t]` is the unaligned size of tensor `t` (0 for tensors a layer does not own).
    `resident` are tensors allocated for the whole run (parameters, gradients, optimizer state):
    they are ALLOCated by the first records of the plan and never freed.
    """

    graph: Any  # pyd4j.sched.graph.Graph (not imported: keeps this module dependency-free)
    policy: str
    steps: list[Step]
    nbytes: list[int]
    notes: dict[str, Any] = field(default_factory=dict)

    def describe(self, step: Step) -> str:
        """Human-readable form of a record, for errors and dumps."""
        if step.op in COMPUTE_OPS:
            layer = self.graph.layers[step.arg]
            extra = f" ws={step.ws} algo={step.algo}" if step.ws or step.algo else ""
            return f"{step.op.name} {layer.name}{extra}"
        if step.op == Op.MOVE:
            return f"MOVE {self.tensor_name(step.arg)} <- {self.tensor_name(step.src)}"
        return f"{step.op.name} {self.tensor_name(step.arg)}"

    def tensor_name(self, t: int) -> str:
        """'conv1:Y' style name of a tensor ('bn1:STATE' for persistent extra state)."""
        n = len(self.graph.layers)
        if t >= N_KINDS * n:
            return f"{self.graph.layers[t - N_KINDS * n].name}:STATE"
        return f"{self.graph.layers[tensor_layer(t)].name}:{tensor_kind(t).name}"

    def count(self, op: Op) -> int:
        """Number of records of one kind."""
        return sum(1 for s in self.steps if s.op == op)
