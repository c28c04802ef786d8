"""The memory DL4J's own `fit()` holds, from the planner's per-layer model: the one DL4J memory model.

`pyd4j estimate`, `flags`, `batch` and the Spark sizing take their off-heap figures from here, and
`pyd4j plan` reports the same figure for DL4J's `fit()` next to its plans, so the two never
disagree about a network. Everything per layer comes from the DL4J graph (`pyd4j.dl4j.graph`)
and its framework's dependencies (`deps.json`, framework `dl4j`: each step's working memory,
measured with ND4J and pinned by the layer-facts tests). What `fit()` of DL4J 1.0.0-M2.1 keeps, read from its
`MultiLayerNetwork` / `ComputationGraph` and checked with ND4J's workspace sizes after a few
iterations (benchmarks/memory_model.py):

- parameters, their gradients (one flattened view each) and the updater's state: per layer, the
  updater's `stateSize` per parameter (Adam 2, Nesterovs 1, Sgd 0, ...; a separate bias updater for
  biases; batch normalization's global mean and variance have none);
- `WS_ALL_LAYERS_ACT`: every layer's output of the forward pass (input preprocessors are views:
  nothing more), learned in the first iteration, over-allocated by its `overallocationLimit` (0.05);
- `WS_LAYER_WORKING_MEM`: one layer step's working memory at a time (im2col and its gradient, the
  recomputed pre-activation, ...), learned over time: the largest step's, over-allocated by 0.02;
- the epsilon workspaces (`WS_LAYER_ACT_1/2` of a MultiLayerNetwork, alternating between even and
  odd layers; a ComputationGraph's pool `WS_LAYER_ACT_n`): the largest epsilon of each, 0.02 over;
  an ActivationLayer's backward step holds two input-sized arrays there (a copy and the result), an
  LSTM's two and one time step's gate gradients;
- batch normalization's backlog: DL4J's `BatchNormalization` leaves two arrays of its input's size
  outside every workspace in each training iteration (benchmarks/batchnorm_backlog.py: 2.0-2.4x its
  input per iteration on deep_cnn_bn and TinyYOLO, 2.8-2.9x in the second; none on the same network
  without it). ND4J frees them
  only when Java's collector finds their objects, so they pile up between collections: the model
  counts two iterations of them (`BATCHNORM_BACKLOG_ITERATIONS`). A longer run holds more until a
  collection; under pyd4j's flags JavaCPP collects at maxphysicalbytes;
- what glibc keeps of an LSTM's working memory: made outside the workspace while it learns, in per-step
  [batch, units] pieces, which stay with glibc once freed when they are under the mmap threshold below:
  each LSTM layer's working memory once more, only at batches whose pieces are under it
  (benchmarks/lstm_steps.py: 1.1-1.2, 2.0-2.1 and 3.0-3.1 working memories on LSTMs of 1-3 layers).

The model assumes glibc's mmap threshold fixed (`MALLOC_ENV`, which pyd4j's flags put into the job's
environment). While DL4J's workspaces learn their size (OVER_TIME / FIRST_LOOP, spill REALLOCATE),
the working memory, the epsilons and the first iteration's activations are allocated outside them and
freed. With the threshold fixed, glibc gives every freed block over 128 KiB back to the system at
once. With glibc's default (a threshold that rises to 32 MiB as blocks are freed) it kept 5-108% of
them, and no rule found predicts how much: `learning_bytes` is the most it can keep, which the flags
print as the cost of leaving the setting out.

What the model leaves out (benchmarks/memory_model.py, `--long`): over a hundred iterations the small,
fast networks (lstm, policy_value, two_input) hold more, arrays freed only when the collector finds
their Java objects (less with a smaller heap); and batch normalization's backlog beyond two iterations.

Each term is `fixed + per_sample * batch`; the caller adds the data pipeline (features and labels
of the minibatches in flight), which the graph does not know.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pyd4j import malloc
from pyd4j.sched.graph import Graph, LayerType
from pyd4j.dl4j.updater_state import layer_state_elements

Region = Literal["offheap", "heap", "native"]
Source = Literal["dl4j-report", "measured", "estimate"]

# glibc's setting the model assumes (pyd4j.malloc): the mmap threshold fixed at 128 KiB (its initial value,
# which glibc otherwise raises up to 32 MiB as large blocks are freed), so freed arrays go back to the system.
MALLOC_ENV = malloc.MALLOC_ENV

# Iterations of batch normalization's garbage the model counts (see the module's docstring).
BATCHNORM_BACKLOG_ITERATIONS = 2
BATCHNORM_ARRAYS_PER_ITERATION = 2

# DL4J's LSTM layers (LSTMHelpers): their backward step leaves two input-sized arrays and one time step's four
# gate gradients in the epsilon workspace (lstm at batches 8-128: 2.12x its input where the model said 1x).
LSTM_CLASSES = ("LSTM", "GravesLSTM")

# The name of what glibc keeps of an LSTM's per-step pieces (one term per threshold batch: `_below_<batch>`).
LSTM_KEPT_TERM = "lstm_steps_kept_by_glibc"

# The batch to build a graph at for `fit_terms`: the terms are per sample and fixed, so one reference
# batch gives the same figures at any batch (`pyd4j estimate` and `pyd4j plan` both build at it).
REFERENCE_BATCH = 64


@dataclass(frozen=True)
class FitWorkspaces:
    """The `overallocationLimit` of the workspaces DL4J's fit() trains in (defaults: M2.1's
    MultiLayerNetwork and ComputationGraph; `pyd4j.memory.estimate` reads them from DL4J)."""

    activations: float = 0.05      # WS_ALL_LAYERS_ACT_CONFIG (learning FIRST_LOOP)
    working_memory: float = 0.02   # WS_LAYER_WORKING_MEM_CONFIG (learning OVER_TIME, spill REALLOCATE)
    epsilons: float = 0.02         # WS_LAYER_ACT_X_CONFIG (learning OVER_TIME, spill REALLOCATE)


@dataclass(frozen=True)
class Term:
    """One part of the memory a network needs, where it lives and where the figure comes from:
    bytes = fixed + per_sample * batch (at batches under `below_batch`, where it is set). The one term
    type of pyd4j's memory model (estimate, flags, batch, plan and serving)."""

    name: str
    region: Region
    source: Source
    fixed_bytes: int
    per_sample_bytes: int
    why: str
    below_batch: int | None = None   # the term holds only at batches under this one (None: at every batch)

    def bytes_at(self, batch: int) -> int:
        if self.below_batch is not None and batch >= self.below_batch:
            return 0
        return int(self.fixed_bytes + self.per_sample_bytes * batch)


def updater_state_elements(graph: Graph) -> int:
    """Elements of the updater's state of every layer (`pyd4j.dl4j.updater_state`)."""
    return sum(layer_state_elements(layer) for layer in graph.layers)


def _epsilon(graph: Graph, i: int) -> int:
    """Bytes layer i's backward step puts in the epsilon workspace: its inputs' gradients (an
    ActivationLayer: two input-sized arrays; an LSTM: two and one time step's gate gradients)."""
    layer = graph.layers[i]
    x = sum(graph.layers[j].out_bytes for j in dict.fromkeys(layer.inputs))
    if layer.type is LayerType.ACT and layer.attrs.get("variant") != "fused":
        return 2 * x
    if layer.attrs.get("dl4j", {}).get("class") in LSTM_CLASSES:
        batch, units = layer.out_shape[0], layer.out_shape[1]
        return 2 * x + batch * 4 * units * layer.itemsize
    return x


def epsilon_bytes(graph: Graph) -> int:
    """What the epsilon workspaces learn. A MultiLayerNetwork alternates two: even layers' epsilons
    in one, odd layers' in the other, each as large as its largest. A ComputationGraph keeps each
    vertex's epsilon until the vertex it feeds has run its backward step: the most held at once."""
    layers = [l for l in graph.layers if l.type is not LayerType.DATA]
    if all("layer" in l.attrs.get("dl4j", {}) for l in layers):
        even = max((_epsilon(graph, l.id) for l in layers if l.attrs["dl4j"]["layer"] % 2 == 0), default=0)
        odd = max((_epsilon(graph, l.id) for l in layers if l.attrs["dl4j"]["layer"] % 2 == 1), default=0)
        return even + odd
    # reverse pass: the gradient of j is born at its first consumer's backward step, dies after j's own
    live: dict[int, int] = {}
    peak = 0
    for layer in reversed(graph.layers):
        if layer.type is LayerType.DATA:
            continue
        live.pop(layer.id, None)
        for j in dict.fromkeys(layer.inputs):
            if graph.layers[j].type is not LayerType.DATA:
                live.setdefault(j, graph.layers[j].out_bytes)
        extra = _epsilon(graph, layer.id) - sum(graph.layers[j].out_bytes for j in dict.fromkeys(layer.inputs))
        peak = max(peak, sum(live.values()) + extra)
    return peak


def fit_terms(graph: Graph, ws: FitWorkspaces = FitWorkspaces()) -> tuple[Term, ...]:
    """What DL4J's fit() holds for `graph` (built at any batch; the terms are per sample and fixed)."""
    b = graph.batch
    item = graph.layers[0].itemsize if graph.layers else 4
    params = sum(layer.param_bytes for layer in graph.layers)
    state = updater_state_elements(graph) * item
    acts = _activation_bytes(graph)
    working, arg = _working_memory(graph)
    eps = epsilon_bytes(graph)
    bn_inputs = batchnorm_input_bytes(graph)

    def per(x: float) -> int:
        return int(round(x / b))

    updaters = sorted({str(layer.attrs.get("updater")) for layer in graph.layers if layer.param_shapes})
    return (
        Term("parameters", "offheap", "estimate", params, 0, "the network's parameters (one flattened array)"),
        Term("gradients", "offheap", "estimate", params, 0, "their gradients (one flattened view, as large as the parameters)"),
        Term("updater_state", "offheap", "estimate", state, 0, f"the updater's state per parameter ({', '.join(updaters) or 'none'}; "
                f"batch normalization's running mean and variance have none)"),
        Term("activations", "offheap", "estimate", 0, per(acts * (1 + ws.activations)),
                f"WS_ALL_LAYERS_ACT: every layer's output, kept for backprop, +{ws.activations:g} over-allocation"),
        Term("working_memory", "offheap", "estimate", 0, per(working * (1 + ws.working_memory)),
                f"WS_LAYER_WORKING_MEM: the largest step's working memory ({_step_source(graph, arg)}), "
                f"+{ws.working_memory:g} over-allocation"),
        Term("epsilons", "offheap", "estimate", 0, per(eps * (1 + ws.epsilons)),
                f"epsilon workspaces: the largest gradients held at once, +{ws.epsilons:g} over-allocation"),
        Term("batchnorm_backlog", "offheap", "estimate", 0, per(bn_inputs * BATCHNORM_ARRAYS_PER_ITERATION
                                                                 * BATCHNORM_BACKLOG_ITERATIONS),
                f"{BATCHNORM_ARRAYS_PER_ITERATION} arrays of each batch normalization's input per iteration, freed only when "
                f"Java's collector finds them: {BATCHNORM_BACKLOG_ITERATIONS} iterations of them"),
        *_lstm_step_terms(graph),
    )


def _step_source(graph: Graph, i: int) -> str:
    """Where the largest step's working memory comes from, for the term's explanation."""
    if not graph.layers:
        return "-"
    layer = graph.layers[i]
    if layer.type is LayerType.OPAQUE:
        kind = layer.attrs.get("dl4j", {}).get("class", "?")
        return f"{layer.name} ({kind}), a layer pyd4j has no model of: measured by probe iterations in DL4J"
    return f"{layer.name}: im2col, recomputed pre-activation, ..."


def _lstm_step_terms(graph: Graph) -> list[Term]:
    """What glibc keeps of the LSTM layers' working memory: while DL4J's working-memory workspace learns its
    size, an LSTM makes its working memory outside it in per-step pieces ([batch, units] arrays), and pieces
    under the mmap threshold the model assumes stay with glibc once freed. Each LSTM layer's working memory,
    at batches whose pieces are under the threshold (one term per threshold batch)."""
    working = _step_working_memory(graph)
    groups: dict[int, list[int]] = {}
    for layer in graph.layers:
        if layer.attrs.get("dl4j", {}).get("class") in LSTM_CLASSES:
            piece = layer.out_shape[1] * layer.itemsize           # one sample's share of a [batch, units] piece
            groups.setdefault(-(-malloc.MMAP_THRESHOLD_BYTES // piece), []).append(layer.id)
    return [Term(LSTM_KEPT_TERM + (f"_below_{cutoff}" if len(groups) > 1 else ""), "offheap", "estimate", 0,
                 int(round(sum(working[i] for i in ids) / graph.batch)),
                 f"the working memory of {', '.join(graph.layers[i].name for i in ids)} once more: made outside the "
                 f"workspace while it learns its size, in per-step pieces under glibc's mmap threshold, which glibc keeps "
                 f"(measured on LSTMs of 1, 2 and 3 layers at batches 64 and 128: 1.1-1.2, 2.0-2.1 and 3.0-3.1 times one "
                 f"layer's working memory); from batch {cutoff} on the pieces reach the threshold and go back",
                 below_batch=cutoff)
            for cutoff, ids in sorted(groups.items())]


def batchnorm_input_bytes(graph: Graph) -> int:
    """The inputs of the network's batch normalization layers, summed (the graph's batch)."""
    return sum(graph.layers[j].out_bytes for layer in graph.layers if layer.type is LayerType.BN
               for j in dict.fromkeys(layer.inputs))


def learning_bytes(graph: Graph) -> int:
    """What DL4J allocates outside its workspaces while they learn their size, and frees (the graph's
    batch): the most glibc keeps of it without `MALLOC_ENV`."""
    return _working_memory(graph)[0] + epsilon_bytes(graph) + _activation_bytes(graph)


def _activation_bytes(graph: Graph) -> int:
    """Every layer's output (what WS_ALL_LAYERS_ACT holds), the graph's batch."""
    return sum(layer.out_bytes for layer in graph.layers if layer.type is not LayerType.DATA)


def _step_working_memory(graph: Graph) -> list[int]:
    """Each layer's working memory, the larger of its forward and backward step's (the graph's batch)."""
    d = graph.deps
    fwd, bwd, _ = d.step_ws if d.step_ws[0] else (d.ws_fwd, d.ws_bwd, d.ws_rc)
    return [max(f, b) for f, b in zip(fwd, bwd)]


def _working_memory(graph: Graph) -> tuple[int, int]:
    """The largest step's working memory (the graph's batch) and the index of the layer it is in."""
    per_layer = _step_working_memory(graph)
    arg = max(range(len(per_layer)), key=per_layer.__getitem__) if per_layer else 0
    return max([*per_layer, 0]), arg


def fit_bytes(graph: Graph, ws: FitWorkspaces = FitWorkspaces()) -> int:
    """What DL4J's fit() holds at the graph's batch (without the data pipeline)."""
    return sum(t.bytes_at(graph.batch) for t in fit_terms(graph, ws))
