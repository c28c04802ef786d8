"""`pyd4j plan`: SuperNeurons-style memory plans for a network on a device, simulated."""

from __future__ import annotations

from pathlib import Path

import click

from pyd4j import inputs
from pyd4j.commands import _params as params
from pyd4j.commands._devices import device_profiles
from pyd4j.output import emit_json, human_bytes, print_table
from pyd4j.dl4j.input_types import sidecar_shapes
from pyd4j.sched.plan import gc_paused


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
@click.option("--profile", "deps_profile", type=click.Choice(["cudnn", "dl4j"]),
              help="dependency profile: what each layer's steps read and write (default: dl4j for "
              "--network, cudnn -- as the SuperNeurons code -- for --model)")
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
            image: int | None, layout: str, device: str, deps_profile: str | None,
            devices_json: str | None,
            policies: tuple[str, ...],
            budget: int | None, cache: bool, max_batch: bool, max_depth: bool,
            plot: str | None, as_json: bool, execute: bool = False, backend: str = "host",
            emit_plan: str | None = None, optimum: bool = False) -> None:
    """Plan training memory (liveness, tensor pool, recomputation, conv workspace) and simulate
    peak memory and iteration time on a device. A DL4J network's layers without a measured model
    are probed in DL4J (their shapes and working memory), as pyd4j.train.fit probes them."""
    from pyd4j.sched import zoo
    from pyd4j.sched.bounds import lower_bound
    from pyd4j.sched.costmodel import CostModel
    from pyd4j.sched.policies import POLICIES, evaluate, make_plan
    from pyd4j.sched.search import SearchLimit
    from pyd4j.sched.search import max_batch as search_batch
    from pyd4j.sched.search import max_resnet_depth
    from pyd4j.sched.simulator import ideal_time, simulate

    _refuse_conflicts(model, network_json, depth, image, max_depth, max_batch,
                      {"--optimum": optimum, "--execute": execute, "--emit-plan": emit_plan is not None,
                       "--plot": plot is not None, "--cache": cache})
    if execute and backend == "cupy":
        import importlib.util  # noqa: PLC0415

        if importlib.util.find_spec("cupy") is None:
            raise click.BadParameter("'cupy': CuPy is not installed in this Python; install it with "
                                     "pip install 'pyd4j[cuda]' (CUDA 13) or 'pyd4j[cuda12]', or use --backend host "
                                     "or native", param_hint="--backend")
    overrides = device_profiles(devices_json) if devices_json else None
    try:
        cost = CostModel.for_device(device, overrides)
    except KeyError as e:
        if devices_json is None or "unknown device" in str(e.args[0]):
            raise click.BadParameter(str(e.args[0]), param_hint="--device") from None
        raise click.BadParameter(f"{devices_json} lacks {e}; write it in the format of pyd4j/sched/devices.json",
                                 param_hint="--devices") from None
    except (TypeError, ValueError, AttributeError) as e:
        raise click.BadParameter(f"{devices_json} is malformed ({e}); write it in the format of "
                                 "pyd4j/sched/devices.json", param_hint="--devices") from None
    cap = budget if budget is not None else cost.device.memory_bytes
    chosen = list(policies) or list(POLICIES)
    if network_json is None and model.lower().endswith(".json"):
        if not Path(model).is_file():
            raise click.BadParameter(f"{model!r} is not a file; give a DL4J configuration JSON written by "
                                     "conf.toJson() or a zoo network name", param_hint="--model")
        network_json = model
    profile = deps_profile or ("dl4j" if network_json else "cudnn")
    if execute and network_json:
        raise click.BadParameter("--execute runs zoo networks on pyd4j's own numpy kernels; a DL4J network "
                                 "trains under a plan on DL4J's own layers: pyd4j.train.fit(net, data, "
                                 "memory=...) or --emit-plan FILE for PlannedTrainer", param_hint="--execute")
    if execute and profile != "cudnn":
        raise click.BadParameter(f"the executor's kernels read what the cudnn profile keeps, not "
                                 f"{profile!r}; pass --profile cudnn with --execute",
                                 param_hint="--profile")
    if emit_plan is not None:
        if network_json is None:
            raise click.BadParameter("--emit-plan writes plans for DL4J networks: give --model FILE.json "
                                     "(a DL4J configuration JSON)", param_hint="--emit-plan")
        if len(policies) > 1:
            raise click.BadParameter(f"--emit-plan writes one plan; give at most one --policy, got {list(policies)}",
                                     param_hint="--policy")

    network_doc = _read_network(network_json) if network_json else None   # read once: a batch search builds many graphs
    probe = _probe(network_json, network_doc, batch) if network_json else None

    def build(b: int):
        if network_json:
            from pyd4j.dl4j.graph import probed_graph

            try:
                return probed_graph(network_doc, b,
                                    sidecar_shapes(network_json), probe=probe, profile=profile)
            except ValueError as e:  # InputError, GraphError: a malformed file, sidecar or layer
                raise _bad_network(network_json, e) from None
        try:
            return zoo.build(model, batch=b, image=image, depth=depth,
                             layout=layout).with_profile(profile)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--model") from None

    if max_depth:
        if network_json or not model.lower().startswith("resnet"):
            raise click.UsageError("--max-depth searches ResNet depth: use --model resnet")
        policy = chosen[-1]
        image = image or zoo.DEFAULT_IMAGE
        try:
            best = max_resnet_depth(policy, cost, batch, image, cap, profile, layout)
        except SearchLimit as e:
            raise click.BadParameter(str(e), param_hint="--budget") from None
        if best.value == 0:
            raise click.BadParameter(
                f"no ResNet fits a budget of {cap} bytes under {policy} at batch {batch}: the shallowest "
                f"(ResNet-{zoo.resnet_depth((*zoo.LAYOUTS[layout][:2], 1, zoo.LAYOUTS[layout][2]))}) needs more; give a "
                "larger --budget or a smaller --batch or --image", param_hint="--budget")
        base = max_resnet_depth("baseline", cost, batch, image, cap, profile, layout)
        live = max_resnet_depth("liveness", cost, batch, image, cap, profile, layout)
        doc = {"model": "resnet", "batch": batch, "image": image, "device": cost.device.key,
               "profile": profile, "layout": layout,
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
        return

    if max_batch:
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
        return

    g = build(batch)
    emitted = _emit(g, network_json, emit_plan, budget,
                    policies[0] if policies else None) if emit_plan else None
    need = lower_bound(g, cost).lower_bound_bytes
    if need > cap:
        raise click.BadParameter(
            f"no plan of {g.name} at batch {batch} fits {cap} bytes: every plan needs at least its lower bound, "
            f"{need} bytes ({human_bytes(need)}); give a --budget of at least {need} bytes, a smaller --batch "
            "(--max-batch finds the largest that fits) or a larger --device", param_hint="--budget")
    bound = lower_bound(g, cost)
    results = {}
    timelines = {}
    plans = {}
    extra = {}
    mins = {}
    for p in chosen:
        small = make_plan(g, p, cost, cap)
        rs = (simulate(small, cost) if plot and not cache else evaluate(small, cost))
        # the same device memory as the minimum-memory plan, frees delayed by the tensor cache
        at_min = evaluate(make_plan(g, p, cost, rs.device_peak_bytes, cache=True), cost,
                          arena=False)
        fast_plan = make_plan(g, p, cost, cap, cache=True)
        fast = (simulate(fast_plan, cost) if plot and cache
                else evaluate(fast_plan, cost, arena=cache))
        plans[p], results[p] = (fast_plan, fast) if cache else (small, rs)
        mins[p] = rs
        timelines[p] = results[p].timeline
        extra[p] = {"at_min_peak": _summary(at_min), "time_optimised": {
            **_summary(fast), "budget_bytes": cap, "fits": fast.device_peak_bytes <= cap,
            "tensor_cache": bool(fast_plan.notes.get("tensor_cache"))}}
    base_peak = results["baseline"].peak_bytes if "baseline" in results else None
    ideal = next(iter(results.values())).ideal_time_s
    no_ws = ideal_time(next(iter(plans.values())), cost, fastest_conv=False)
    doc = {
        "model": g.name, "layers": len(g), "batch": batch, "device": cost.device.key,
        "profile": g.profile.name,
        "capacity_bytes": cap, "lower_bound_bytes": bound.lower_bound_bytes,
        "resident_bytes": bound.resident_bytes, "l_peak_bytes": bound.l_peak_bytes,
        "l_peak_layer": bound.l_peak_layer, "workspace_bytes": bound.workspace_bytes,
        "ideal_time_s": ideal, "no_workspace_time_s": no_ws,
        "policies": {p: {**r.as_dict(), "fits": r.peak_bytes <= cap,
                         "peak_over_bound": r.peak_bytes / bound.lower_bound_bytes,
                         "reduction_vs_baseline": (1 - r.peak_bytes / base_peak) if base_peak else None,
                         **extra[p]}
                     for p, r in results.items()},
    }
    if network_json:   # the same model `pyd4j estimate` and `flags` give DL4J's own fit()
        from pyd4j.dl4j.fitmem import MALLOC_ENV, REFERENCE_BATCH, fit_terms

        fit = fit_terms(build(REFERENCE_BATCH).with_profile("dl4j"))
        doc["dl4j_fit"] = {"bytes": sum(t.bytes_at(batch) for t in fit),
                           "terms": {t.name: t.bytes_at(batch) for t in fit}, "environment": MALLOC_ENV,
                           "note": "DL4J's own fit() without a plan, in the environment pyd4j's flags set "
                                   "(pyd4j.dl4j.fitmem; the data pipeline not included)"}
    if plot:
        _plot(plot, g.name, timelines, bound.lower_bound_bytes, cap)
        doc["plot"] = plot
    if execute:
        doc["execute"] = _execute(g, plans, results, backend)
    if emitted is not None:
        doc["emitted_plan"] = emitted
    if optimum:
        doc["optimum"] = _optimum(g, cost, cap)
    if as_json:
        emit_json(doc)
        return
    print_table(
        f"{g.name}, batch {batch}, on {cost.device.name}, minimum memory: lower bound "
        f"{human_bytes(bound.lower_bound_bytes)} (resident {human_bytes(bound.resident_bytes)} "
        f"+ l_peak {human_bytes(bound.l_peak_bytes)} at {bound.l_peak_layer})",
        ["policy", "peak", "/bound", "+workspace", "arena", "time", "overhead",
         "delayed frees", "fits"],
        [(p, human_bytes(r.peak_bytes), f"{r.peak_bytes / bound.lower_bound_bytes:.3f}",
          human_bytes(r.device_peak_bytes), human_bytes(r.arena_peak_bytes),
          f"{r.time_s * 1e3:.0f} ms", f"{r.overhead:+.0%}",
          f"{extra[p]['at_min_peak']['overhead']:+.0%}", "yes" if r.peak_bytes <= cap else "no")
         for p, r in mins.items()])
    if "dl4j_fit" in doc:
        click.echo(f"DL4J's own fit() (no plan) holds {human_bytes(doc['dl4j_fit']['bytes'])} off the heap at batch "
                   f"{batch}: the figure `pyd4j estimate` and `pyd4j flags` use (the data pipeline besides).")
    print_table(
        f"Time-optimised under a budget of {human_bytes(cap)}: tensors stay cached on the "
        "device; only what the budget forces moves or is recomputed",
        ["policy", "+workspace", "time", "overhead", "offloaded", "recompute", "fits"],
        [(p, human_bytes(e["device_peak_bytes"]), f"{e['time_s'] * 1e3:.0f} ms",
          f"{e['overhead']:+.0%}", human_bytes(e["bytes_offloaded"]),
          f"{e['recompute_s'] * 1e3:.0f} ms", "yes" if e["fits"] else "no")
         for p, e in ((p, extra[p]["time_optimised"]) for p in results)])
    click.echo(
        "arena: the high-water of a first-fit allocator that never moves a buffer (fragmentation "
        "included).\n"
        "delayed frees: the overhead with the same device memory as the minimum-memory plan, the "
        "tensor cache deciding what to free and when.\n"
        f"overhead = iteration time vs an infinite-memory run ({ideal * 1e3:.1f} ms: no copies, "
        "no recomputation, fastest convolution algorithm with unlimited workspace). Policies "
        "before superneurons use the no-workspace algorithm: "
        f"{no_ws * 1e3:.1f} ms ({no_ws / ideal - 1:+.1%}) even with infinite memory; superneurons "
        "picks the fastest algorithm whose workspace fits in free memory.")
    if optimum:
        o = doc["optimum"]
        print_table(
            f"Exact optimum (MILP, solver status {o['status']}, gap {o['mip_gap']:.2%})",
            ["smallest budget", "budget", "device peak", "time", "overhead"],
            [(human_bytes(o["smallest_budget_bytes"]), human_bytes(cap),
              human_bytes(o["device_peak_bytes"]) if o["fits"] else "-",
              f"{o['time_s'] * 1e3:.0f} ms" if o["fits"] else "does not fit",
              f"{o['time_s'] / ideal - 1:+.0%}" if o["fits"] else "-")])
    if execute:
        ex = doc["execute"]
        print_table(
            f"Executed on the {backend} backend ({ex['library']}), one iteration each",
            ["policy", "planned peak", "measured peak", "planned time", "measured time",
             "grads = reference"],
            [(p, human_bytes(e["planned_peak_bytes"]), human_bytes(e["measured_peak_bytes"]),
              f"{e['planned_time_s'] * 1e3:.1f} ms", f"{e['measured_time_s'] * 1e3:.1f} ms",
              "yes" if e["grads_equal_reference"] else f"no (max diff {e['max_abs_grad_diff']:.3g})")
             for p, e in ex["policies"].items()])
    if emitted is not None:
        click.echo(f"wrote {emitted['path']}: the {emitted['policy']} plan"
                   f"{' (time-optimised under the budget)' if emitted['tensor_cache'] else ''}, predicted peak "
                   f"{human_bytes(emitted['device_peak_bytes'])}; train with it: "
                   f"PlannedTrainer.fit(net, iterator, \"{emitted['path']}\")")


def _read_network(network_json: str) -> dict:
    try:
        return inputs.read_json(network_json, "network configuration")
    except ValueError as e:   # not JSON: refused before any JVM starts
        raise _bad_network(network_json, e) from None


def _bad_network(network_json: str, e: Exception) -> click.BadParameter:
    """The one error for a --network file pyd4j cannot read, naming the file, the cause and the fix."""
    return click.BadParameter(f"{network_json}: {e}; give a DL4J configuration JSON written by conf.toJson() "
                              "(examples/networks/ has six), or a zoo network with --model", param_hint="--network")


def _probe(network_json: str, doc: dict, batch: int):
    """What DL4J says of the network's opaque steps (`pyd4j.dl4j.probe`, as pyd4j.train.fit asks it of
    a live network), on the network built from the file: probed at `batch`, as pyd4j.train.fit probes it,
    and at any other batch (a search, DL4J's own fit() at the reference batch) from the line through
    probes at two small batches (`fitted`), as `pyd4j estimate` does, so that the two give one figure
    for fit(). A network DL4J cannot build or run is an error naming the file."""
    from pyd4j.jvm.errors import JavaError
    from pyd4j.dl4j.probe import FIT_BATCHES, fitted, of_configuration

    run = of_configuration(doc, network_json)
    line = fitted(run)
    exact: dict = {}

    def probe(shapes: list[tuple[int, ...]]) -> dict:
        given = shapes[0][0] == batch
        try:
            if not given:
                return line(shapes)
            key = tuple(map(tuple, shapes))
            if key not in exact:
                exact[key] = run(shapes)
            return exact[key]
        except (ValueError, JavaError) as e:   # EstimateError (DL4J cannot read it), or DL4J's own failure
            at = str(batch) if given else " and ".join(map(str, FIT_BATCHES))
            raise click.ClickException(f"{network_json}: DL4J's probe iteration of the network at batch {at} "
                                       f"failed: {e}") from None

    return probe


def _refuse_conflicts(model: str, network_json: str | None, depth: int | None, image: int | None,
                      max_depth: bool, max_batch: bool, others: dict[str, bool]) -> None:
    """Options that would be dropped without a word are refused instead."""
    json_model = network_json is not None or model.lower().endswith(".json")
    for search, on in (("--max-depth", max_depth), ("--max-batch", max_batch)):
        given = [o for o, v in {**others, "--depth": depth is not None and search == "--max-depth",
                                "--max-batch": max_batch and search == "--max-depth"}.items() if v]
        if on and given:
            raise click.UsageError(f"{search} searches and reports one number; it does not take "
                                   f"{', '.join(given)}: run the search first, then plan what it found with them")
    if depth is not None and (json_model or model.lower().replace("-", "") != "resnet"):
        raise click.BadParameter(f"{depth} is a depth for --model resnet only; {model!r} fixes its own depth: "
                                 "drop --depth, or give --model resnet --depth N", param_hint="--depth")
    if image is not None and json_model:
        raise click.BadParameter(f"{image}: a DL4J configuration JSON takes its input shape from <name>.input.json "
                                 "next to it, not --image; drop --image or edit that file", param_hint="--image")
    if model.lower().replace("-", "") == "resnet" and depth is None and not max_depth and not json_model:
        raise click.UsageError("--model resnet needs --depth N (e.g. --depth 152), or --max-depth to search it; "
                               "or name the network: resnet50, resnet101, resnet152")


def _emit(g, network_json: str, path: str, budget: int | None, policy: str | None) -> dict:
    """Write the plan the DL4J planned trainer runs (see pyd4j.dl4j.plan_file)."""
    import json

    from pyd4j.dl4j.graph import network_kind
    from pyd4j.sched.choose import BudgetTooSmall, choose_plan
    from pyd4j.dl4j.plan_file import write_plan

    try:
        plan, result = choose_plan(g, budget, policy)
    except BudgetTooSmall as e:
        raise click.BadParameter(str(e), param_hint="--budget") from None
    kind = network_kind(json.loads(Path(network_json).read_text()))
    write_plan(path, plan, result, kind, network_json, budget)
    return {"path": path, "policy": plan.policy, "tensor_cache": bool(plan.notes.get("tensor_cache")),
            "budget_bytes": budget, "peak_bytes": result.peak_bytes,
            "device_peak_bytes": result.device_peak_bytes, "records": len(plan.steps)}


def _optimum(g, cost, cap: int) -> dict:
    """The MILP's smallest budget and its fastest plan under `cap` (replayed by the simulator)."""
    from pyd4j.sched.optimum import OptimumError, optimum_plan, smallest_budget
    from pyd4j.sched.simulator import simulate

    try:
        smallest, proven, status = smallest_budget(g, cost)
        out = {"smallest_budget_bytes": smallest, "smallest_budget_proven_bytes": proven,
               "fits": cap >= smallest, "status": status, "mip_gap": 0.0}
        if cap >= smallest:
            opt = optimum_plan(g, cost, cap)
            r = simulate(opt.plan, cost, cap)
            out.update({"status": opt.status, "mip_gap": opt.mip_gap, "time_s": opt.time_s,
                        **_summary(r)})
    except OptimumError as e:
        raise click.BadParameter(str(e), param_hint="--optimum") from None
    return out


def _summary(r) -> dict:
    """The keys of a plan variant's simulation that the report shows."""
    return {k: r.as_dict()[k] for k in ("peak_bytes", "device_peak_bytes", "time_s", "overhead",
                                        "bytes_offloaded", "bytes_prefetched", "recompute_s",
                                        "stall_s")}


def _execute(g, plans: dict, results: dict, backend: str) -> dict:
    """Runs each plan once on `backend` under a budget equal to its planned device peak."""
    import time

    import numpy as np

    from pyd4j.agent.executor import execute, init_params, random_batch, reference_run

    if backend == "native":
        from pyd4j.agent.native import NativeBackend as make, load_library

        library = load_library().pyd4j_agent_build_kind().decode() + " build"
    elif backend == "cupy":
        from pyd4j.agent.cupy_backend import CupyBackend as make

        library = "CuPy"
    else:
        from pyd4j.agent.host import HostBackend as make

        library = "numpy"
    x, labels = random_batch(g)
    params = init_params(g)
    ref = reference_run(g, x, labels, params)
    out = {}
    for p, plan in plans.items():
        r = results[p]
        if backend == "cupy":  # the budget is on CuPy's pool bytes, placed by CuPy's own policy
            b = make(budget_bytes=cupy_budget(r.arena_peak_bytes))
        else:  # first-fit arenas: the simulated high-water is what they need
            b = make(budget_bytes=r.device_peak_bytes, arena_bytes=r.arena_peak_bytes)
        try:
            t = time.perf_counter()
            run = execute(plan, b, x, labels, params)
            b.synchronize()
            elapsed = time.perf_counter() - t
        finally:
            b.close()
        diff = max((float(np.max(np.abs(run.grads[k] - ref.grads[k]))) for k in ref.grads), default=0.0)
        out[p] = {"planned_peak_bytes": r.device_peak_bytes, "measured_peak_bytes": run.stats.peak_bytes,
                  "planned_arena_peak_bytes": r.arena_peak_bytes,
                  "measured_arena_peak_bytes": run.stats.arena_peak_bytes,
                  "planned_time_s": r.time_s, "measured_time_s": elapsed,
                  "bytes_offloaded": run.stats.bytes_offloaded,
                  "bytes_prefetched": run.stats.bytes_prefetched,
                  "grads_equal_reference": all(np.array_equal(run.grads[k], ref.grads[k]) for k in ref.grads),
                  "max_abs_grad_diff": diff}
    return {"backend": backend, "library": library, "policies": out}


def cupy_budget(arena_peak_bytes: int) -> int:
    """Pool bytes a plan gets on CuPy: its simulated first-fit high-water plus room for CuPy's
    512-byte rounding and its own placement (measured on a GPU, see benchmarks/agent_gpu.py)."""
    return int(arena_peak_bytes * 1.25) + (1 << 20)


def _plot(path: str, name: str, timelines: dict[str, list[int]], bound: int, cap: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    for p, tl in timelines.items():
        n = max(1, len(tl) - 1)
        ax.plot([k / n for k in range(len(tl))], [b / 2**30 for b in tl], label=p, lw=1)
    ax.axhline(bound / 2**30, color="k", ls="--", lw=0.8, label="lower bound")
    ax.axhline(cap / 2**30, color="r", ls=":", lw=0.8, label="device memory")
    ax.set_xlabel("iteration progress (plan records)")
    ax.set_ylabel("device memory (GiB)")
    ax.set_title(f"{name}: memory timeline per policy")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
