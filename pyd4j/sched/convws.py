"""Policy 4, dynamic convolution workspace: per CONV step, the fastest algorithm whose
workspace fits in the device memory that is free at that step.

Policies 0-3 use the algorithm without workspace (always possible). Given a device budget,
this pass reads the live-bytes timeline of the plan and gives each CONV forward, backward and
recompute record the fastest applicable algorithm with aligned(workspace) <= budget - live.
Time-optimised plans ask the tensor cache to keep `fastest_workspaces` free before CONV steps
(evicting cached tensors for it), so the fastest algorithm fits wherever memory allows.
"""

from __future__ import annotations

from pyd4j.sched.costmodel import CostModel
from pyd4j.sched.graph import Graph, LayerType
from pyd4j.sched.plan import Op, Plan, Step, aligned
from pyd4j.sched.simulator import live_timeline


def fastest_workspaces(graph: Graph, cost: CostModel) -> list[int]:
    """Aligned workspace of each CONV layer's fastest algorithm (0 for other layers)."""
    return [aligned(cost.conv_options(graph, layer.id)[0][1])
            if layer.type is LayerType.CONV else 0 for layer in graph.layers]


def assign_workspaces(plan: Plan, cost: CostModel, budget: int) -> Plan:
    """Rewrite CONV compute records with the fastest algorithm that fits under `budget`."""
    g = plan.graph
    live = live_timeline(plan)
    is_conv = [layer.type is LayerType.CONV for layer in g.layers]
    options: dict[int, list[tuple[int, int, int]]] = {}
    steps = list(plan.steps)
    compute = (int(Op.FORWARD), int(Op.BACKWARD), int(Op.RECOMPUTE))
    for k, s in enumerate(steps):
        if s[0] not in compute or not is_conv[s[1]]:
            continue
        i = s[1]
        opts = options.get(i)
        if opts is None:
            opts = options[i] = [(a, ws, aligned(ws)) for a, ws in cost.conv_options(g, i)]
        free = budget - live[k]
        for algo, ws, aws in opts:
            if aws <= free:
                if (ws, algo) != (s[2], s[3]):
                    steps[k] = Step(s[0], i, ws, algo)
                break
    plan.steps = steps
    return plan
