"""Planned training vs DL4J's own fit(): memory, largest batch in a container, speed, prediction.

    .venv/bin/python benchmarks/planned_training.py [--networks deep_cnn_bn,resnet_graph,...]
        [--iterations 8] [--repeats 2] [--policies liveness,...] [--interleaved 8] [--container 1g]
        [--budgets min,0.4] [--configs DIR] [--out benchmarks/results/planned_training.json]
    .venv/bin/python benchmarks/planned_training.py --ceilings benchmarks/results/planned_training_zoo.json --configs DIR

Every run is the unchanged example job `org.pyd4j.examples.TrainSynthetic <net.json> <batch>
<iterations>` in a child JVM under pyd4j's agent; planned runs differ only by the agent's
`plan=FILE` (the job's fit() trains under the plan: no code change), fit() runs by nothing. The
job warms up at batch 1, then measures its own peak process memory (RSS, sampled every 2 ms)
above that idle JVM; iterations/s come from the agent's iteration events (the first measured
iteration left out). Figures, each a ratio against fit() measured in the same run:

- peak memory above the idle JVM, planned / fit() at the same batch, per plan policy (and over
  fit() with glibc's mmap threshold fixed as the planned trainer fixes it, to show what malloc
  alone changes);
- iterations/s, planned / fit();
- the largest batch that trains `--container-iterations` iterations inside a memory cgroup of
  one fixed size (`pyd4j.memory.container`), each batch under the JVM flags `pyd4j flags` gives
  for it: planned / fit();
- the planner's predicted peak for the plan vs the measured peak above the idle JVM;
- for the offloading plan (policy recompute, disk tier): the share of the tier's copy time hidden
  behind compute (1 - time the trainer waited on copies / time the copies ran).

`--budgets` replaces the per-policy plans by budget-driven plans (`choose_plan(graph, budget)`, no
offload tier: the fastest plan that fits, each convolution step in as many batch chunks as the
budget needs -- DL4J's dynamic convolution workspace): `min` is the smallest budget any plan fits
(every convolution in its least working memory), a number below 1 that fraction of this run's
fit() peak above the idle JVM (planned after the first fit() run), anything else a size ("200m").
The fit() run with glibc's mmap threshold fixed is left out then.

Runs alternate fit() and planned; medians of `--repeats`. One OpenMP thread (ND4J's default of
one per core makes runs on a shared machine erratic); the same for every run.

On a machine shared with other jobs, separate runs see different load: one run of a few minutes
can take 2-3x longer than the next (measured: three busy processes on the 2 cores slowed every
mode alike, resnet_graph batch 32 from ~4 s to ~15 s per iteration). `--interleaved N` adds a
speed figure that such load cannot skew: `org.pyd4j.examples.TrainInterleaved` trains two
copies of the network (same seed, same batches) in one JVM, one with fit(), one under the plan,
alternating iterations (fit, planned, planned, fit, ...), and compares the sums of their
iteration times (the first two iterations of each left out). In that JVM fit() also runs under
the planned trainer's glibc mmap threshold (it is set per process).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from harness import RESULTS, Recorder, amend, order
from harness.training import NETWORKS, SMALLEST, median, planned_graph, run, write_plan
from harness.training import interleaved as interleaved_run

DEFAULT_NETWORKS = {"deep_cnn_bn": 64, "deep_cnn30": 128, "resnet_graph": 32, "lenet": 128, "mlp": 256}
POLICIES = ("liveness", "recompute_in_memory", "recompute")
# "recompute" offloads: the job's trainer gets the CPU backend's disk tier (org.pyd4j.train.DiskTier)
# DL4J's fit() with glibc's mmap threshold fixed as the planned trainer fixes it: how much of the
# difference is malloc alone
MALLOC_FIXED = {"MALLOC_MMAP_THRESHOLD_": "131072"}
RESOLUTION = 8


def write_budget_plan(config: Path, batch: int, budget: str, fit_peak: float | None, folder: Path) -> dict:
    """The plan `choose_plan` picks for a budget (see `--budgets`), and what it chose."""
    from pyd4j.dl4j.graph import graph_from_dl4j_json, network_kind
    from pyd4j.dl4j.input_types import sidecar_shapes
    from pyd4j.dl4j.plan_file import write_plan as write
    from pyd4j.sched.choose import choose_plan, smallest_plan
    from pyd4j.sched.simulator import step_scratch
    from pyd4j.units import parse_bytes

    doc = json.loads(config.read_text())
    graph = graph_from_dl4j_json(doc, batch, sidecar_shapes(config))
    if budget == "min":
        plan, result = smallest_plan(graph, offload=False)
        cap = result.device_peak_bytes
    else:
        fraction = float(budget) if budget.replace(".", "", 1).isdigit() and float(budget) < 1 else None
        if fraction is not None and not fit_peak:
            raise RuntimeError(f"budget {budget} of fit()'s peak: fit() has not run yet")
        cap = int(fraction * fit_peak) if fraction is not None else parse_bytes(budget, "--budgets")
        plan, result = choose_plan(graph, cap, offload=False)
    path = folder / f"{config.stem}.{batch}.budget_{budget}.plan.json"
    if path.exists():
        path.unlink()
    write(path, plan, result, network_kind(doc), str(config), cap)
    counts = graph.framework.chunk_counts
    chunks = {f"{graph.layers[s.arg].name} {s.op.name}": counts[s.algo] for s in plan.steps if counts[s.algo] > 1}
    return {"path": str(path), "predicted_peak_bytes": result.device_peak_bytes, "budget_bytes": cap,
            "policy": plan.policy, "chunks": chunks,
            "predicted_working_memory_bytes": max(step_scratch(plan), default=0)}


def compare(config: Path, batch: int, iterations: int, repeats: int, folder: Path,
            policies: tuple[str, ...] = POLICIES, interleaved_iterations: int = 0,
            budgets: list[str] | None = None) -> dict:
    """fit() and each plan at `batch`, interleaved `repeats` times: medians and ratios against fit()."""
    name = config.stem
    if budgets:
        policies = tuple(f"budget_{b}" for b in budgets)
        plans: dict[str, dict] = {}
        modes = ["fit", *policies]
    else:
        plans = {p: write_plan(config, batch, p, folder) for p in policies}
        modes = ["fit", "fit_malloc_fixed", *policies]
    runs: dict[str, list[dict]] = {m: [] for m in modes}
    for i in range(repeats):
        for mode in order(modes, i):
            if mode.startswith("budget_") and mode not in plans:   # after the first fit() run
                plans[mode] = write_budget_plan(config, batch, mode[len("budget_"):],
                                                median(runs["fit"], "peak_above_idle_bytes"), folder)
            runs[mode].append(run(config, batch, iterations, plans.get(mode), folder,
                                  MALLOC_FIXED if mode == "fit_malloc_fixed" else None))
            r = runs[mode][-1]
            print(f"{name} b{batch} {mode}: peak above idle {r['peak_above_idle_bytes'] / 2**20:.1f} MiB, "
                  f"{r['iterations_per_s'] or 0:.2f} it/s", flush=True)
    fit_peak, fit_speed = median(runs["fit"], "peak_above_idle_bytes"), median(runs["fit"], "iterations_per_s")
    fixed_peak = median(runs.get("fit_malloc_fixed", []), "peak_above_idle_bytes")
    out = {"batch": batch, "iterations": iterations,
           "fit": {"peak_above_idle_bytes": fit_peak, "iterations_per_s": fit_speed},
           "planned": {}, "runs": runs}
    if not budgets:
        out["fit_malloc_fixed"] = {"peak_above_idle_bytes": fixed_peak,
                                   "iterations_per_s": median(runs["fit_malloc_fixed"], "iterations_per_s"),
                                   "peak_over_fit": fixed_peak / fit_peak if fit_peak else None}
    for p in policies:
        out["planned"][p] = planned_row(runs[p], plans[p], fit_peak, fit_speed, fixed_peak, bool(budgets))
    if interleaved_iterations:
        out["interleaved"] = {}
        for p in policies:
            r = out["interleaved"][p] = interleaved_run(config, batch, interleaved_iterations, plans[p], folder)
            print(f"{name} b{batch} {p} interleaved with fit(): speed {r['speed_over_fit']:.2f} of fit(), "
                  f"trainer's own work {100 * (r['trainer_overhead_share'] or 0):.1f} % of its iterations", flush=True)
    return out


def planned_row(runs: list[dict], plan: dict, fit_peak: float | None, fit_speed: float | None,
                fixed_peak: float | None, budget: bool) -> dict:
    """One plan's medians, against fit()'s and against its own prediction; the trainer's statistics."""
    peak, speed = median(runs, "peak_above_idle_bytes"), median(runs, "iterations_per_s")
    predicted = plan["predicted_peak_bytes"]
    trainer = runs[-1].get("trainer") or {}
    row = {"peak_above_idle_bytes": peak, "iterations_per_s": speed,
           "peak_over_fit": peak / fit_peak if fit_peak else None,
           "speed_over_fit": speed / fit_speed if speed and fit_speed else None,
           "peak_over_fit_malloc_fixed": peak / fixed_peak if fixed_peak else None,
           "predicted_peak_bytes": predicted,
           "predicted_over_measured": predicted / peak if peak else None,
           "trainer": runs[-1].get("trainer")}
    if budget:
        row.update({k: plan[k] for k in ("budget_bytes", "policy", "chunks", "predicted_working_memory_bytes")})
        row["working_memory_bytes"] = trainer.get("working_memory_bytes")
    tier = trainer.get("tier")
    if tier:
        row["disk_tier"] = {k: tier.get(k) for k in ("bytes_offloaded", "bytes_prefetched", "copy_s", "wait_s",
                                                     "hidden_share")}
    return row


def fits_in(config: Path, batch: int, iterations: int, container: int, plan: dict | None, folder: Path) -> str | None:
    """None when the job trains `iterations` iterations at `batch` inside a cgroup of `container`
    bytes, under the JVM flags `pyd4j flags` gives for this network and batch; else why not (a kill at
    the limit, or another failure, which the search must not take for one)."""
    from harness.training import job_command, job_env
    from pyd4j.memory.container import run_limited
    from pyd4j.memory.estimate import estimate
    from pyd4j.memory.flags import flags

    fs = flags(estimate(str(config), batch), total=container, refuse=False)
    timeline = Path(tempfile.mktemp(suffix=".jsonl"))   # not in `folder`: that may be the examples' own
    cmd = job_command(config, batch, iterations, timeline, plan["path"] if plan else None, flags=fs.args())
    r = run_limited(cmd, container, timeout=3600, env=job_env(fs.environment), cwd=str(folder))
    if timeline.exists():
        timeline.unlink()
    if r.ok and '"status": "ok"' in (r.stdout or ""):
        return None
    return r.describe() if not r.ok else f"the job reported a failure: {(r.stdout or '')[-300:]}"


def largest_batch(config: Path, iterations: int, container: int, policy: str | None, start: int, folder: Path) -> dict:
    """Bisection over batch sizes (training memory grows with the batch). Why each batch that did not
    fit failed is kept: a failure that is not the memory limit would make the search wrong."""
    tried: dict[int, bool] = {}
    failures: dict[int, str] = {}

    def ok(b: int) -> bool:
        plan = write_plan(config, b, policy, folder) if policy else None
        why = fits_in(config, b, iterations, container, plan, folder)
        tried[b] = why is None
        if why is not None:
            failures[b] = why
        print(f"  {config.stem} {policy or 'fit()'} batch {b}: "
              f"{'fits' if tried[b] else 'does not fit: ' + why[:160]}", flush=True)
        return tried[b]

    # 1/8 of the batch is resolution enough for a ratio
    return {"largest_batch": largest(ok, 0, start, RESOLUTION), "tried": tried, "failures": failures}


def largest(ok, lo: int, hi: int, resolution: int) -> int:
    """The largest batch for which `ok` holds (it holds up to some batch and not beyond): doubling from
    `hi` while it holds, then bisection to 1/`resolution` of the batch; `lo` is known to hold (0: none)."""
    while ok(hi):
        lo, hi = hi, hi * 2
    while hi - lo > max(1, lo // resolution):
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def largest_fit_batch(row: dict) -> int:
    """fit()'s largest batch in a largest-batch summary row: the largest of its searches."""
    return row["fit"] if isinstance(row["fit"], int) else max(row["fit"])


def ceiling(config: Path, fit_batch: int, planned_batch: int) -> dict:
    """How far any plan could go in the same container under the planner's model of DL4J's layers:
    the largest batch whose lower bound (`pyd4j.sched.bounds`: resident state plus the one step that
    needs most, each DL4J layer run as DL4J runs it) fits in what the smallest plan is predicted to
    hold at the largest batch it trained at (the network's floor: its sliced steps included,
    `network_lower_bound`). Where it is below the goal, no plan reaches the goal; where the plan is
    well above its bound, a better plan could."""
    from pyd4j.dl4j.probe import of_configuration
    from pyd4j.sched.choose import network_lower_bound as lower_bound
    from pyd4j.sched.choose import smallest_plan

    probe = of_configuration(json.loads(config.read_text()), str(config))
    graph = planned_graph(config, planned_batch, probe)
    budget = smallest_plan(graph, offload=False)[1].device_peak_bytes
    lb = lower_bound(graph)
    lo = largest(lambda b: lower_bound(planned_graph(config, b, probe)).lower_bound_bytes <= budget,
                 planned_batch, 2 * planned_batch, 8 * RESOLUTION)
    return {"smallest_plan_predicted_bytes": budget, "lower_bound_bytes": lb.lower_bound_bytes,
            "plan_over_bound": round(budget / lb.lower_bound_bytes, 3),
            "bound_step": f"{lb.l_peak_step} {lb.l_peak_layer}", "bound_step_bytes": lb.l_peak_bytes,
            "resident_bytes": lb.resident_bytes, "bound_batch": lo,
            "bound_over_fit": round(lo / fit_batch, 2), "measured_over_fit": round(planned_batch / fit_batch, 2)}


def ceilings(path: Path, networks: Path) -> None:
    """Add each searched model's `ceiling` to the summary of a largest-batch results file."""
    doc = json.loads(path.read_text())
    for name, row in doc["summary"].items():
        if not isinstance(row, dict) or "smallest" not in row:
            continue
        row["ceiling"] = ceiling(networks / f"{name}.json", largest_fit_batch(row), row["smallest"])
        print(name, row["ceiling"], flush=True)
    doc["summary"]["ceiling_note"] = (
        "ceiling: the largest batch whose lower bound (pyd4j.sched.bounds) fits in the smallest plan's predicted "
        "peak at its largest batch (bisection to 1/64); bound_over_fit against the largest fit() batch of any search")
    amend(path, doc, indent=2)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--networks", default=",".join(DEFAULT_NETWORKS))
    ap.add_argument("--iterations", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--policies", default=",".join(POLICIES), help="plan policies to run (comma-separated)")
    ap.add_argument("--interleaved", type=int, default=0, metavar="N",
                    help="also compare speed in one JVM, fit() and planned iterations alternating, N iterations each")
    ap.add_argument("--container", default="1g", help="memory cgroup size for the largest-batch search")
    ap.add_argument("--container-networks", default="deep_cnn_bn,resnet_graph")
    ap.add_argument("--container-start", type=int, default=16, help="first batch of the largest-batch search")
    ap.add_argument("--container-iterations", type=int, default=5)
    ap.add_argument("--container-policy", default="recompute_in_memory", choices=[*POLICIES, *SMALLEST],
                    help="the plan of the planned side of the largest-batch search (smallest: "
                         "smallest_plan, convolutions in batch slices; smallest_offload: the same, and it may "
                         "offload to the CPU backend's disk tier)")
    ap.add_argument("--batches", default="", help="name=batch,... overrides of the default batch sizes")
    ap.add_argument("--configs", metavar="DIR",
                    help="read the networks from DIR (<name>.json and its .input.json sidecar) instead of "
                         "the example networks: the zoo models benchmarks/memory_model.py --configs kept")
    ap.add_argument("--out", default=str(RESULTS / "planned_training.json"))
    ap.add_argument("--budgets", default="",
                    help="budget-driven plans instead of the per-policy ones: min, a fraction of fit()'s "
                         "peak (0.4), or a size (200m), comma-separated")
    ap.add_argument("--known", metavar="FILE",
                    help="take fit()'s largest batch from FILE's largest-batch summary instead of searching it "
                         "again, and start the planned search at the batch FILE's smallest plan reached")
    ap.add_argument("--ceilings", metavar="FILE",
                    help="only add to FILE's largest-batch summary how far any plan could go (see ceiling); "
                         "needs --configs")
    return ap


def container_search(args: argparse.Namespace, networks: Path, container: int, folder: Path) -> dict:
    """fit()'s and the plan's largest batch in a cgroup of `container` bytes, per network."""
    out = {}
    known = json.loads(Path(args.known).read_text())["summary"] if args.known else {}
    for name in filter(None, args.container_networks.split(",")):
        config = networks / f"{name}.json"
        if name in known:   # fit()'s side as an earlier run of the same search found it
            row = known[name]
            fit = {"largest_batch": largest_fit_batch(row), "from": args.known}
            start = row.get("smallest", fit["largest_batch"])
        else:
            fit = largest_batch(config, args.container_iterations, container, None, args.container_start, folder)
            start = fit["largest_batch"]
        planned = largest_batch(config, args.container_iterations, container, args.container_policy,
                                max(16, start), folder)
        out[name] = {
            "container_bytes": container, "iterations": args.container_iterations,
            "fit": fit, args.container_policy: planned, "policy": args.container_policy,
            "planned_over_fit": planned["largest_batch"] / fit["largest_batch"] if fit["largest_batch"] else None}
    return out


def main() -> None:
    from pyd4j.units import parse_bytes

    ap = parser()
    args = ap.parse_args()
    container = parse_bytes(args.container, "--container")
    networks = Path(args.configs).resolve() if args.configs else NETWORKS
    if args.ceilings:
        if not args.configs:
            ap.error("--ceilings needs --configs DIR, the folder of the models' configurations")
        ceilings(Path(args.ceilings), networks)
        return
    policies = tuple(filter(None, args.policies.split(",")))
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        ap.error(f"--policies: unknown {', '.join(unknown)} (choose from {', '.join(POLICIES)})")
    batches = dict(DEFAULT_NETWORKS)
    for item in filter(None, args.batches.split(",")):
        key, _, value = item.partition("=")
        batches[key] = int(value)
    rec = Recorder("planned_training")
    rec.doc.update({"configs": "examples/networks" if not args.configs else
                    "DL4J zoo models built by benchmarks/memory_model.py --configs", "repeats": args.repeats,
                    "policies": list(policies), "interleaved_iterations": args.interleaved, "omp_threads": 1,
                    "networks": {}, "container": {}})
    with tempfile.TemporaryDirectory(prefix="pyd4j-planned-") as tmp:
        folder = Path(tmp)
        for name in filter(None, args.networks.split(",")):
            rec.doc["networks"][name] = compare(networks / f"{name}.json", batches[name], args.iterations,
                                                args.repeats, folder, policies, args.interleaved,
                                                [b for b in args.budgets.split(",") if b])
        rec.doc["container"] = container_search(args, networks, container, folder)
    print(f"wrote {rec.write(args.out, indent=2)}")


if __name__ == "__main__":
    main()
