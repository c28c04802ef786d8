"""The measuring job of the training benchmarks: the unchanged example job `org.pyd4j.examples.TrainSynthetic
<net.json> <batch> <iterations>` in a child JVM under pyd4j's agent (a plan given by the agent's `plan=FILE`),
and TrainInterleaved, fit() and planned training in one JVM. Networks are named by their configuration
file (`<name>.json` with its `.input.json` sidecar)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from .ab import interleave
from .record import ROOT

NETWORKS = ROOT / "examples" / "networks"
HEAP = "512m"
# "smallest": every convolution in its least working memory (batch slices), nothing offloaded;
# "smallest_offload": the same, and the smallest plan may offload (the CPU backend's disk tier)
SMALLEST = ("smallest", "smallest_offload")
# PYD4J_BENCH_ENV: extra environment of every measuring job (e.g. a malloc setting under test)
EXTRA_ENV: dict[str, str] = json.loads(os.environ.get("PYD4J_BENCH_ENV", "{}"))


def job_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The jobs' environment: one OpenMP thread (ND4J's default of one per core makes runs on a shared
    machine erratic), PYD4J_BENCH_ENV, then `extra`."""
    return dict(os.environ, OMP_NUM_THREADS="1", **EXTRA_ENV, **(extra or {}))


def planned_graph(config: Path, batch: int, probe: Any = None) -> Any:
    """The network as `pyd4j plan` plans it: DL4J probed where the planner has no model of a layer
    (`probe`: one already built for this network, reused: each new one builds the network in this
    process's JVM)."""
    from pyd4j.dl4j.graph import probed_graph
    from pyd4j.dl4j.input_types import sidecar_shapes
    from pyd4j.dl4j.probe import of_configuration

    doc = json.loads(config.read_text())
    return probed_graph(doc, batch, sidecar_shapes(config), probe=probe or of_configuration(doc, str(config)))


def write_plan(config: Path, batch: int, policy: str, folder: Path) -> dict[str, Any]:
    """The plan of `policy` (a planner policy, or one of SMALLEST) at `batch`, written to `folder`:
    {"path", "predicted_peak_bytes"}."""
    from pyd4j.dl4j.graph import network_kind
    from pyd4j.dl4j.plan_file import write_plan as write
    from pyd4j.sched.choose import choose_plan, smallest_plan

    doc = json.loads(config.read_text())
    graph = planned_graph(config, batch)
    if policy in SMALLEST:
        plan, result = smallest_plan(graph, offload=policy == "smallest_offload")
    else:
        plan, result = choose_plan(graph, policy=policy, offload=True)
    path = folder / f"{config.stem}.{batch}.{policy}.plan.json"
    if path.exists():
        path.unlink()
    write(path, plan, result, network_kind(doc), str(config))
    return {"path": str(path), "predicted_peak_bytes": result.device_peak_bytes}


def job_command(config: Path, batch: int, iterations: int, timeline: Path, plan: str | None,
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
    return java_command(options, "org.pyd4j.examples.TrainSynthetic", [str(config), str(batch), str(iterations)],
                        extra_classpath=[examples_jar()], jvm_args=[agent, *quieter])


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


def run(config: Path, batch: int, iterations: int, plan: dict | None, folder: Path,
        extra_env: dict[str, str] | None = None, quiet: bool = False) -> dict[str, Any]:
    """One TrainSynthetic job (in `folder`): its peak above the idle JVM, native and RSS, its workspaces,
    iterations/s, and the planned trainer's statistics where it ran a plan."""
    name = config.stem
    timeline = Path(tempfile.mktemp(suffix=".jsonl"))   # not in `folder`: that may be the examples' own
    cmd = job_command(config, batch, iterations, timeline, plan["path"] if plan else None, quiet=quiet)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env=job_env(extra_env), cwd=folder)
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


def train_interleaved(config: Path, batch: int, iterations: int, plan: dict, folder: Path, sides: str = "both",
                      extra: tuple[str, ...] = ()) -> dict:
    """One TrainInterleaved JVM (both sides alternating, or one side alone); its JSON result."""
    from pyd4j.jvm import JvmOptions, examples_jar, java_command

    options = JvmOptions.of(heap_max=HEAP, heap_initial=HEAP, extra=["-XX:+AlwaysPreTouch", *extra])
    cmd = java_command(options, "org.pyd4j.examples.TrainInterleaved",
                       [str(config), str(batch), str(iterations), plan["path"], sides],
                       extra_classpath=[examples_jar()])
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env=job_env(), cwd=folder)
    lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
    r = json.loads(lines[-1]) if lines else {}
    if out.returncode != 0 or r.get("status") != "ok":
        raise RuntimeError(f"{config.stem} batch {batch} TrainInterleaved ({sides}) failed (exit {out.returncode}): "
                           f"{(out.stdout + out.stderr)[-2000:]}")
    return r


def interleaved(config: Path, batch: int, iterations: int, plan: dict, folder: Path, warmup: int = 2) -> dict:
    """fit() and planned iterations alternating in one JVM (TrainInterleaved): the speed ratio
    from the sums of their iteration times after `warmup` iterations of each."""
    r = train_interleaved(config, batch, iterations, plan, folder)
    fit_s, planned_s = r["fit_s"][warmup:], r["planned_s"][warmup:]
    trainer = r.get("trainer") or {}
    it_s, layer_s = trainer.get("iteration_s"), trainer.get("layer_s")
    return {"iterations": iterations, "warmup": warmup, "fit_s": r["fit_s"], "planned_s": r["planned_s"],
            "speed_over_fit": sum(fit_s) / sum(planned_s) if planned_s and sum(planned_s) > 0 else None,
            "pairwise_median": statistics.median(f / p for f, p in zip(fit_s, planned_s)) if planned_s else None,
            "trainer_overhead_share": (it_s - layer_s) / it_s if it_s and layer_s is not None else None,
            "trainer": trainer}


def separate(config: Path, batch: int, iterations: int, plan: dict, folder: Path, rounds: int,
             warmup: int = 2) -> dict:
    """fit() and planned training in separate JVMs (TrainInterleaved with one side), interleaved
    `rounds` times: the speed a user sees, where no planned iteration follows a fit() iteration in the
    same process. The fit() side runs with glibc's malloc as a plain job has it
    (-Dpyd4j.train.mallopt=false); the planned side as the trainer sets it."""
    def side_s(side: str, _round: int) -> float:
        extra = ("-Dpyd4j.train.mallopt=false",) if side == "fit" else ()
        out = train_interleaved(config, batch, iterations, plan, folder, sides=side, extra=extra)
        return sum(out[f"{side}_s"][warmup:])

    times = interleave(("fit", "planned"), rounds, side_s)
    ratios = [f / p for f, p in zip(times["fit"], times["planned"])]
    return {"rounds": rounds, "iterations": iterations, "warmup": warmup, "fit_run_s": times["fit"],
            "planned_run_s": times["planned"], "speed_over_fit": statistics.median(ratios),
            "run_ratio_range": [min(ratios), max(ratios)]}
