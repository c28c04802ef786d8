"""Random valid ComputationGraph configurations (hypothesis strategies over `tests.dl4j.netgen`'s
layers): one or two network inputs, layers and vertices on any activation drawn so far (a vertex may
take one activation twice), and an output layer on every activation nothing else reads -- activations
that can be merged are merged first, so a graph has one to three outputs."""

from __future__ import annotations

from typing import Any, Callable

from hypothesis import strategies as st

from tests.dl4j.netgen import READ_BY_LAYERS, Spec, Type, hidden_layer, input_state, input_type, multilayer, output_layer, training

ELEMENTWISE = ("Add", "Product", "Max", "Average", "Subtract")
VERTICES = ("ElementWiseVertex", "MergeVertex", "SubsetVertex", "ScaleVertex", "ShiftVertex", "L2NormalizeVertex",
            "L2Vertex", "StackVertex", "LastTimeStepVertex", "DuplicateToTimeSeriesVertex", "PreprocessorVertex",
            "ReshapeVertex", "ReverseTimeSeriesVertex", "PoolHelperVertex", "AttentionVertex")


def merge_key(state: Type) -> tuple:
    """Activations MergeVertex joins along the channels: the same kind and the same sizes beyond them."""
    return (state[0], *state[2:])


def merged(states: list[Type]) -> Type:
    return (states[0][0], sum(s[1] for s in states), *states[0][2:])


class Graph:
    """The graph drawn so far: its inputs, nodes (layers and vertices) and each activation's type."""

    def __init__(self, inputs: list[Spec]) -> None:
        self.inputs = inputs
        self.nodes: list[Spec] = []
        self.types: dict[str, Type] = {f"in{k}": input_state(s) for k, s in enumerate(inputs)}
        self.read: set[str] = set()
        self.outputs: list[str] = []

    def add(self, spec: Spec, inputs: list[str], out: Type) -> str:
        name = f"{spec['class'].lower().replace('layer', '')}{len(self.nodes)}"
        self.nodes.append({**spec, "name": name, "inputs": inputs})
        self.types[name] = out
        self.read.update(inputs)
        return name

    def usable(self, kinds: tuple[str, ...] = ("ff", "cnn", "rnn", "tdff")) -> list[str]:
        return [n for n, t in self.types.items() if t[0] in kinds]

    def sequence_input(self) -> tuple[str, int] | None:
        """The first recurrent network input (its name and length): masks and time-series vertices refer to it."""
        for k, s in enumerate(self.inputs):
            if s["kind"] in ("rnn", "seqindex"):
                return f"in{k}", s["steps"]
        return None


def _vertex(draw: Callable, g: Graph, kind: str) -> bool:
    """Add one vertex of `kind` on activations drawn from the graph; False where none fits."""
    names = g.usable()
    if not names:
        return False
    a = draw(st.sampled_from(names))
    ta = g.types[a]
    seq = g.sequence_input()
    if kind in ("ElementWiseVertex", "L2Vertex", "StackVertex"):
        same = [n for n in names if g.types[n] == ta]
        b = draw(st.sampled_from(same))
        if kind == "ElementWiseVertex":
            op = draw(st.sampled_from(ELEMENTWISE))
            more = [draw(st.sampled_from(same))] if op != "Subtract" and draw(st.booleans()) else []
            g.add({"class": kind, "op": op}, [a, b, *more], ta)
        elif kind == "L2Vertex":
            if ta[0] not in ("ff", "cnn"):
                return False
            g.add({"class": kind}, [a, b], ("ff", 1))
        else:
            stacked = g.add({"class": kind}, [a, b], ta)
            if ta[0] == "ff" and draw(st.booleans()):
                layer, out = draw(hidden_layer(ta))
                if out is None or out[0] != "ff":
                    layer, out = {"class": "DenseLayer", "nOut": 3, "act": "TANH", "bias": True}, ("ff", 3)
                stacked = g.add(layer, [stacked], out)
                ta = out
            g.add({"class": "UnstackVertex", "from": draw(st.integers(0, 1)), "stackSize": 2}, [stacked], ta)
        return True
    if kind == "MergeVertex":
        b = draw(st.sampled_from([n for n in names if merge_key(g.types[n]) == merge_key(ta)]))
        g.add({"class": kind}, [a, b], merged([ta, g.types[b]]))
        return True
    if kind == "SubsetVertex":
        lo = draw(st.integers(0, ta[1] - 1))
        hi = draw(st.integers(lo, ta[1] - 1))
        g.add({"class": kind, "from": lo, "to": hi}, [a], (ta[0], hi - lo + 1, *ta[2:]))
        return True
    if kind in ("ScaleVertex", "ShiftVertex"):
        g.add({"class": kind, "value": draw(st.sampled_from((0.5, 2.0, -1.0)))}, [a], ta)
        return True
    if kind == "L2NormalizeVertex" and ta[0] in ("ff", "cnn"):
        g.add({"class": kind}, [a], ta)
        return True
    if kind in ("LastTimeStepVertex", "ReverseTimeSeriesVertex") and ta[0] == "rnn":
        mask = seq[0] if seq and seq[1] == ta[2] else None
        g.add({"class": kind, "maskInput": mask}, [a], ("ff", ta[1]) if kind == "LastTimeStepVertex" else ta)
        return True
    if kind == "DuplicateToTimeSeriesVertex" and ta[0] == "ff" and seq:
        g.add({"class": kind, "input": seq[0]}, [a], ("rnn", ta[1], seq[1]))
        return True
    if kind in ("PreprocessorVertex", "ReshapeVertex") and ta[0] == "cnn":
        g.add({"class": kind, "to": "ff", "shape": list(ta[1:])}, [a], ("ff", ta[1] * ta[2] * ta[3]))
        return True
    if kind == "PreprocessorVertex" and ta[0] == "ff":
        g.add({"class": kind, "to": "cnn", "shape": [ta[1], 1, 1]}, [a], ("cnn", ta[1], 1, 1))
        return True
    if kind == "AttentionVertex" and ta[0] == "rnn":   # self-attention: queries, keys and values one sequence
        k = draw(st.integers(1, 4))
        g.add({"class": kind, "nOut": k, "heads": draw(st.integers(1, 2)), "nIn": ta[1]}, [a, a, a], ("rnn", k, ta[2]))
        return True
    # DL4J's PoolHelperVertex strips the first row and column of square maps only (a DL4J limit)
    if kind == "PoolHelperVertex" and ta[0] == "cnn" and ta[2] == ta[3] >= 2:
        g.add({"class": kind}, [a], ("cnn", ta[1], ta[2] - 1, ta[3] - 1))
        return True
    return False


def _heads(draw: Callable, g: Graph) -> list[Type]:
    """Read every activation nothing reads yet: index inputs through an embedding, activations that merge
    joined by a MergeVertex, then one output layer each. The labels' types, one per output."""
    for name in [n for n, t in g.types.items() if t[0] in READ_BY_LAYERS and n not in g.read]:
        layer, out = draw(hidden_layer(g.types[name]))
        g.add(layer, [name], out)
    groups: dict[tuple, list[str]] = {}
    for name, t in g.types.items():
        if name not in g.read:
            groups.setdefault(merge_key(t), []).append(name)
    labels = []
    for names in groups.values():
        top = names[0] if len(names) == 1 else g.add({"class": "MergeVertex"}, names, merged([g.types[n] for n in names]))
        head, label = draw(output_layer(g.types[top]))
        seq = g.sequence_input()
        if label[0] == "rnn" and seq and seq[1] == label[2]:
            head["labelMask"] = True
        g.outputs.append(g.add(head, [top], label))
        labels.append(label)
    return labels


@st.composite
def graph(draw: Callable, max_steps: int = 6) -> Spec:
    """A ComputationGraphConfiguration (see the module docstring)."""
    inputs = [draw(input_type()) for _ in range(draw(st.integers(1, 2)))]
    g = Graph(inputs)
    for _ in range(draw(st.integers(0, max_steps))):
        if draw(st.booleans()):
            name = draw(st.sampled_from(list(g.types)))
            layer, out = draw(hidden_layer(g.types[name]))
            g.add(layer, [name], out)
        else:
            _vertex(draw, g, draw(st.sampled_from(VERTICES)))
    labels = _heads(draw, g)
    spec: dict[str, Any] = {"kind": "graph", **draw(training()), "batch": draw(st.integers(2, 6)), "inputs": inputs,
                            "layers": g.nodes, "outputs": g.outputs, "labels": labels}
    if g.sequence_input():
        spec["mask"] = draw(st.booleans())
    return spec


def network_specs() -> st.SearchStrategy[Spec]:
    """MultiLayer and graph networks, about half each."""
    return st.one_of(multilayer(), graph())
