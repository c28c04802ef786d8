"""The one simulator: replays any plan, checks it, and says exactly what it costs.

Memory is accounted in program order (see `pyd4j.sched.plan`): peak device bytes is the maximum,
over records, of the aligned bytes of live allocations (plus the step's scratch and convolution
workspace). The same allocations are placed in a first-fit arena (`pyd4j.sched.arena`) that
never moves a buffer: its high-water mark, fragmentation included, is reported next to the
accounted peak.
Time uses three streams -- compute, device-to-host and host-to-device copies -- with the usual
CUDA semantics: an async copy starts when both its stream is free and the host thread reaches
the record; a compute step waits for the prefetches it reads; FREE of a tensor waits for its
offload to finish. Host copies live from OFFLOAD to their last PREFETCH; when pinned host memory
(`CostModel.host_memory_bytes`) is short, further copies go to the disk tier.

`simulate` raises `InfeasiblePlan` naming the record when a plan reads a tensor before it is
produced or after it was freed (a free of a live tensor), frees or allocates twice, prefetches
without a host copy, renames a buffer without the in-place step before it, leaves a backward
step out, or goes over `budget`. Reads and writes are the dependency model's
(`pyd4j.sched.deps`), so a plan holding less than its steps need is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyd4j.sched.costmodel import CostModel
from pyd4j.sched.deps import chunked_scratch
from pyd4j.sched.graph import LayerType
from pyd4j.sched.plan import Op, Plan, aligned, gc_paused
from pyd4j.sched.replay import InfeasiblePlan, Replay

__all__ = ["InfeasiblePlan", "SimResult", "live_timeline", "peak_bytes", "record_scratch", "simulate",
           "step_scratch", "tensor_timeline"]


@dataclass
class SimResult:
    """What a plan costs. Bytes are aligned device bytes unless named otherwise."""

    policy: str
    peak_bytes: int  # live tensors + mandatory scratch, without optional algorithm workspace
    device_peak_bytes: int  # with workspace: what the device must hold
    peak_index: int
    host_peak_bytes: int
    disk_peak_bytes: int
    time_s: float
    ideal_time_s: float
    compute_s: float
    recompute_s: float
    stall_s: float
    bytes_offloaded: int
    bytes_prefetched: int
    n_records: int
    timeline: list[int] = field(repr=False, default_factory=list)
    arena_peak_bytes: int = 0  # first-fit arena high-water (fragmentation included)

    @property
    def overhead(self) -> float:
        """Iteration time relative to an infinite-memory run, minus one."""
        # rounded: the same steps summed in another order differ in the last bits
        return round(self.time_s / self.ideal_time_s - 1.0, 12) + 0.0 if self.ideal_time_s else 0.0

    def as_dict(self) -> dict:
        return {
            "peak_bytes": self.peak_bytes,
            "device_peak_bytes": self.device_peak_bytes,
            "arena_peak_bytes": self.arena_peak_bytes,
            "host_peak_bytes": self.host_peak_bytes,
            "disk_peak_bytes": self.disk_peak_bytes,
            "time_s": self.time_s,
            "ideal_time_s": self.ideal_time_s,
            "overhead": self.overhead,
            "recompute_s": self.recompute_s,
            "stall_s": self.stall_s,
            "bytes_offloaded": self.bytes_offloaded,
            "bytes_prefetched": self.bytes_prefetched,
            "n_records": self.n_records,
        }


def ideal_time(plan: Plan, cost: CostModel, fastest_conv: bool = True) -> float:
    """See `_ideal_time` (memoised per graph and cost model)."""
    memo = cost._memo(plan.graph)
    key = ("ideal_time", fastest_conv)
    if key not in memo:
        memo[key] = _ideal_time(plan, cost, fastest_conv)
    return memo[key]


def _ideal_time(plan: Plan, cost: CostModel, fastest_conv: bool = True) -> float:
    """Iteration time with infinite memory: every step once, no copies, and the fastest
    convolution algorithms (unlimited workspace); with `fastest_conv=False`, the no-workspace
    algorithm instead -- the compute time of the baseline and liveness plans, so the gap between
    the two is what the convolution-workspace policy can win back."""
    g = plan.graph
    fwd, bwd, upd = cost.layer_times(g)
    total = 0.0
    for layer in g.layers:
        i = layer.id
        if layer.type is LayerType.CONV and fastest_conv:
            best = cost.conv_options(g, i)[0][0]
            total += cost.conv_time(g, i, False, best) + cost.conv_time(g, i, True, best) + upd[i]
        else:
            total += fwd[i] + bwd[i] + upd[i]
    return total


@gc_paused
def simulate(plan: Plan, cost: CostModel | None = None, budget: int | None = None,
             timeline: bool = True, arena: bool = True) -> SimResult:
    """Replay `plan`; raise `InfeasiblePlan` if it cannot run (within `budget` bytes).

    What each compute record reads and writes is the graph's dependency model
    (`pyd4j.sched.deps`): its reads must be valid, the gradients it writes allocated (or
    renamed into place by the MOVE right after it), its parameters, momentum, state and -- for a
    BACKWARD record -- dW allocated; its mandatory scratch counts towards the peak. With
    `arena=False` the first-fit placement is skipped (`arena_peak_bytes` is then 0)."""
    cost = cost or CostModel.for_device("k40c")
    r = Replay(plan, cost, budget, timeline, arena, record_scratch(plan))
    r.run()
    return SimResult(plan.policy, r.peak, r.dev_peak, r.peak_k, r.host_peak, r.disk_peak, max(r.tc, r.td, r.th),
                     ideal_time(plan, cost), r.compute_s, r.recompute_s, r.stall_s, r.off_bytes,
                     r.pre_bytes, len(plan.steps), r.tl or [], r.place.high_water)


def record_scratch(plan: Plan) -> list[int] | None:
    """Mandatory scratch (aligned bytes) of each record when some CONV record runs a batch-chunk
    algorithm of the graph's framework (`pyd4j.sched.deps.chunked_scratch`; under a held scratch
    workspace every compute record holds the largest of them), None when every record's scratch
    is the dependency model's table (`ws_fwd`, `ws_bwd`, `ws_rc`)."""
    g = plan.graph
    counts = g.framework.chunk_counts
    if not any(c > 1 for c in counts):
        return None
    steps = plan.steps
    n_algos = len(counts)
    FW, BW, RC = int(Op.FORWARD), int(Op.BACKWARD), int(Op.RECOMPUTE)
    if not any(s[0] in (FW, BW, RC) and 0 < s[3] < n_algos and counts[s[3]] > 1 for s in steps):
        return None
    d = g.deps
    own = {FW: d.step_ws[0], BW: d.step_ws[1], RC: d.step_ws[2]}
    out = [0] * len(steps)
    for k, s in enumerate(steps):
        op = s[0]
        if op not in own:
            continue
        i, algo = s[1], s[3]
        ws = own[op][i]
        if 0 < algo < n_algos and counts[algo] > 1 and ws:
            ws = chunked_scratch(g, g.layers[i], op == BW, ws, counts[algo])
        out[k] = ws
    if d.held:
        top = max(out, default=0)
        out = [top if s[0] in own else 0 for s in steps]
    return out


def step_scratch(plan: Plan) -> list[int]:
    """Mandatory scratch (aligned bytes) of each record under the graph's dependency model
    (0 for memory records)."""
    scratch = record_scratch(plan)
    if scratch is not None:
        return scratch
    d = plan.graph.deps
    table = (None, None, None, None, d.ws_fwd, d.ws_bwd, d.ws_rc, None)
    return [0 if (ws := table[s[0]]) is None else ws[s[1]] for s in plan.steps]


def peak_bytes(plan: Plan) -> int:
    """`SimResult.peak_bytes` without checks or timing: the fast path searches use."""
    return max(live_timeline(plan), default=0)


def live_timeline(plan: Plan) -> list[int]:
    """Bytes held at each record: live tensors plus the record's mandatory scratch (no
    optional algorithm workspace)."""
    d = plan.graph.deps
    nb = plan.nbytes
    asz = d.asz if nb == d.nbytes else [aligned(b) for b in nb]
    scratch = record_scratch(plan)
    if scratch is not None:
        return _live_timeline(plan, asz, scratch)
    table = (None, None, None, None, d.ws_fwd, d.ws_bwd, d.ws_rc, None)
    live = 0
    out = []
    add = out.append
    for s in plan.steps:
        op = s[0]
        if op == 0:
            live += asz[s[1]]
            add(live)
        elif op == 1:
            live -= asz[s[1]]
            add(live)
        else:
            ws = table[op]
            add(live if ws is None else live + ws[s[1]])
    return out


def _live_timeline(plan: Plan, asz: list[int], scratch: list[int]) -> list[int]:
    """`live_timeline` with each record's scratch given."""
    live = 0
    out = []
    for s, ws in zip(plan.steps, scratch):
        op = s[0]
        if op == 0:
            live += asz[s[1]]
        elif op == 1:
            live -= asz[s[1]]
        out.append(live + ws)
    return out


def tensor_timeline(plan: Plan) -> list[int]:
    """Bytes of live tensors at each record, without any scratch."""
    d = plan.graph.deps
    nb = plan.nbytes
    asz = d.asz if nb == d.nbytes else [aligned(b) for b in nb]
    return _live_timeline(plan, asz, [0] * len(plan.steps))
