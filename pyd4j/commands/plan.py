"""`pyd4j plan`: SuperNeurons-style memory plans for a network on a device, simulated."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from pyd4j import inputs
from pyd4j.commands import _params as params
from pyd4j.commands._plan_inputs import (_probe, _read_network, _refuse_conflicts, check_cupy, check_plan_options,
                                        cost_model, graph_builder, network_file)
from pyd4j.commands._plan_report import (dl4j_fit, document, planned_job_figure, print_extras, print_minimum,
                                         run_policies)
from pyd4j.commands._plan_run import cupy_budget, emit_plan_file, execute_plans
from pyd4j.commands._plan_run import optimum as solve_optimum
from pyd4j.commands._plan_run import plot as plot_timelines
from pyd4j.output import emit_json, human_bytes, print_table
from pyd4j.sched.plan import gc_paused

__all__ = ["_probe", "_read_network", "command", "cupy_budget"]


@click.command("plan")
@click.option("--model", default="resnet50", show_default=True,
              help="alexnet, alexnet_grouped, vgg16, vgg19, resnet50/101/152, resnet<N>, resnet, inception_v4, or a DL4J "
              "configuration JSON file (conf.toJson(); input shapes from <name>.input.json next to it)")
@click.option("--network", "network_json", hidden=True,
              type=params.InputFile("network configuration", fix="give a DL4J configuration JSON written by conf.toJson()"),
              help="a DL4J configuration JSON (the same as --model FILE.json)")
@click.option("--depth", type=params.Whole(1, inputs.MAX_RESNET_DEPTH, example="--depth 152"), help="ResNet depth N for --model resnet")
@click.option("--batch", default=32, show_default=True, type=params.BATCH)
@click.option("--image", type=params.Whole(1, 65_536, example="--image 224"),
              help="input height/width (default: the network's, 227; inception_v4 299)")
@click.option("--layout", default="standard", show_default=True,
              type=click.Choice(["standard", "paper"]),
              help="ResNet-N stages: standard (3, 4, k, 3) or the SuperNeurons code's deepest "
              "network (6, 32, k, 6)")
@click.option("--device", default="k40c", show_default=True)
@click.option("--framework", "--profile", "framework", type=click.Choice(["cudnn", "dl4j"]),
              help="framework whose layers are planned: what each layer's steps read and write (default: "
              "dl4j for a DL4J network, cudnn -- as the SuperNeurons code -- for a zoo --model); "
              "--profile is its old name")
@click.option("--devices", "devices_json", type=params.InputFile("device profiles"),
              help="JSON with measured device numbers (format of pyd4j/sched/devices.json)")
@click.option("--policy", "policies", multiple=True,
              type=click.Choice(["baseline", "liveness", "utp", "recompute", "superneurons"]),
              help="policies to report (default: all)")
@click.option("--budget", type=params.SIZE, help="device bytes plans may use (default: the device's memory)")
@click.option("--cache", is_flag=True, help="report, plot and execute the time-optimised plans "
              "(tensor cache up to the budget) as the main plans instead of the minimum-memory "
              "ones; both are always in the report")
@click.option("--optimum", is_flag=True, help="also solve the exact optimum (a MILP; networks up "
              "to 80 layers): the fastest plan under the budget and the smallest budget any plan "
              "of its class fits")
@click.option("--max-batch", is_flag=True, help="search the largest batch that fits")
@click.option("--max-depth", is_flag=True, help="search the deepest ResNet that fits")
@click.option("--plot", type=params.OutputFile(), help="write a memory timeline PNG (a new file)")
@click.option("--execute", is_flag=True, help="also run each plan for real (one training "
              "iteration, budget = its planned peak) and report measured vs planned peak and time")
@click.option("--backend", default="host", show_default=True,
              type=click.Choice(["host", "native", "cupy"]),
              help="executor backend for --execute: numpy, the native side-agent, or CuPy")
@click.option("--emit-plan", "emit_plan", type=params.OutputFile(),
              help="write the plan DL4J's planned trainer runs (a DL4J JSON --model only): with --budget, "
              "the fastest plan that fits it; without, liveness only; one --policy forces that policy")
@click.option("--json", "as_json", is_flag=True, help="one JSON document")
@gc_paused
def command(model: str, network_json: str | None, depth: int | None, batch: int,
            image: int | None, layout: str, device: str, framework: str | None,
            devices_json: str | None,
            policies: tuple[str, ...],
            budget: int | None, cache: bool, max_batch: bool, max_depth: bool,
            plot: str | None, as_json: bool, execute: bool = False, backend: str = "host",
            emit_plan: str | None = None, optimum: bool = False) -> None:
    """Plan training memory (liveness, tensor pool, recomputation, conv workspace) and simulate
    peak memory and iteration time on a device. A DL4J network's layers without a measured model
    are probed in DL4J (their shapes and working memory), as pyd4j.train.fit probes them."""
    from pyd4j.sched.policies import POLICIES

    _refuse_conflicts(model, network_json, depth, image, max_depth, max_batch,
                      {"--optimum": optimum, "--execute": execute, "--emit-plan": emit_plan is not None,
                       "--plot": plot is not None, "--cache": cache})
    check_cupy(execute, backend)
    cost = cost_model(device, devices_json)
    cap = budget if budget is not None else cost.device.memory_bytes
    chosen = list(policies) or list(POLICIES)
    network_json = network_file(model, network_json)
    framework = framework or ("dl4j" if network_json else "cudnn")
    check_plan_options(execute, network_json, framework, emit_plan, policies)
    build = graph_builder(model, network_json, batch, image, depth, layout, framework)
    if max_depth:
        if network_json or not model.lower().startswith("resnet"):
            raise click.UsageError("--max-depth searches ResNet depth: use --model resnet")
        _deepest(chosen[-1], cost, batch, image, cap, framework, layout, as_json)
    elif max_batch:
        _largest_batch(build, model, chosen, cost, cap, as_json)
    else:
        _report(build, network_json, batch, cost, cap, budget, policies, chosen, cache, plot, execute, backend,
                emit_plan, optimum, as_json)


def _deepest(policy: str, cost: Any, batch: int, image: int | None, cap: int, framework: str, layout: str,
             as_json: bool) -> None:
    """--max-depth: the deepest ResNet that fits under `policy`, beside baseline's and liveness's."""
    from pyd4j.sched import zoo
    from pyd4j.sched.search import SearchLimit, max_resnet_depth

    image = image or zoo.DEFAULT_IMAGE
    try:
        best = max_resnet_depth(policy, cost, batch, image, cap, framework, layout)
    except SearchLimit as e:
        raise click.BadParameter(str(e), param_hint="--budget") from None
    if best.value == 0:
        raise click.BadParameter(
            f"no ResNet fits a budget of {cap} bytes under {policy} at batch {batch}: the shallowest "
            f"(ResNet-{zoo.resnet_depth((*zoo.LAYOUTS[layout][:2], 1, zoo.LAYOUTS[layout][2]))}) needs more; give a "
            "larger --budget or a smaller --batch or --image", param_hint="--budget")
    base = max_resnet_depth("baseline", cost, batch, image, cap, framework, layout)
    live = max_resnet_depth("liveness", cost, batch, image, cap, framework, layout)
    doc = {"model": "resnet", "batch": batch, "image": image, "device": cost.device.key,
           "profile": framework, "layout": layout,   # the key users' scripts read: kept
           "capacity_bytes": cap, "policy": policy, "depth": best.value,
           "baseline_depth": base.value, "liveness_depth": live.value,
           "ratio_to_baseline": best.value / base.value if base.value else None,
           "ratio_to_liveness": best.value / live.value if live.value else None,
           "peak_bytes": best.result.peak_bytes if best.result else None,
           "time_s": best.result.time_s if best.result else None}
    if as_json:
        emit_json(doc)
    else:
        print_table(f"Deepest ResNet on {cost.device.name} (batch {batch}, {image}x{image})",
                    ["policy", "depth", "peak"],
                    [(p, r.value, human_bytes(r.result.peak_bytes if r.result else None))
                     for p, r in (("baseline", base), ("liveness", live), (policy, best))])


def _largest_batch(build: Callable[[int], Any], model: str, chosen: list[str], cost: Any, cap: int,
                   as_json: bool) -> None:
    """--max-batch: the largest batch that fits, per policy."""
    from pyd4j.sched.bounds import lower_bound
    from pyd4j.sched.search import SearchLimit
    from pyd4j.sched.search import max_batch as search_batch

    try:
        rows = {p: search_batch(build, p, cost, cap) for p in chosen}
    except SearchLimit as e:
        raise click.BadParameter(str(e), param_hint="--budget") from None
    if not any(r.value for r in rows.values()):
        raise click.BadParameter(
            f"no batch fits a budget of {cap} bytes: even batch 1 of {model} needs "
            f"{lower_bound(build(1), cost).lower_bound_bytes} bytes or more under every policy "
            f"({', '.join(chosen)}); give a larger --budget", param_hint="--budget")
    doc = {"model": model, "device": cost.device.key, "capacity_bytes": cap,
           "max_batch": {p: r.value for p, r in rows.items()}}
    if as_json:
        emit_json(doc)
    else:
        print_table(f"Largest batch of {model} on {cost.device.name}", ["policy", "batch"],
                    [(p, r.value) for p, r in rows.items()])


def _report(build: Callable[[int], Any], network_json: str | None, batch: int, cost: Any, cap: int,
            budget: int | None, policies: tuple[str, ...], chosen: list[str], cache: bool, plot: str | None,
            execute: bool, backend: str, emit_plan: str | None, optimum: bool, as_json: bool) -> None:
    """The network at `batch`: every chosen policy's plans against the lower bound, and what the options add."""
    from pyd4j.sched.bounds import lower_bound

    g = build(batch)
    emitted = emit_plan_file(g, network_json, emit_plan, budget,
                             policies[0] if policies else None) if emit_plan else None
    need = lower_bound(g, cost).lower_bound_bytes
    if need > cap:
        raise click.BadParameter(
            f"no plan of {g.name} at batch {batch} fits {cap} bytes: every plan needs at least its lower bound, "
            f"{need} bytes ({human_bytes(need)}); give a --budget of at least {need} bytes, a smaller --batch "
            "(--max-batch finds the largest that fits) or a larger --device", param_hint="--budget")
    bound = lower_bound(g, cost)
    runs = run_policies(g, chosen, cost, cap, cache, plot)
    doc = document(g, batch, cost, cap, bound, runs)
    if network_json:   # the same model `pyd4j estimate` and `flags` give DL4J's own fit()
        doc["dl4j_fit"] = dl4j_fit(build, batch)
    if plot:
        plot_timelines(plot, g.name, runs.timelines, bound.lower_bound_bytes, cap)
        doc["plot"] = plot
    if execute:
        doc["execute"] = execute_plans(g, runs.plans, runs.results, backend)
    if emitted is not None:
        doc["emitted_plan"] = emitted
    if optimum:
        doc["optimum"] = solve_optimum(g, cost, cap)
    if network_json and doc["profile"] == "dl4j":   # the network DL4J's planned trainer runs
        doc["planned_job_offheap"] = planned_job_figure(g, network_json, budget, policies[0] if policies else None, emitted)
    if as_json:
        emit_json(doc)
        return
    print_minimum(doc, g, batch, cost, cap, bound, runs)
    print_extras(doc, cap, backend)
