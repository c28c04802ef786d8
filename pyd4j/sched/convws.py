"""Policy 4, dynamic convolution workspace: per CONV step, the fastest algorithm whose
workspace fits in the device memory that is free at that step.

Policies 0-3 use the default algorithm (no optional workspace, always possible). Given a device
budget, this pass reads the live-bytes timeline of the plan and gives each CONV forward, backward
and recompute record the fastest applicable algorithm whose working memory fits next to the
tensors live at that record: its optional workspace (cuDNN's algorithms: aligned(workspace) <=
budget - live, live counting the step's mandatory scratch) or, for a framework's batch-chunk
algorithms (DL4J: the convolution runs in k batch slices, `pyd4j.sched.deps.chunked_scratch`),
the mandatory scratch of one slice. Under a held scratch workspace (DL4J's working memory, as large
as the largest step's and kept all iteration) the workspace must fit next to the plan's largest
set of live tensors, so that bound applies at every record. When no algorithm fits, the one with
the least working memory is taken (the plan then goes over the budget by the least it can).
Time-optimised plans ask the tensor cache to keep `fastest_workspaces` free before CONV steps
(evicting cached tensors for it), so the fastest algorithm fits wherever memory allows.
"""

from __future__ import annotations

from pyd4j.sched.costmodel import CostModel
from pyd4j.sched.deps import chunkable, chunked_scratch
from pyd4j.sched.graph import Graph, LayerType
from pyd4j.sched.plan import Op, Plan, Step, aligned
from pyd4j.sched.simulator import live_timeline, step_scratch


def fastest_workspaces(graph: Graph, cost: CostModel) -> list[int]:
    """Aligned workspace of each CONV layer's fastest algorithm (0 for other layers)."""
    return [aligned(cost.conv_options(graph, layer.id)[0][1])
            if layer.type is LayerType.CONV else 0 for layer in graph.layers]


def assign_workspaces(plan: Plan, cost: CostModel, budget: int) -> Plan:
    """Rewrite CONV compute records with the fastest algorithm that fits under `budget`."""
    g = plan.graph
    d = g.deps
    live = live_timeline(plan)
    scratch = step_scratch(plan)
    tensors = [b - w for b, w in zip(live, scratch)]
    held_free = budget - max(tensors, default=0) if d.held else None
    algos = cost.algorithms(g)
    # convolutions, and the layers whose steps may run in batch slices (DL4J's LRN)
    is_conv = [layer.type is LayerType.CONV or chunkable(layer) for layer in g.layers]
    own = {int(Op.FORWARD): d.step_ws[0], int(Op.BACKWARD): d.step_ws[1],
           int(Op.RECOMPUTE): d.step_ws[2]}
    held_ws = {int(Op.FORWARD): d.ws_fwd, int(Op.BACKWARD): d.ws_bwd, int(Op.RECOMPUTE): d.ws_rc}
    options: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
    steps = list(plan.steps)
    for k, s in enumerate(steps):
        if s[0] not in own or not is_conv[s[1]]:
            continue
        i, op = s[1], s[0]
        opts = options.get((i, op))
        if opts is None:
            # (algo, optional workspace, aligned working memory of the step with it)
            layer = g.layers[i]
            mandatory = held_ws[op][i] if held_free is None else own[op][i]
            opts = options[(i, op)] = [
                (a, ws, (chunked_scratch(g, layer, op == int(Op.BACKWARD), own[op][i],
                                         algos[a].batch_chunks)
                         if algos[a].batch_chunks > 1 else mandatory) + aligned(ws))
                for a, ws in cost.conv_options(g, i)]
        free = held_free if held_free is not None else budget - tensors[k]
        pick = next((o for o in opts if o[2] <= free), None)
        if pick is None:
            pick = min(opts, key=lambda o: o[2])  # the least working memory (fastest of equals)
        algo, ws, _ = pick
        if (ws, algo) != (s[2], s[3]):
            steps[k] = Step(s[0], i, ws, algo)
    plan.steps = steps
    return plan


def least_workspaces(plan: Plan, cost: CostModel) -> Plan:
    """Rewrite CONV compute records for the plan's smallest peak: the least working memory where
    it decides the peak, the fastest algorithm that stays under that peak everywhere else."""
    steps = list(plan.steps)
    peak = max(live_timeline(assign_workspaces(plan, cost, 0)), default=0)
    plan.steps = steps
    return assign_workspaces(plan, cost, peak)
