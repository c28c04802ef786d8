"""One replay of a plan, record by record: what `pyd4j.sched.simulator.simulate` checks and counts.

The replay holds the state of every tensor (allocated, valid, on the host or the disk tier, when it is
ready) and the three time streams (compute, device-to-host, host-to-device); each kind of record has
its method, which raises `InfeasiblePlan` naming the record when the plan cannot run.
"""

from __future__ import annotations

from pyd4j.sched.arena import FirstFit
from pyd4j.sched.bounds import resident_tensors
from pyd4j.sched.costmodel import CostModel
from pyd4j.sched.graph import LayerType
from pyd4j.sched.plan import Op, Plan, aligned, state_tid

A, F, OFF, PRE, FW, BW, RC, MV = (int(o) for o in (Op.ALLOC, Op.FREE, Op.OFFLOAD, Op.PREFETCH, Op.FORWARD,
                                                   Op.BACKWARD, Op.RECOMPUTE, Op.MOVE))


class InfeasiblePlan(ValueError):
    """The plan cannot run: carries the record index and its description."""

    def __init__(self, index: int, record: str, reason: str) -> None:
        self.index, self.record, self.reason = index, record, reason
        super().__init__(f"record {index} ({record}): {reason}")


class Replay:
    """The state of one replay of `plan` (see the module docstring)."""

    def __init__(self, plan: Plan, cost: CostModel, budget: int | None, timeline: bool, arena: bool,
                 scratch: list[int] | None) -> None:
        self.plan, self.cost, self.budget, self.scratch = plan, cost, budget, scratch
        self.g = g = plan.graph
        self.d = d = g.deps
        self.layers = layers = g.layers
        self.n = n = len(layers)
        self.nb = nb = plan.nbytes
        self.asz = d.asz if nb == d.nbytes else [aligned(b) for b in nb]
        self.steps = plan.steps
        self.fwd, self.bwd, self.upd = cost.layer_times(g)
        self.is_conv = [layer.type is LayerType.CONV for layer in layers]
        self.need_dy = [0] * n
        for i in range(n):
            for j in d.bwd_dx[i]:
                self.need_dy[j] += 1
        self.has_params = [bool(layer.param_shapes) for layer in layers]
        self.state_t = [state_tid(n, i) if d.state_bytes[i] else -1 for i in range(n)]
        self.saved_t = [state_tid(n, i) if d.saved_bytes[i] else -1 for i in range(n)]
        self.resident = resident_tensors(g)
        self.nt = nt = len(nb)
        self.is_resident = bytearray(nt)
        for t in self.resident:
            self.is_resident[t] = 1
        self.started = False
        self.alloc, self.valid, self.host, self.on_disk = bytearray(nt), bytearray(nt), bytearray(nt), bytearray(nt)
        self.freed_at = [-1] * nt
        self.dy_count = [0] * n
        self.done_bwd = bytearray(n)
        self.ready = [0.0] * nt
        self.off_end = [0.0] * nt
        self.last_pre = [-1] * nt   # last PREFETCH of each tensor: its host copy can be dropped after it
        for k, s in enumerate(self.steps):
            if s[0] == PRE:
                self.last_pre[s[1]] = k
        self.live = self.peak = self.dev_peak = self.peak_k = 0
        self.host_live = self.host_peak = self.disk_live = self.disk_peak = 0
        self.host_cap = cost.host_memory_bytes
        self.tc = self.td = self.th = 0.0
        self.compute_s = self.recompute_s = self.stall_s = 0.0
        self.off_bytes = self.pre_bytes = 0
        self.tl: list[int] | None = [] if timeline else None
        self.expect_move: tuple[int, int] | None = None   # (dst, src) the next record must rename
        self.place = FirstFit()   # where the buffers sit: fragmentation, as a real allocator sees it
        self.arena = arena
        self.ctimes: dict[tuple[int, bool, int], float] = {}

    # -- helpers ----------------------------------------------------------------------------
    def fail(self, k: int, reason: str) -> InfeasiblePlan:
        return InfeasiblePlan(k, self.plan.describe(self.steps[k]), reason)

    def check_read(self, k: int, t: int) -> None:
        if not self.valid[t]:
            if self.freed_at[t] >= 0:
                raise self.fail(k, f"reads {self.plan.tensor_name(t)} freed at record {self.freed_at[t]} "
                                   "(free of a live tensor)")
            raise self.fail(k, f"reads {self.plan.tensor_name(t)} before it is produced")

    def drop_host_copy(self, t: int) -> None:
        self.host[t] = 0
        if self.on_disk[t]:
            self.disk_live -= self.asz[t]
        else:
            self.host_live -= self.asz[t]

    def in_place(self, k: int, dst: int, src: int, what: str) -> None:
        steps = self.steps
        nxt = steps[k + 1] if k + 1 < len(steps) else None
        if nxt is None or nxt.op != Op.MOVE or nxt.arg != dst or nxt.src != src:
            raise self.fail(k, f"writes {self.plan.tensor_name(dst)}, which is not allocated ({what})")
        self.check_read(k, src)
        self.expect_move = (dst, src)

    def sliced_speed(self, algo: int) -> float:
        """A non-convolution step's relative speed under algorithm `algo` (a step in batch slices)."""
        return self.cost.algorithms(self.g)[algo].speed if algo else 1.0

    def conv_time(self, i: int, backward: bool, algo: int) -> float:
        key = (i, backward, algo)
        t = self.ctimes.get(key)
        if t is None:
            t = self.ctimes[key] = self.cost.conv_time(self.g, i, backward, algo)
        return t

    # -- memory records -----------------------------------------------------------------------
    def allocate(self, k: int, t: int) -> None:
        nb, nt = self.nb, self.nt
        if not 0 <= t < nt or not nb[t]:
            raise self.fail(k, f"{self.plan.tensor_name(t) if 0 <= t < nt else t} is not a tensor "
                               "of this graph")
        if self.alloc[t]:
            raise self.fail(k, f"{self.plan.tensor_name(t)} is already allocated")
        self.alloc[t] = 1
        self.live += self.asz[t]
        if self.arena:
            self.place.alloc(t, nb[t])
        if self.budget is not None and self.live > self.budget:
            raise self.fail(k, f"{self.live} live bytes exceed the budget of {self.budget} bytes")

    def free(self, k: int, t: int) -> None:
        name = self.plan.tensor_name
        if not self.alloc[t]:
            raise self.fail(k, f"frees {name(t)}, which is not allocated")
        if self.is_resident[t]:
            raise self.fail(k, f"frees {name(t)}, which stays allocated for the whole run")
        if t % 5 == 1 and t < 5 * self.n and self.valid[t]:
            j = t // 5
            if not (self.done_bwd[j] if self.d.bwd_dy[j] else self.dy_count[j] >= self.need_dy[j]):
                raise self.fail(k, f"frees {name(t)} before its backward step read "
                                   f"it ({self.dy_count[j]} of {self.need_dy[j]} contributions summed)")
        self.alloc[t] = self.valid[t] = 0
        self.freed_at[t] = k
        self.live -= self.asz[t]
        if self.arena:
            self.place.free(t)
        if self.off_end[t] > self.tc:
            self.stall_s += self.off_end[t] - self.tc
            self.tc = self.off_end[t]
        if self.host[t] and self.last_pre[t] < k:
            self.drop_host_copy(t)

    def move(self, k: int, t: int, src: int) -> None:
        name = self.plan.tensor_name
        if self.expect_move != (t, src):
            raise self.fail(k, "renames a buffer without the in-place step right before it")
        self.expect_move = None
        if self.alloc[t]:
            raise self.fail(k, f"{name(t)} is already allocated")
        if self.asz[t] != self.asz[src]:
            raise self.fail(k, f"{name(src)} ({self.asz[src]} bytes) cannot hold {name(t)} ({self.asz[t]} bytes)")
        self.alloc[src] = self.valid[src] = 0
        self.freed_at[src] = k
        self.alloc[t] = self.valid[t] = 1
        if self.arena:
            self.place.rename(src, t)
        if self.off_end[src] > self.ready[t]:
            self.ready[t] = self.off_end[src]
        if self.host[src] and self.last_pre[src] < k:
            self.drop_host_copy(src)

    def offload(self, k: int, t: int) -> None:
        if t % 5 != 0 or t >= 5 * self.n:
            raise self.fail(k, "only layer outputs (Y) move between device and host")
        if not self.valid[t]:
            self.check_read(k, t)
        asz = self.asz
        if not self.host[t]:
            self.host[t] = 1
            if self.host_live + asz[t] > self.host_cap:
                self.on_disk[t] = 1
                self.disk_live += asz[t]
                self.disk_peak = max(self.disk_peak, self.disk_live)
            else:
                self.host_live += asz[t]
                self.host_peak = max(self.host_peak, self.host_live)
        start = self.td if self.td > self.tc else self.tc
        self.td = start + self.cost.transfer_time(self.nb[t], bool(self.on_disk[t]))
        self.off_end[t] = self.td
        self.off_bytes += asz[t]

    def prefetch(self, k: int, t: int) -> None:
        name = self.plan.tensor_name
        if t % 5 != 0 or t >= 5 * self.n:
            raise self.fail(k, "only layer outputs (Y) move between device and host")
        if not self.alloc[t]:
            raise self.fail(k, f"prefetches {name(t)} into an unallocated buffer")
        if not self.host[t]:
            raise self.fail(k, f"prefetches {name(t)}, which has no host copy")
        start = max(self.th, self.tc, self.off_end[t])
        self.th = start + self.cost.transfer_time(self.nb[t], bool(self.on_disk[t]))
        self.ready[t] = self.th
        self.valid[t] = 1
        self.pre_bytes += self.asz[t]
        if self.last_pre[t] == k:   # host copy no longer needed once this copy is done
            self.drop_host_copy(t)

    # -- compute records ----------------------------------------------------------------------
    def compute(self, k: int, op: int, i: int, s_ws: int, s_algo: int) -> int:
        """A FORWARD, BACKWARD or RECOMPUTE record of layer i: its checks and its time; returns the
        bytes it holds beside the live tensors (scratch and convolution workspace)."""
        if not 0 <= i < self.n:
            raise self.fail(k, f"layer {i} is not in the graph")
        if not self.started:
            self.started = True
            missing_res = [r for r in self.resident if not self.alloc[r]]
            if missing_res:
                raise self.fail(k, f"{self.plan.tensor_name(missing_res[0])} and {len(missing_res) - 1} more "
                                   "resident tensors are not allocated before the first compute step")
        if self.state_t[i] >= 0 and not self.alloc[self.state_t[i]]:
            raise self.fail(k, f"state of {self.layers[i].name} is not allocated")
        reads, dur, extra = (self.backward(k, i, s_algo) if op == BW else self.forward(k, op, i, s_algo))
        aws = self.workspace(k, i, s_ws, s_algo)
        if self.budget is not None and self.live + extra + aws > self.budget:
            raise self.fail(k, f"{self.live} live + {extra + aws} workspace bytes exceed "
                               f"the budget of {self.budget} bytes")
        if self.live + extra > self.peak:
            self.peak = self.live + extra
        extra += aws
        if extra and self.arena:   # the executor's scratch block for this step
            self.place.alloc(-1, extra)
            self.place.free(-1)
        start = self.tc
        for j in reads:
            r = self.ready[5 * j]
            if r > start:
                start = r
        self.stall_s += start - self.tc
        self.tc = start + dur
        self.compute_s += dur
        if op == RC:
            self.recompute_s += dur
        return extra

    def backward(self, k: int, i: int, s_algo: int) -> tuple[tuple[int, ...], float, int]:
        """A BACKWARD record's checks: (what it reads, its time, its scratch)."""
        d, layers, valid, alloc, nb = self.d, self.layers, self.valid, self.alloc, self.nb
        base = 5 * i
        if self.done_bwd[i]:
            raise self.fail(k, "backward step runs twice")
        reads = d.bwd_reads[i]
        for j in reads:
            if not valid[5 * j]:
                self.check_read(k, 5 * j)
        if d.bwd_dy[i] and (not valid[base + 1] or self.dy_count[i] < self.need_dy[i]):
            raise self.fail(k, f"gradient of {layers[i].name} is incomplete "
                               f"({self.dy_count[i]} of {self.need_dy[i]} contributions)")
        ip = d.bwd_inplace[i]
        for j in d.bwd_dx[i]:
            tj = 5 * j + 1
            if not alloc[tj]:
                if ip is None or ip[0] != j:
                    raise self.fail(k, f"writes {layers[j].name}:DY, which is not allocated")
                self.in_place(k, tj, ip[1], "and not written in place")
            else:
                valid[tj] = 1
            self.dy_count[j] += 1
        if self.has_params[i] and not (alloc[base + 2] and (alloc[base + 4] or not nb[base + 4])):
            raise self.fail(k, f"parameters/updater state of {layers[i].name} not allocated")
        if d.bwd_dw[i] and not alloc[base + 3]:
            raise self.fail(k, f"writes {layers[i].name}:DW, which is not allocated")
        if self.saved_t[i] >= 0 and not valid[self.saved_t[i]]:
            raise self.fail(k, f"reads what the forward step of {layers[i].name} keeps for "
                               "it, which is not live (freed and not recomputed)")
        self.done_bwd[i] = 1
        dur = (self.conv_time(i, True, s_algo) if self.is_conv[i] else self.bwd[i] / self.sliced_speed(s_algo)) + self.upd[i]
        extra = d.ws_bwd[i] if self.scratch is None else self.scratch[k]
        return reads, dur, extra

    def forward(self, k: int, op: int, i: int, s_algo: int) -> tuple[tuple[int, ...], float, int]:
        """A FORWARD or RECOMPUTE record's checks: (what it reads, its time, its scratch)."""
        d, layers, valid, alloc = self.d, self.layers, self.valid, self.alloc
        base = 5 * i
        reads = d.fwd_reads[i] if op == FW else d.rc_reads[i]
        for j in reads:
            if not valid[5 * j]:
                self.check_read(k, 5 * j)
        if not alloc[base]:
            j = d.fwd_inplace[i]
            if j < 0:
                raise self.fail(k, f"writes {layers[i].name}:Y, which is not allocated")
            self.in_place(k, base, 5 * j, "and not written in place")
        else:
            valid[base] = 1
        if self.has_params[i] and not alloc[base + 2]:
            raise self.fail(k, f"parameters of {layers[i].name} not allocated")
        saved = self.saved_t[i]
        if saved >= 0:
            if not alloc[saved]:
                raise self.fail(k, f"writes what {layers[i].name} keeps for its backward step, which is not allocated")
            valid[saved] = 1
        dur = self.conv_time(i, False, s_algo) if self.is_conv[i] else self.fwd[i] / self.sliced_speed(s_algo)
        if self.scratch is not None:
            extra = self.scratch[k]
        else:
            extra = d.ws_fwd[i] if op == FW else d.ws_rc[i]
        return reads, dur, extra

    def workspace(self, k: int, i: int, s_ws: int, s_algo: int) -> int:
        """The record's optional convolution workspace, aligned, checked against its algorithm."""
        cost, g = self.cost, self.g
        if s_ws:
            if not self.is_conv[i]:
                raise self.fail(k, "workspace on a non-CONV step")
            if s_ws < cost.conv_workspace(g, i, s_algo):
                raise self.fail(k, f"workspace {s_ws} is smaller than algorithm {cost.algorithms(g)[s_algo].name} needs")
            return aligned(s_ws)
        if s_algo and self.is_conv[i] and cost.conv_workspace(g, i, s_algo):
            raise self.fail(k, f"algorithm {cost.algorithms(g)[s_algo].name} needs a workspace")
        return 0

    # -- the replay ---------------------------------------------------------------------------
    def run(self) -> None:
        """Every record in order, then the end-of-plan checks. ALLOC and FREE of a tensor without a
        host copy, the most frequent records, take a fast path here; everything else its method."""
        alloc, asz, host, is_resident, budget, nb = self.alloc, self.asz, self.host, self.is_resident, self.budget, self.nb
        tl_add = self.tl.append if self.tl is not None else None
        place_alloc = self.place.alloc if self.arena else None
        place_free = self.place.free if self.arena else None
        n5, nt, valid, freed_at, off_end = 5 * self.n, self.nt, self.valid, self.freed_at, self.off_end
        for k, s in enumerate(self.steps):
            op, t, s_ws, s_algo, s_src = s
            extra = 0
            if self.expect_move is not None and op != MV:
                raise self.fail(k, "the MOVE of the in-place step before is missing")
            if op == A:
                if 0 <= t < nt and nb[t] and not alloc[t] and budget is None:
                    alloc[t] = 1
                    self.live += asz[t]
                    if place_alloc is not None:
                        place_alloc(t, nb[t])
                else:
                    self.allocate(k, t)
            elif op == F:
                if alloc[t] and not is_resident[t] and not host[t] and not (t % 5 == 1 and t < n5) and off_end[t] <= self.tc:
                    alloc[t] = valid[t] = 0
                    freed_at[t] = k
                    self.live -= asz[t]
                    if place_free is not None:
                        place_free(t)
                else:
                    self.free(k, t)
            elif op == MV:
                self.move(k, t, s_src)
            elif op == OFF:
                self.offload(k, t)
            elif op == PRE:
                self.prefetch(k, t)
            else:
                extra = self.compute(k, op, t, s_ws, s_algo)
            live = self.live
            if live > self.peak:
                self.peak = live
            if live + extra > self.dev_peak:
                self.dev_peak = live + extra
                self.peak_k = k
            if tl_add is not None:
                tl_add(live + extra)
        self.end()

    def end(self) -> None:
        steps, layers = self.steps, self.layers
        if self.expect_move is not None:
            raise InfeasiblePlan(len(steps), "end of plan", "the MOVE of the last in-place step is missing")
        missing = [layers[i].name for i in range(self.n) if self.g.has_backward(i) and not self.done_bwd[i]]
        if missing:
            raise InfeasiblePlan(len(steps), "end of plan",
                                 f"backward steps missing for {missing[:5]}{' ...' if len(missing) > 5 else ''}")
