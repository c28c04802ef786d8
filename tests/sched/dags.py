"""Random DAG networks for property-based tests (shape-preserving layers over one map size)."""

from __future__ import annotations

from hypothesis import strategies as st

from pyd4j.sched.graph import Graph

KINDS = ("conv", "act", "bn", "pool", "dropout", "lrn", "join", "eltwise", "concat", "fork",
         "fused")


@st.composite
def random_graphs(draw, max_layers: int = 14, batch: int = 2, channels: int = 3,
                  size: int = 4, frameworks: tuple[str, ...] = ("cudnn",)) -> Graph:
    """Random DAGs under one of `frameworks` (drawn); "fused" is a conv with the activation DL4J
    applies in place."""
    g = Graph("random", batch, framework=draw(st.sampled_from(frameworks)))
    nodes = [g.conv(g.data(channels, size, size, classes=3), channels, 3, 1, 1)]
    for _ in range(draw(st.integers(1, max_layers))):
        kind = draw(st.sampled_from(KINDS))
        pick = lambda: nodes[draw(st.integers(0, len(nodes) - 1))]  # noqa: E731
        if kind == "conv":
            k = draw(st.sampled_from([1, 3]))
            x = g.conv(pick(), channels, k, 1, k // 2, bias=draw(st.booleans()))
        elif kind == "act":
            x = g.act(pick(), draw(st.sampled_from(["relu", "tanh", "sigmoid"])))
        elif kind == "bn":
            x = g.bn(pick())
        elif kind == "pool":
            x = g.pool(pick(), 3, 1, 1, draw(st.sampled_from(["max", "avg"])))
        elif kind == "dropout":
            x = g.dropout(pick(), 0.3)
        elif kind == "lrn":
            x = g.lrn(pick(), size=3)
        elif kind in ("join", "eltwise"):
            a, b = pick(), pick()
            if a == b:
                continue
            x = g.join([a, b]) if kind == "join" else g.eltwise([a, b], draw(
                st.sampled_from(["sum", "prod", "max"])))
        elif kind == "fused":
            x = g.act(g.conv(pick(), channels, 1, bias=False), fused=True)
        elif kind == "concat":
            a, b = pick(), pick()
            x = g.conv(g.concat([a, b]), channels, 1, bias=False)
        else:
            x = g.fork(pick())
        if x is not None:
            nodes.append(x)
    sinks = [i for i in nodes if not g.consumers[i]]
    x = sinks[0] if len(sinks) == 1 else g.join(sinks)
    g.softmax(g.fc(x, 3))
    g.validate()
    return g
