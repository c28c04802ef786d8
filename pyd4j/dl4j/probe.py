"""What DL4J itself says of a network's layers when a plan is made: each layer's and vertex's output
shape (DL4J's shape inference, one training-mode forward pass), its parameter count, and for each
step the planner has no measured model of (an OPAQUE node) the working memory and kept bytes of a
probe iteration (`org.pyd4j.train.LayerProbe`, on the CPU backend of this process's JVM).

One probe for every way a plan is made: `pyd4j.train.fit` probes the live network it trains
(`of_network`); `pyd4j plan --model net.json` and the agent route (`pyd4j tune --plan`, a plan for
a job's network described by the agent) probe a network built from the configuration
(`of_configuration`). `pyd4j.dl4j.graph.probed_graph` decides when a probe is needed.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Sequence

from pyd4j.dl4j.config import build_network
from pyd4j.jvm import java_errors
from pyd4j.jvm.errors import JavaIllegalArgumentError
from pyd4j.output import stdout_to_stderr
from pyd4j.sched.graph import GraphError

# LayerProbe's words for a network DL4J's own forward pass refuses at the planned shapes (the layer named)
FORWARD_FAILS = "DL4J's forward pass of this network fails at"

Probe = Callable[[Sequence[tuple[int, ...]]], dict[str, dict[str, Any]]]


def describe(net: Any, inputs: Sequence[tuple[int, ...]]) -> dict[str, dict[str, Any]]:
    """`LayerProbe.describe` of a live MultiLayerNetwork or ComputationGraph on random features of
    the given shapes (batch first, one per network input); leaves the network and ND4J's random
    state as they were."""
    import jpype  # noqa: PLC0415

    probe = jpype.JClass("org.pyd4j.train.LayerProbe")
    try:
        with java_errors(), stdout_to_stderr():
            return json.loads(str(probe.describe(net, *[jpype.JArray(jpype.JLong)([int(d) for d in s]) for s in inputs])))
    except JavaIllegalArgumentError as err:
        if FORWARD_FAILS not in str(err):
            raise
        raise GraphError(str(err).split(": ", 1)[-1]) from None   # names the layer and the reason


def of_network(net: Any) -> Probe:
    """The probe of a live network (what pyd4j.train.fit plans)."""
    return lambda inputs: describe(net, inputs)


def of_configuration(doc: dict[str, Any], where: str = "the network configuration") -> Probe:
    """The probe of a network built from its configuration (`conf.toJson()`, parsed) in this process's
    JVM (started if needed), built when the probe first runs and kept for later calls."""
    built: list[Any] = []

    def run(inputs: Sequence[tuple[int, ...]]) -> dict[str, dict[str, Any]]:
        if not built:
            built.append(build_network(doc, where))
        return describe(built[0], inputs)

    return run


# The batches `fitted` probes at: small, so that probing a large network costs little, and two, so
# that a step's fixed part (its weights-sized arrays) is not scaled with the batch.
FIT_BATCHES = (2, 8)


def fitted(run: Probe, batches: tuple[int, int] = FIT_BATCHES) -> Probe:
    """A probe that answers at any batch from two probes at small batches: each measured figure is
    the line through the two (what a DL4J layer allocates is a fixed part plus a part per sample), so
    a large batch is never run. Probes once per set of per-sample input shapes."""
    lo_b, hi_b = batches
    done: dict[tuple, tuple[dict, dict]] = {}

    def at(inputs: Sequence[tuple[int, ...]]) -> dict[str, dict[str, Any]]:
        per_sample = tuple(tuple(s[1:]) for s in inputs)
        if per_sample not in done:
            done[per_sample] = (run([(lo_b, *s) for s in per_sample]), run([(hi_b, *s) for s in per_sample]))
        lo, hi = done[per_sample]
        batch = inputs[0][0]
        out: dict[str, dict[str, Any]] = {}
        for name, v in hi.items():
            low = lo.get(name, {}).get("measured")
            if "measured" not in v or low is None:
                out[name] = v
                continue
            out[name] = {**v, "measured": {k: max(0, int(round(low[k] + (x - low[k]) * (batch - lo_b) / (hi_b - lo_b))))
                                           for k, x in v["measured"].items()}}
        return out

    return at
