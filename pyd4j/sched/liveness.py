"""Policy 1, liveness analysis: free each tensor right after its last use.

Forward outputs are all needed again by backward steps, so savings come from the backward pass:
gradients are allocated at their first contribution and outputs and gradients are freed after
the last backward step that reads them.
"""

from __future__ import annotations

from pyd4j.sched.emit import Decisions, emit
from pyd4j.sched.graph import Graph
from pyd4j.sched.plan import Plan


def plan_liveness(graph: Graph) -> Plan:
    """Free at last use."""
    return Plan(graph, "liveness", emit(graph, Decisions(free=True)), graph.nbytes_table())
