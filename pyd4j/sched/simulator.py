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

from pyd4j.sched.arena import FirstFit
from pyd4j.sched.bounds import resident_tensors
from pyd4j.sched.costmodel import CostModel
from pyd4j.sched.deps import chunked_scratch
from pyd4j.sched.graph import Graph, LayerType
from pyd4j.sched.plan import Op, Plan, aligned, gc_paused, state_tid


class InfeasiblePlan(ValueError):
    """The plan cannot run: carries the record index and its description."""

    def __init__(self, index: int, record: str, reason: str) -> None:
        self.index, self.record, self.reason = index, record, reason
        super().__init__(f"record {index} ({record}): {reason}")


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
    g = plan.graph
    d = g.deps
    layers = g.layers
    n = len(layers)
    nb = plan.nbytes
    asz = d.asz if nb == d.nbytes else [aligned(b) for b in nb]
    steps = plan.steps
    fwd, bwd, upd = cost.layer_times(g)
    is_conv = [layer.type is LayerType.CONV for layer in layers]
    need_dy = [0] * n
    for i in range(n):
        for j in d.bwd_dx[i]:
            need_dy[j] += 1
    has_params = [bool(layer.param_shapes) for layer in layers]
    state_t = [state_tid(n, i) if d.state_bytes[i] else -1 for i in range(n)]
    saved_t = [state_tid(n, i) if d.saved_bytes[i] else -1 for i in range(n)]
    resident = resident_tensors(g)
    is_resident = bytearray(len(nb))
    for t in resident:
        is_resident[t] = 1
    started = False

    nt = len(nb)
    alloc = bytearray(nt)
    valid = bytearray(nt)
    host = bytearray(nt)
    on_disk = bytearray(nt)
    freed_at = [-1] * nt
    dy_count = [0] * n
    done_bwd = bytearray(n)
    ready = [0.0] * nt
    off_end = [0.0] * nt
    # last PREFETCH of each tensor: its host copy can be dropped after it
    last_pre = [-1] * nt
    for k, s in enumerate(steps):
        if s[0] == 3:  # PREFETCH
            last_pre[s[1]] = k

    live = peak = dev_peak = peak_k = 0
    host_live = host_peak = disk_live = disk_peak = 0
    host_cap = cost.host_memory_bytes
    tc = td = th = 0.0
    compute_s = recompute_s = stall_s = 0.0
    off_bytes = pre_bytes = 0
    tl: list[int] = [] if timeline else None  # type: ignore[assignment]
    tl_add = tl.append if timeline else None
    expect_move: tuple[int, int] | None = None  # (dst, src) the next record must rename
    place = FirstFit()  # where the buffers sit: fragmentation, as a real allocator sees it

    def fail(k: int, reason: str) -> InfeasiblePlan:
        return InfeasiblePlan(k, plan.describe(steps[k]), reason)

    def check_read(k: int, t: int) -> None:
        if not valid[t]:
            if freed_at[t] >= 0:
                raise fail(k, f"reads {plan.tensor_name(t)} freed at record {freed_at[t]} "
                              "(free of a live tensor)")
            raise fail(k, f"reads {plan.tensor_name(t)} before it is produced")

    def drop_host_copy(t: int) -> None:
        nonlocal host_live, disk_live
        host[t] = 0
        if on_disk[t]:
            disk_live -= asz[t]
        else:
            host_live -= asz[t]

    def in_place(k: int, dst: int, src: int, what: str) -> None:
        nonlocal expect_move
        nxt = steps[k + 1] if k + 1 < len(steps) else None
        if nxt is None or nxt.op != Op.MOVE or nxt.arg != dst or nxt.src != src:
            raise fail(k, f"writes {plan.tensor_name(dst)}, which is not allocated ({what})")
        check_read(k, src)
        expect_move = (dst, src)

    A, F, OFF, PRE, FW, BW, RC, MV = (int(o) for o in (Op.ALLOC, Op.FREE, Op.OFFLOAD, Op.PREFETCH,
                                                       Op.FORWARD, Op.BACKWARD, Op.RECOMPUTE,
                                                       Op.MOVE))
    bwd_reads, fwd_reads, rc_reads = d.bwd_reads, d.fwd_reads, d.rc_reads
    bwd_dy, bwd_dx, bwd_dw, bwd_inplace = d.bwd_dy, d.bwd_dx, d.bwd_dw, d.bwd_inplace
    ws_fwd, ws_bwd, ws_rc = d.ws_fwd, d.ws_bwd, d.ws_rc
    scratch = record_scratch(plan)  # None: every record's scratch is the model's table
    if arena:
        arena_alloc, arena_free, arena_rename = place.alloc, place.free, place.rename
    else:
        arena_alloc = arena_rename = lambda a, b: None  # noqa: E731
        arena_free = lambda a: None  # noqa: E731
    transfer_time = cost.transfer_time
    ctimes: dict[tuple[int, bool, int], float] = {}

    def sliced_speed(algo: int) -> float:
        """A non-convolution step's relative speed under algorithm `algo` (DL4J's LRN in batch slices)."""
        return cost.algorithms(g)[algo].speed if algo else 1.0

    def conv_time(g: Graph, i: int, backward: bool, algo: int) -> float:
        key = (i, backward, algo)
        t = ctimes.get(key)
        if t is None:
            t = ctimes[key] = cost.conv_time(g, i, backward, algo)
        return t
    for k, s in enumerate(steps):
        op, t, s_ws, s_algo, s_src = s
        extra = 0
        if expect_move is not None and op != MV:
            raise fail(k, "the MOVE of the in-place step before is missing")
        if op == A:
            if not 0 <= t < nt or not nb[t]:
                raise fail(k, f"{plan.tensor_name(t) if 0 <= t < nt else t} is not a tensor "
                              "of this graph")
            if alloc[t]:
                raise fail(k, f"{plan.tensor_name(t)} is already allocated")
            alloc[t] = 1
            live += asz[t]
            arena_alloc(t, nb[t])
            if budget is not None and live > budget:
                raise fail(k, f"{live} live bytes exceed the budget of {budget} bytes")
        elif op == F:
            if not alloc[t]:
                raise fail(k, f"frees {plan.tensor_name(t)}, which is not allocated")
            if is_resident[t]:
                raise fail(k, f"frees {plan.tensor_name(t)}, which stays allocated for the "
                              "whole run")
            if t % 5 == 1 and t < 5 * n and valid[t]:
                j = t // 5
                if not (done_bwd[j] if d.bwd_dy[j] else dy_count[j] >= need_dy[j]):
                    raise fail(k, f"frees {plan.tensor_name(t)} before its backward step read "
                                  f"it ({dy_count[j]} of {need_dy[j]} contributions summed)")
            alloc[t] = valid[t] = 0
            freed_at[t] = k
            live -= asz[t]
            arena_free(t)
            if off_end[t] > tc:
                stall_s += off_end[t] - tc
                tc = off_end[t]
            if host[t] and last_pre[t] < k:
                drop_host_copy(t)
        elif op == MV:
            src = s_src
            if expect_move != (t, src):
                raise fail(k, "renames a buffer without the in-place step right before it")
            expect_move = None
            if alloc[t]:
                raise fail(k, f"{plan.tensor_name(t)} is already allocated")
            if asz[t] != asz[src]:
                raise fail(k, f"{plan.tensor_name(src)} ({asz[src]} bytes) cannot hold "
                              f"{plan.tensor_name(t)} ({asz[t]} bytes)")
            alloc[src] = valid[src] = 0
            freed_at[src] = k
            alloc[t] = valid[t] = 1
            arena_rename(src, t)
            if off_end[src] > ready[t]:
                ready[t] = off_end[src]
            if host[src] and last_pre[src] < k:
                drop_host_copy(src)
        elif op == OFF:
            if t % 5 != 0 or t >= 5 * n:
                raise fail(k, "only layer outputs (Y) move between device and host")
            if not valid[t]:
                check_read(k, t)
            if not host[t]:
                host[t] = 1
                if host_live + asz[t] > host_cap:
                    on_disk[t] = 1
                    disk_live += asz[t]
                    disk_peak = max(disk_peak, disk_live)
                else:
                    host_live += asz[t]
                    host_peak = max(host_peak, host_live)
            start = td if td > tc else tc
            td = start + transfer_time(nb[t], bool(on_disk[t]))
            off_end[t] = td
            off_bytes += asz[t]
        elif op == PRE:
            if t % 5 != 0 or t >= 5 * n:
                raise fail(k, "only layer outputs (Y) move between device and host")
            if not alloc[t]:
                raise fail(k, f"prefetches {plan.tensor_name(t)} into an unallocated buffer")
            if not host[t]:
                raise fail(k, f"prefetches {plan.tensor_name(t)}, which has no host copy")
            start = max(th, tc, off_end[t])
            th = start + transfer_time(nb[t], bool(on_disk[t]))
            ready[t] = th
            valid[t] = 1
            pre_bytes += asz[t]
            if last_pre[t] == k:  # host copy no longer needed once this copy is done
                drop_host_copy(t)
        else:
            i = t
            if not 0 <= i < n:
                raise fail(k, f"layer {i} is not in the graph")
            if not started:
                started = True
                missing_res = [r for r in resident if not alloc[r]]
                if missing_res:
                    raise fail(k, f"{plan.tensor_name(missing_res[0])} and "
                                  f"{len(missing_res) - 1} more resident tensors are not "
                                  "allocated before the first compute step")
            base = 5 * i
            if state_t[i] >= 0 and not alloc[state_t[i]]:
                raise fail(k, f"state of {layers[i].name} is not allocated")
            if op == BW:
                if done_bwd[i]:
                    raise fail(k, "backward step runs twice")
                reads = bwd_reads[i]
                for j in reads:
                    if not valid[5 * j]:
                        check_read(k, 5 * j)
                if bwd_dy[i]:
                    if not valid[base + 1] or dy_count[i] < need_dy[i]:
                        raise fail(k, f"gradient of {layers[i].name} is incomplete "
                                      f"({dy_count[i]} of {need_dy[i]} contributions)")
                ip = bwd_inplace[i]
                for j in bwd_dx[i]:
                    tj = 5 * j + 1
                    if not alloc[tj]:
                        if ip is None or ip[0] != j:
                            raise fail(k, f"writes {layers[j].name}:DY, which is not allocated")
                        in_place(k, tj, ip[1], "and not written in place")
                    else:
                        valid[tj] = 1
                    dy_count[j] += 1
                if has_params[i] and not (alloc[base + 2] and (alloc[base + 4] or not nb[base + 4])):
                    raise fail(k, f"parameters/updater state of {layers[i].name} not allocated")
                if bwd_dw[i] and not alloc[base + 3]:
                    raise fail(k, f"writes {layers[i].name}:DW, which is not allocated")
                if saved_t[i] >= 0 and not valid[saved_t[i]]:
                    raise fail(k, f"reads what the forward step of {layers[i].name} keeps for "
                                  "it, which is not live (freed and not recomputed)")
                done_bwd[i] = 1
                dur = (conv_time(g, i, True, s_algo) if is_conv[i] else bwd[i] / sliced_speed(s_algo)) + upd[i]
                extra = ws_bwd[i] if scratch is None else scratch[k]
            else:
                reads = fwd_reads[i] if op == FW else rc_reads[i]
                for j in reads:
                    if not valid[5 * j]:
                        check_read(k, 5 * j)
                if not alloc[base]:
                    j = d.fwd_inplace[i]
                    if j < 0:
                        raise fail(k, f"writes {layers[i].name}:Y, which is not allocated")
                    in_place(k, base, 5 * j, "and not written in place")
                else:
                    valid[base] = 1
                if has_params[i] and not alloc[base + 2]:
                    raise fail(k, f"parameters of {layers[i].name} not allocated")
                if saved_t[i] >= 0:
                    if not alloc[saved_t[i]]:
                        raise fail(k, f"writes what {layers[i].name} keeps for its backward "
                                      "step, which is not allocated")
                    valid[saved_t[i]] = 1
                dur = conv_time(g, i, False, s_algo) if is_conv[i] else fwd[i] / sliced_speed(s_algo)
                if scratch is not None:
                    extra = scratch[k]
                else:
                    extra = ws_fwd[i] if op == FW else ws_rc[i]
            aws = 0
            if s_ws:
                if not is_conv[i]:
                    raise fail(k, "workspace on a non-CONV step")
                if s_ws < cost.conv_workspace(g, i, s_algo):
                    raise fail(k, f"workspace {s_ws} is smaller than algorithm "
                                  f"{cost.algorithms(g)[s_algo].name} needs")
                aws = aligned(s_ws)
            elif s_algo and is_conv[i] and cost.conv_workspace(g, i, s_algo):
                raise fail(k, f"algorithm {cost.algorithms(g)[s_algo].name} needs a workspace")
            if budget is not None and live + extra + aws > budget:
                raise fail(k, f"{live} live + {extra + aws} workspace bytes exceed "
                              f"the budget of {budget} bytes")
            if live + extra > peak:
                peak = live + extra
            extra += aws
            if extra:  # the executor's scratch block for this step
                arena_alloc(-1, extra)
                arena_free(-1)
            start = tc
            for j in reads:
                r = ready[5 * j]
                if r > start:
                    start = r
            stall_s += start - tc
            tc = start + dur
            compute_s += dur
            if op == RC:
                recompute_s += dur
        if live > peak:
            peak = live
        if live + extra > dev_peak:
            dev_peak = live + extra
            peak_k = k
        if tl_add is not None:
            tl_add(live + extra)
    if expect_move is not None:
        raise InfeasiblePlan(len(steps), "end of plan", "the MOVE of the last in-place step "
                             "is missing")
    missing = [layers[i].name for i in range(n) if g.has_backward(i) and not done_bwd[i]]
    if missing:
        raise InfeasiblePlan(len(steps), "end of plan",
                             f"backward steps missing for {missing[:5]}"
                             f"{' ...' if len(missing) > 5 else ''}")
    total = max(tc, td, th)
    return SimResult(plan.policy, peak, dev_peak, peak_k, host_peak, disk_peak, total,
                     ideal_time(plan, cost), compute_s, recompute_s, stall_s, off_bytes,
                     pre_bytes, len(steps), tl or [], place.high_water)


def record_scratch(plan: Plan) -> list[int] | None:
    """Mandatory scratch (aligned bytes) of each record when some CONV record runs a batch-chunk
    algorithm of the graph's profile (`pyd4j.sched.deps.chunked_scratch`; under a held scratch
    workspace every compute record holds the largest of them), None when every record's scratch
    is the dependency model's table (`ws_fwd`, `ws_bwd`, `ws_rc`)."""
    g = plan.graph
    counts = g.profile.chunk_counts
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
