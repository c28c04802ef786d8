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
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NETWORKS = ROOT / "examples" / "networks"
DEFAULT_NETWORKS = {"deep_cnn_bn": 64, "deep_cnn30": 128, "resnet_graph": 32, "lenet": 128, "mlp": 256}
POLICIES = ("liveness", "recompute_in_memory", "recompute")
# "recompute" offloads: the job's trainer gets the CPU backend's disk tier (org.pyd4j.train.DiskTier)
# DL4J's fit() with glibc's mmap threshold fixed as the planned trainer fixes it: how much of the
# difference is malloc alone
MALLOC_FIXED = {"MALLOC_MMAP_THRESHOLD_": "131072"}
SMALLEST = ("smallest", "smallest_offload")
HEAP = "512m"
RESOLUTION = 8
EXTRA_ENV: dict[str, str] = json.loads(os.environ.get("PYD4J_BENCH_ENV", "{}"))


def configuration(name: str) -> tuple[Path, dict]:
    """A network's configuration file and its parsed document."""
    config = NETWORKS / f"{name}.json"
    return config, json.loads(config.read_text())


def planned_graph(name: str, batch: int, probe=None):
    """The network as `pyd4j plan` plans it: DL4J probed where the planner has no model of a layer
    (`probe`: one already built for this network, reused: each new one builds the network in this
    process's JVM)."""
    from pyd4j.dl4j.input_types import sidecar_shapes
    from pyd4j.dl4j.probe import of_configuration
    from pyd4j.dl4j.graph import probed_graph

    config, doc = configuration(name)
    return probed_graph(doc, batch, sidecar_shapes(config), probe=probe or of_configuration(doc, str(config)))


def write_plan(name: str, batch: int, policy: str, folder: Path) -> dict:
    from pyd4j.dl4j.graph import network_kind
    from pyd4j.sched.choose import choose_plan, smallest_plan
    from pyd4j.dl4j.plan_file import write_plan as write

    config, doc = configuration(name)
    graph = planned_graph(name, batch)
    # "smallest": every convolution in its least working memory (batch slices), nothing offloaded;
    # "smallest_offload": the same, and the smallest plan may offload (the CPU backend's disk tier)
    if policy in SMALLEST:
        plan, result = smallest_plan(graph, offload=policy == "smallest_offload")
    else:
        plan, result = choose_plan(graph, policy=policy, offload=True)
    path = folder / f"{name}.{batch}.{policy}.plan.json"
    if path.exists():
        path.unlink()
    write(path, plan, result, network_kind(doc), str(config))
    return {"path": str(path), "predicted_peak_bytes": result.device_peak_bytes}


def write_budget_plan(name: str, batch: int, budget: str, fit_peak: float | None, folder: Path) -> dict:
    """The plan `choose_plan` picks for a budget (see `--budgets`), and what it chose."""
    from pyd4j.dl4j.input_types import sidecar_shapes
    from pyd4j.dl4j.graph import graph_from_dl4j_json, network_kind
    from pyd4j.sched.choose import choose_plan, smallest_plan
    from pyd4j.dl4j.plan_file import write_plan as write
    from pyd4j.units import parse_bytes

    config = NETWORKS / f"{name}.json"
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
    path = folder / f"{name}.{batch}.budget_{budget}.plan.json"
    if path.exists():
        path.unlink()
    write(path, plan, result, network_kind(doc), str(config), cap)
    counts = graph.profile.chunk_counts
    chunks = {f"{graph.layers[s.arg].name} {s.op.name}": counts[s.algo] for s in plan.steps if counts[s.algo] > 1}
    return {"path": str(path), "predicted_peak_bytes": result.device_peak_bytes, "budget_bytes": cap,
            "policy": plan.policy, "chunks": chunks,
            "predicted_working_memory_bytes": max(_scratch(plan), default=0)}


def _scratch(plan) -> list[int]:
    from pyd4j.sched.simulator import step_scratch

    return step_scratch(plan)


def job_command(name: str, batch: int, iterations: int, timeline: Path, plan: str | None,
                flags: list[str] | None = None, quiet: bool = False) -> list[str]:
    from pyd4j.jvm import JvmOptions, examples_jar, java_command
    from pyd4j.profile.launch import agent_option
    from pyd4j.profile.speed import QUIET_AGENT

    # Heap fixed and pre-touched: it is resident in the idle baseline, so the peak above the idle
    # JVM is what training adds off-heap (ND4J's arrays and workspaces).
    options = JvmOptions.of(heap_max=HEAP, heap_initial=HEAP, extra=["-XX:+AlwaysPreTouch"]) if flags is None \
        else JvmOptions.of(extra=flags)
    agent = agent_option(100, out=timeline, plan=Path(plan) if plan else None)
    # quiet: the agent times iterations but takes no live points, whose full collections would free garbage
    # DL4J's unchanged fit() keeps
    quieter = ["-Dpyd4j.agent=" + ",".join(QUIET_AGENT)] if quiet else []
    return java_command(options, "org.pyd4j.examples.TrainSynthetic",
                        [str(NETWORKS / f"{name}.json"), str(batch), str(iterations)],
                        extra_classpath=[examples_jar()], jvm_args=[agent, *quieter])


def env(extra: dict[str, str] | None = None) -> dict[str, str]:
    return dict(os.environ, OMP_NUM_THREADS="1", **EXTRA_ENV, **(extra or {}))


def iterations_per_s(timeline: Path, warmup: int) -> float | None:
    """From the agent's iteration events after the job's warm-up, the first measured one left out."""
    times = []
    for line in timeline.read_text().splitlines():
        try:
            e = json.loads(line)
        except json.JSONDecodeError:
            continue
        if e.get("type") == "iter" and e.get("n", 0) > warmup + 1:
            times.append(e["t"] / 1000.0)
    return (len(times) - 1) / (times[-1] - times[0]) if len(times) >= 2 and times[-1] > times[0] else None


def plan_stats(timeline: Path) -> dict | None:
    stats = None
    for line in timeline.read_text().splitlines():
        if '"plan_stats"' in line:
            try:
                stats = json.loads(line).get("stats") or stats
            except json.JSONDecodeError:
                pass
    return stats


def run(name: str, batch: int, iterations: int, plan: dict | None, folder: Path,
        extra_env: dict[str, str] | None = None, quiet: bool = False) -> dict:
    timeline = Path(tempfile.mktemp(suffix=".jsonl"))   # not in `folder`: that may be the examples' own
    cmd = job_command(name, batch, iterations, timeline, plan["path"] if plan else None, quiet=quiet)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env=env(extra_env), cwd=folder)
    lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"{name} batch {batch} {'planned' if plan else 'fit()'} failed (exit {out.returncode}): "
                           f"{(out.stdout + out.stderr)[-2000:]}")
    r = json.loads(lines[-1])
    doc = {"peak_above_idle_bytes": r["peak_physical_bytes"] - r["baseline_physical_bytes"],
           # the same less the JVM's own committed heap and non-heap (JIT code, metaspace): ND4J's native memory
           "native_above_idle_bytes": r["peak_native_bytes"] - r["baseline_native_bytes"],
           "workspaces": r.get("workspaces", {}),
           "peak_physical_bytes": r["peak_physical_bytes"], "baseline_physical_bytes": r["baseline_physical_bytes"],
           "seconds": r["seconds"], "iterations_per_s": iterations_per_s(timeline, 2)}
    if plan:
        doc["trainer"] = plan_stats(timeline)
    timeline.unlink()
    return doc


def median(rows: list[dict], key: str) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def train_interleaved(name: str, batch: int, iterations: int, plan: dict, folder: Path, sides: str = "both",
                      extra: tuple[str, ...] = ()) -> dict:
    """One TrainInterleaved JVM (both sides alternating, or one side alone); its JSON result."""
    from pyd4j.jvm import JvmOptions, examples_jar, java_command

    options = JvmOptions.of(heap_max=HEAP, heap_initial=HEAP, extra=["-XX:+AlwaysPreTouch", *extra])
    cmd = java_command(options, "org.pyd4j.examples.TrainInterleaved",
                       [str(NETWORKS / f"{name}.json"), str(batch), str(iterations), plan["path"], sides],
                       extra_classpath=[examples_jar()])
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env=env(), cwd=folder)
    lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
    r = json.loads(lines[-1]) if lines else {}
    if out.returncode != 0 or r.get("status") != "ok":
        raise RuntimeError(f"{name} batch {batch} TrainInterleaved ({sides}) failed (exit {out.returncode}): "
                           f"{(out.stdout + out.stderr)[-2000:]}")
    return r


def interleaved(name: str, batch: int, iterations: int, plan: dict, folder: Path, warmup: int = 2) -> dict:
    """fit() and planned iterations alternating in one JVM (TrainInterleaved): the speed ratio
    from the sums of their iteration times after `warmup` iterations of each."""
    r = train_interleaved(name, batch, iterations, plan, folder)
    fit_s, planned_s = r["fit_s"][warmup:], r["planned_s"][warmup:]
    trainer = r.get("trainer") or {}
    it_s, layer_s = trainer.get("iteration_s"), trainer.get("layer_s")
    return {"iterations": iterations, "warmup": warmup, "fit_s": r["fit_s"], "planned_s": r["planned_s"],
            "speed_over_fit": sum(fit_s) / sum(planned_s) if planned_s and sum(planned_s) > 0 else None,
            "pairwise_median": statistics.median(f / p for f, p in zip(fit_s, planned_s)) if planned_s else None,
            "trainer_overhead_share": (it_s - layer_s) / it_s if it_s and layer_s is not None else None,
            "trainer": trainer}


def separate(name: str, batch: int, iterations: int, plan: dict, folder: Path, rounds: int, warmup: int = 2) -> dict:
    """fit() and planned training in separate JVMs (TrainInterleaved with one side), alternating
    fit, planned, planned, fit, ... `rounds` times: the speed a user sees, where no planned iteration
    follows a fit() iteration in the same process. The fit() side runs with glibc's malloc as a
    plain job has it (-Dpyd4j.train.mallopt=false); the planned side as the trainer sets it."""
    times: dict[str, list[float]] = {"fit": [], "planned": []}
    for r in range(rounds):
        for side in (("fit", "planned") if r % 2 == 0 else ("planned", "fit")):
            extra = ("-Dpyd4j.train.mallopt=false",) if side == "fit" else ()
            out = train_interleaved(name, batch, iterations, plan, folder, sides=side, extra=extra)
            times[side].append(sum(out[f"{side}_s"][warmup:]))
    ratios = [f / p for f, p in zip(times["fit"], times["planned"])]
    return {"rounds": rounds, "iterations": iterations, "warmup": warmup, "fit_run_s": times["fit"],
            "planned_run_s": times["planned"], "speed_over_fit": statistics.median(ratios),
            "run_ratio_range": [min(ratios), max(ratios)]}


def compare(name: str, batch: int, iterations: int, repeats: int, folder: Path,
            policies: tuple[str, ...] = POLICIES, interleaved_iterations: int = 0,
            budgets: list[str] | None = None) -> dict:
    if budgets:
        policies = tuple(f"budget_{b}" for b in budgets)
        plans: dict[str, dict] = {}
        runs: dict[str, list[dict]] = {"fit": [], **{p: [] for p in policies}}
    else:
        plans = {p: write_plan(name, batch, p, folder) for p in policies}
        runs = {"fit": [], "fit_malloc_fixed": [], **{p: [] for p in policies}}
    modes = list(runs)
    for i in range(repeats):
        for mode in (modes if i % 2 == 0 else modes[::-1]):
            if mode.startswith("budget_") and mode not in plans:   # after the first fit() run
                plans[mode] = write_budget_plan(name, batch, mode[len("budget_"):],
                                                median(runs["fit"], "peak_above_idle_bytes"), folder)
            runs[mode].append(run(name, batch, iterations, plans.get(mode), folder,
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
        peak, speed = median(runs[p], "peak_above_idle_bytes"), median(runs[p], "iterations_per_s")
        predicted = plans[p]["predicted_peak_bytes"]
        out["planned"][p] = {
            "peak_above_idle_bytes": peak, "iterations_per_s": speed,
            "peak_over_fit": peak / fit_peak if fit_peak else None,
            "speed_over_fit": speed / fit_speed if speed and fit_speed else None,
            "peak_over_fit_malloc_fixed": peak / fixed_peak if fixed_peak else None,
            "predicted_peak_bytes": predicted,
            "predicted_over_measured": predicted / peak if peak else None,
            "trainer": runs[p][-1].get("trainer"),
        }
        if budgets:
            out["planned"][p].update({k: plans[p][k] for k in (
                "budget_bytes", "policy", "chunks", "predicted_working_memory_bytes")})
            wm = (runs[p][-1].get("trainer") or {}).get("working_memory_bytes")
            out["planned"][p]["working_memory_bytes"] = wm
        tier = (runs[p][-1].get("trainer") or {}).get("tier")
        if tier:
            out["planned"][p]["disk_tier"] = {k: tier.get(k) for k in (
                "bytes_offloaded", "bytes_prefetched", "copy_s", "wait_s", "hidden_share")}
    if interleaved_iterations:
        out["interleaved"] = {}
        for p in policies:
            r = out["interleaved"][p] = interleaved(name, batch, interleaved_iterations, plans[p], folder)
            print(f"{name} b{batch} {p} interleaved with fit(): speed {r['speed_over_fit']:.2f} of fit(), "
                  f"trainer's own work {100 * (r['trainer_overhead_share'] or 0):.1f} % of its iterations", flush=True)
    return out


def fits_in(name: str, batch: int, iterations: int, container: int, plan: dict | None, folder: Path) -> str | None:
    """None when the job trains `iterations` iterations at `batch` inside a cgroup of `container`
    bytes, under the JVM flags `pyd4j flags` gives for this network and batch; else why not (a kill at
    the limit, or another failure, which the search must not take for one)."""
    from pyd4j.memory.container import run_limited
    from pyd4j.memory.estimate import estimate
    from pyd4j.memory.flags import flags

    fs = flags(estimate(str(NETWORKS / f"{name}.json"), batch), total=container, refuse=False)
    timeline = Path(tempfile.mktemp(suffix=".jsonl"))   # not in `folder`: that may be the examples' own
    cmd = job_command(name, batch, iterations, timeline, plan["path"] if plan else None, flags=fs.args())
    r = run_limited(cmd, container, timeout=3600, env=env(fs.environment), cwd=str(folder))
    if timeline.exists():
        timeline.unlink()
    if r.ok and '"status": "ok"' in (r.stdout or ""):
        return None
    return r.describe() if not r.ok else f"the job reported a failure: {(r.stdout or '')[-300:]}"


def largest_batch(name: str, iterations: int, container: int, policy: str | None, start: int, folder: Path) -> dict:
    """Bisection over batch sizes (training memory grows with the batch). Why each batch that did not
    fit failed is kept: a failure that is not the memory limit would make the search wrong."""
    tried: dict[int, bool] = {}
    failures: dict[int, str] = {}

    def ok(b: int) -> bool:
        plan = write_plan(name, b, policy, folder) if policy else None
        why = fits_in(name, b, iterations, container, plan, folder)
        tried[b] = why is None
        if why is not None:
            failures[b] = why
        print(f"  {name} {policy or 'fit()'} batch {b}: {'fits' if tried[b] else 'does not fit: ' + why[:160]}", flush=True)
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


def ceiling(name: str, fit_batch: int, planned_batch: int) -> dict:
    """How far any plan could go in the same container under the planner's model of DL4J's layers:
    the largest batch whose lower bound (`pyd4j.sched.bounds`: resident state plus the one step that
    needs most, each DL4J layer run as DL4J runs it) fits in what the smallest plan is predicted to
    hold at the largest batch it trained at. Where it is below the goal, no plan reaches the goal
    with DL4J's own layer code; where the plan is well above its bound, a better plan could."""
    from pyd4j.dl4j.probe import of_configuration
    from pyd4j.sched.bounds import lower_bound
    from pyd4j.sched.choose import smallest_plan

    config, doc = configuration(name)
    probe = of_configuration(doc, str(config))
    graph = planned_graph(name, planned_batch, probe)
    budget = smallest_plan(graph, offload=False)[1].device_peak_bytes
    lb = lower_bound(graph)
    lo = largest(lambda b: lower_bound(planned_graph(name, b, probe)).lower_bound_bytes <= budget,
                 planned_batch, 2 * planned_batch, 8 * RESOLUTION)
    return {"smallest_plan_predicted_bytes": budget, "lower_bound_bytes": lb.lower_bound_bytes,
            "plan_over_bound": round(budget / lb.lower_bound_bytes, 3),
            "bound_step": f"{lb.l_peak_step} {lb.l_peak_layer}", "bound_step_bytes": lb.l_peak_bytes,
            "resident_bytes": lb.resident_bytes, "bound_batch": lo,
            "bound_over_fit": round(lo / fit_batch, 2), "measured_over_fit": round(planned_batch / fit_batch, 2)}


def ceilings(path: Path) -> None:
    """Add each searched model's `ceiling` to the summary of a largest-batch results file."""
    doc = json.loads(path.read_text())
    for name, row in doc["summary"].items():
        if not isinstance(row, dict) or "smallest" not in row:
            continue
        row["ceiling"] = ceiling(name, largest_fit_batch(row), row["smallest"])
        print(name, row["ceiling"], flush=True)
    doc["summary"]["ceiling_note"] = (
        "ceiling: the largest batch whose lower bound (pyd4j.sched.bounds) fits in the smallest plan's predicted "
        "peak at its largest batch (bisection to 1/64); bound_over_fit against the largest fit() batch of any search")
    path.write_text(json.dumps(doc, indent=2) + "\n")


def main() -> None:
    from pyd4j.units import parse_bytes

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", default=",".join(DEFAULT_NETWORKS))
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--policies", default=",".join(POLICIES), help="plan policies to run (comma-separated)")
    parser.add_argument("--interleaved", type=int, default=0, metavar="N",
                        help="also compare speed in one JVM, fit() and planned iterations alternating, "
                             "N iterations each")
    parser.add_argument("--container", default="1g", help="memory cgroup size for the largest-batch search")
    parser.add_argument("--container-networks", default="deep_cnn_bn,resnet_graph")
    parser.add_argument("--container-start", type=int, default=16, help="first batch of the largest-batch search")
    parser.add_argument("--container-iterations", type=int, default=5)
    parser.add_argument("--container-policy", default="recompute_in_memory", choices=[*POLICIES, *SMALLEST],
                        help="the plan of the planned side of the largest-batch search (smallest: "
                             "smallest_plan, convolutions in batch slices; smallest_offload: the same, and it may "
                             "offload to the CPU backend's disk tier)")
    parser.add_argument("--batches", default="", help="name=batch,... overrides of the default batch sizes")
    parser.add_argument("--configs", metavar="DIR",
                        help="read the networks from DIR (<name>.json and its .input.json sidecar) instead of "
                             "the example networks: the zoo models benchmarks/memory_model.py --configs kept")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "planned_training.json"))
    parser.add_argument("--budgets", default="",
                        help="budget-driven plans instead of the per-policy ones: min, a fraction of fit()'s "
                             "peak (0.4), or a size (200m), comma-separated")
    parser.add_argument("--known", metavar="FILE",
                        help="take fit()'s largest batch from FILE's largest-batch summary instead of searching it "
                             "again, and start the planned search at the batch FILE's smallest plan reached")
    parser.add_argument("--ceilings", metavar="FILE",
                        help="only add to FILE's largest-batch summary how far any plan could go (see ceiling); "
                             "needs --configs")
    args = parser.parse_args()

    container = parse_bytes(args.container, "--container")
    global NETWORKS
    if args.configs:
        NETWORKS = Path(args.configs).resolve()
    if args.ceilings:
        if not args.configs:
            parser.error("--ceilings needs --configs DIR, the folder of the models' configurations")
        ceilings(Path(args.ceilings))
        return
    policies = tuple(filter(None, args.policies.split(",")))
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        parser.error(f"--policies: unknown {', '.join(unknown)} (choose from {', '.join(POLICIES)})")
    for item in filter(None, args.batches.split(",")):
        key, _, value = item.partition("=")
        DEFAULT_NETWORKS[key] = int(value)
    doc = {"benchmark": "planned_training", "configs": "examples/networks" if not args.configs else
           "DL4J zoo models built by benchmarks/memory_model.py --configs", "repeats": args.repeats, "policies": list(policies),
           "interleaved_iterations": args.interleaved, "networks": {}, "container": {},
           "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "omp_threads": 1,
                       "shared": "other jobs ran on this machine while it measured",
                       "load_avg_1m_at_start": os.getloadavg()[0]}}
    with tempfile.TemporaryDirectory(prefix="pyd4j-planned-") as tmp:
        folder = Path(tmp)
        for name in filter(None, args.networks.split(",")):
            doc["networks"][name] = compare(name, DEFAULT_NETWORKS[name], args.iterations, args.repeats, folder,
                                            policies, args.interleaved, [b for b in args.budgets.split(",") if b])
        known = json.loads(Path(args.known).read_text())["summary"] if args.known else {}
        for name in filter(None, args.container_networks.split(",")):
            if name in known:   # fit()'s side as an earlier run of the same search found it
                row = known[name]
                fit = {"largest_batch": largest_fit_batch(row), "from": args.known}
                start = row.get("smallest", fit["largest_batch"])
            else:
                fit = largest_batch(name, args.container_iterations, container, None, args.container_start, folder)
                start = fit["largest_batch"]
            planned = largest_batch(name, args.container_iterations, container, args.container_policy,
                                    max(16, start), folder)
            doc["container"][name] = {
                "container_bytes": container, "iterations": args.container_iterations,
                "fit": fit, args.container_policy: planned, "policy": args.container_policy,
                "planned_over_fit": planned["largest_batch"] / fit["largest_batch"] if fit["largest_batch"] else None}
    doc["machine"]["load_avg_1m_at_end"] = os.getloadavg()[0]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
