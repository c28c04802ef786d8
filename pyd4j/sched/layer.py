"""The planner's layers and tensors: what a graph is made of (`pyd4j.sched.graph` joins them)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from pyd4j.sched.plan import Kind

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


class LayerType(str, Enum):
    DATA = "DATA"
    CONV = "CONV"
    FC = "FC"
    POOL = "POOL"
    ACT = "ACT"
    BN = "BN"
    LRN = "LRN"
    DROPOUT = "DROPOUT"
    SOFTMAX = "SOFTMAX"
    CONCAT = "CONCAT"
    FORK = "FORK"
    JOIN = "JOIN"
    ELTWISE = "ELTWISE"
    OPAQUE = "OPAQUE"
    """A DL4J layer or vertex the framework has no measured model of: run as DL4J runs it, its
    inputs and output kept for its backward step, never recomputed, never chunked; its working
    memory and what it keeps from the probe iteration (`attrs["measured"]`), when one ran."""


CHEAP = frozenset(
    {LayerType.POOL, LayerType.ACT, LayerType.BN, LayerType.LRN, LayerType.DROPOUT}
)
"""The paper's cheap layers: their outputs are recomputed rather than kept."""

CHEAP_STRUCTURAL = frozenset(
    {LayerType.JOIN, LayerType.ELTWISE, LayerType.CONCAT, LayerType.FORK}
)
"""Memory-bound structural layers: recomputable too (an extension of the paper's list)."""


@dataclass(slots=True)
class Tensor:
    """A tensor of the IR (see `pyd4j.sched.plan.Kind`)."""

    id: int
    name: str
    kind: Kind | None  # None: a layer's persistent extra state
    shape: tuple[int, ...]
    dtype: str
    nbytes: int


@dataclass(slots=True)
class Layer:
    """One layer. `inputs` are ids of producing layers (always smaller than `id`)."""

    id: int
    name: str
    type: LayerType
    inputs: tuple[int, ...]
    out_shape: tuple[int, ...]
    dtype: str = "float32"
    param_shapes: tuple[tuple[int, ...], ...] = ()
    fwd_flops: float = 0.0
    bwd_flops: float = 0.0
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def itemsize(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def out_elems(self) -> int:
        return math.prod(self.out_shape)

    @property
    def out_bytes(self) -> int:
        return self.out_elems * self.itemsize

    @property
    def param_elems(self) -> int:
        return sum(math.prod(s) for s in self.param_shapes)

    @property
    def param_bytes(self) -> int:
        return self.param_elems * self.itemsize


class GraphError(ValueError):
    """The graph is malformed (shape mismatch, bad input, unknown layer)."""
