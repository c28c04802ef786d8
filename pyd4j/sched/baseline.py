"""Policy 0, baseline: keep everything (every output and gradient stays until the end)."""

from __future__ import annotations

from pyd4j.sched.emit import Decisions, emit
from pyd4j.sched.graph import Graph
from pyd4j.sched.plan import Plan


def plan_baseline(graph: Graph) -> Plan:
    """Allocate each tensor before its first use and never free it."""
    return Plan(graph, "baseline", emit(graph, Decisions(free=False)), graph.nbytes_table())
