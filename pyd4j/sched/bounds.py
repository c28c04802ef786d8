"""The layer-wise lower bound on peak device memory (the paper's claimed peak).

Definition (no policy may redefine it):

    lower_bound = resident + max_i l_i

- resident: parameters, their gradients and optimizer state (SGD momentum: one more copy of the
  parameters) of every layer -- they stay on the device for the whole iteration;
- l_i: what the backward step of layer i needs on the device at once: its distinct input
  tensors, its output, the gradient of its output (absent for loss layers) and the gradients of
  its inputs (absent for DATA inputs). Every backward step of every plan needs exactly this
  set resident, so no plan can go below the bound.

All sizes are `aligned` (see `pyd4j.sched.plan`). Convolution workspace is optional (the
no-workspace algorithm always exists), so it is not part of the bound; `workspace_bytes`
reports the largest workspace of the fastest algorithm separately.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyd4j.sched.graph import Graph, LayerType
from pyd4j.sched.plan import aligned


@dataclass(frozen=True)
class Bound:
    """The bound and its parts."""

    resident_bytes: int
    l_peak_bytes: int
    l_peak_layer: str
    workspace_bytes: int

    @property
    def lower_bound_bytes(self) -> int:
        return self.resident_bytes + self.l_peak_bytes


def resident_bytes(graph: Graph) -> int:
    """Parameters + gradients + momentum, aligned per tensor."""
    return sum(3 * aligned(layer.param_bytes) for layer in graph.layers if layer.param_shapes)


def layer_working_sets(graph: Graph) -> list[int]:
    """l_i for every layer (0 for DATA, which has no backward step)."""
    layers = graph.layers
    out = []
    for layer in layers:
        if not graph.has_backward(layer.id):
            out.append(0)
            continue
        ins = list(dict.fromkeys(layer.inputs))
        total = aligned(layer.out_bytes) + sum(aligned(layers[j].out_bytes) for j in ins)
        if graph.has_grad(layer.id):
            total += aligned(layer.out_bytes)
        total += sum(aligned(layers[j].out_bytes) for j in graph.grad_inputs(layer.id))
        out.append(total)
    return out


def lower_bound(graph: Graph, costmodel=None) -> Bound:
    """The bound for `graph`; with a cost model, also the largest fastest-algorithm workspace."""
    ls = layer_working_sets(graph)
    k = max(range(len(ls)), key=ls.__getitem__)
    ws = 0
    if costmodel is not None:
        for layer in graph.layers:
            if layer.type is LayerType.CONV:
                opts = costmodel.conv_options(graph, layer.id)
                ws = max(ws, aligned(opts[0][1]))
    return Bound(resident_bytes(graph), ls[k], graph.layers[k].name, ws)
