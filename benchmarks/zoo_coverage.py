"""Planned training on every model of DL4J's zoo (deeplearning4j-zoo 1.0.0-M2.1).

    .venv/bin/python benchmarks/zoo_coverage.py [--models AlexNet,...] [--batch 2] [--fit-iterations 10]
        [--timeout 900] [--peak-timeout 300] [--peak-batch 16] [--no-peak] [--resume] [--table-only]
        [--peaks-only [--configs DIR]] [--repredict --configs DIR] [--out benchmarks/results/zoo_coverage.json]

For each model, in child JVMs (one OpenMP thread):
1. built by DL4J's code (`org.pyd4j.fixtures.ZooNets`) at the smallest square input at which it
   builds and runs a forward pass (sizes tried smallest first), with what DL4J says of each layer at
   the planned batch (`org.pyd4j.train.LayerProbe`: shapes, parameter counts, the working memory of
   each opaque step);
2. planned from its `conf.toJson()` (`pyd4j.dl4j.graph`): accepted, or refused with the reason;
3. checked (`org.pyd4j.fixtures.PlannedCheck`, float64 reference on): one planned iteration under
   liveness, under `recompute_in_memory` (the smallest plan with every step whole) and under the
   smallest plan (convolutions in batch slices where it helps) against DL4J's own
   `computeGradientAndScore()`: bit-identical gradients and score where no step is chunked; where
   steps are chunked, each variable's error against the float64 run next to DL4J's own float32
   error (the planned error may not exceed DL4J's by more than `CHUNK_TOLERANCE`, or one part in
   10^6 of the variable's largest value); then `--fit-iterations` of `fit()` under each plan against
   DL4J's own `fit()` from the same parameters and random state, the parameters judged the same way;
4. where quick (the model's check within `--peak-timeout`): the peak above the idle JVM of three
   iterations of DL4J's `fit()` and of the same job under the liveness and the smallest plan at
   `--peak-batch` (the harness's measuring job, harness/training.py; the probe's working memory
   scaled from the checked batch), and the ratios planned / fit(); `fit()` once more in the environment
   `pyd4j estimate` assumes (glibc's mmap threshold fixed, as pyd4j's flags set it), and each mode's
   predicted / measured peak: `pyd4j estimate` for fit(), the planner's device peak plus what any run
   holds besides its step (the same data pipeline, glibc's LSTM pieces) for a plan, against the native
   memory above the idle JVM (target +-15%). The agent takes no live points in these runs: their full
   collections would free the garbage `fit()` keeps (batch normalization's backlog).

A model that does not build in time, or whose step exceeds `--timeout`, is recorded as skipped
with the limit it exceeded. Writes JSON (`--out`) and prints the README table.

`--peaks-only` measures step 4 alone for the models named, into the models `--out` already holds
(their builds and checks stay as recorded): for the models whose check ran past `--peak-timeout` on a
loaded machine. Each is built again at the size recorded, into `--configs` (kept between runs) where it
is not there yet. `--repredict` recomputes those predictions with the current model, keeping the
measurements.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

from harness import RESULTS, Recorder
from harness.training import run as train_run
from harness.zoo import build_model, input_shape, java, peak_plans, zoo_classpath

MODELS = ("AlexNet", "Darknet19", "FaceNetNN4Small2", "InceptionResNetV1", "LeNet", "NASNet", "ResNet50",
          "SimpleCNN", "SqueezeNet", "TextGenerationLSTM", "TinyYOLO", "UNet", "VGG16", "VGG19", "Xception", "YOLO2")
CHUNK_TOLERANCE = 4.0
PLANS = ("liveness", "recompute_in_memory", "smallest")
# The peak-measuring runs: DL4J's fit() as the job runs it, the same in the environment `pyd4j estimate`
# assumes, and the job under the liveness and the smallest plan.
PEAK_MODES = ("fit", "fit_flags_env", "liveness", "smallest")
PREDICTED_MODES = PEAK_MODES[1:]   # the model predicts fit() only in the environment it assumes
PREDICTION_TARGET = 0.15


def plan(model: str, batch: int, folder: Path) -> tuple[dict, dict[str, str]]:
    """The planner's verdict and the plan files (policy -> path)."""
    from pyd4j.dl4j.graph import graph_from_dl4j_json, network_kind
    from pyd4j.sched.graph import GraphError, LayerType
    from pyd4j.sched.choose import choose_plan, smallest_plan
    from pyd4j.dl4j.plan_file import write_plan

    doc = json.loads((folder / f"{model}.json").read_text())
    inp = json.loads((folder / f"{model}.input.json").read_text())["inputs"][0]
    info = json.loads((folder / f"{model}.info.json").read_text())
    shape = input_shape(inp)
    try:
        g = graph_from_dl4j_json(doc, batch, shape, info=info)
        files, predicted = {}, {}
        for policy in PLANS:
            p, r = smallest_plan(g, offload=False) if policy == "smallest" else choose_plan(g, policy=policy)
            path = folder / f"{model}.{batch}.{policy}.plan.json"
            path.unlink(missing_ok=True)
            files[policy] = str(write_plan(path, p, r, network_kind(doc), model))
            predicted[policy] = r.device_peak_bytes
    except GraphError as err:
        return {"planned": False, "refused_by": "planner", "reason": str(err)}, {}
    shapes_agree = all(list(l.out_shape[1:]) == info[l.name]["shape"] for l in g.layers
                       if l.type is not LayerType.DATA and info.get(l.name, {}).get("shape") is not None)
    opaque = sorted({l.attrs["dl4j"].get("class", "?") for l in g.layers if l.type is LayerType.OPAQUE})
    return {"planned": True, "nodes": len(g), "opaque_nodes": sum(1 for l in g.layers if l.type is LayerType.OPAQUE),
            "opaque_types": opaque, "dl4j_shapes_agree": shapes_agree,
            "predicted_device_peak_bytes": predicted, "policy_of_smallest": p.policy}, files


def check(model: str, batch: int, folder: Path, files: dict[str, str], timeout: float, fit_iterations: int = 0) -> dict:
    by_path = {v: k for k, v in files.items()}
    t = time.monotonic()
    try:
        out = java(["-Dpyd4j.check.f64=true", "-cp", zoo_classpath(), "org.pyd4j.fixtures.PlannedCheck",
                    str(folder / f"{model}.json"), str(folder / f"{model}.input.json"), str(batch), str(fit_iterations),
                    *files.values()], timeout)
    except subprocess.TimeoutExpired:
        return {"checked": False, "skipped": f"the check took more than {timeout:.0f} s"}
    if out.returncode != 0:
        refused = [x.strip()[2:] for x in out.stderr.splitlines() if x.strip().startswith("- ")]
        if "planned training cannot run this network" in out.stderr:
            return {"checked": False, "refused_by": "trainer", "reason": "; ".join(refused)[:1500]}
        return {"checked": False, "error": out.stderr[-1500:]}
    rows = {}
    for r in (json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")):
        chunked = r["stats"]["chunked_steps"] > 0
        worst = 0.0
        for name, v in r["gradient_by_variable"].items():   # [relative, amax, err_dl4j, err_planned, exact_amax]
            worst = max(worst, over_dl4j(v[2], v[3], v[4]))
        rows[by_path[r["plan"]]] = {
            "bitwise": r["bitwise"], "score_equal": r["score"] == r["score_ref"], "chunked": chunked,
            "max_relative": r["max_relative"], "worst_variable": r["worst_variable"],
            "error_vs_float64_over_dl4j": round(worst, 3),
            "exact": r["bitwise"] if not chunked else worst <= CHUNK_TOLERANCE,
            "recomputes": r["stats"]["recomputes"], "peak_live_bytes": r["stats"]["peak_live_bytes"]}
        if fit_iterations:
            rows[by_path[r["plan"]]]["fit"] = fit_row(r, chunked)
    return {"checked": True, "check_s": round(time.monotonic() - t, 1), "plans": rows,
            "exact": all(v["exact"] and v.get("fit", {}).get("exact", True) for v in rows.values()) and len(rows) == len(files)}


def over_dl4j(err_dl4j: float, err_planned: float, scale: float) -> float:
    """A variable's error against the float64 run under the plan, in units of DL4J's own float32 error
    (or of one part in 10^6 of the variable's largest value, where DL4J's is smaller)."""
    return err_planned / max(err_dl4j, 1e-6 * scale, 1e-30)


def fit_row(r: dict, chunked: bool) -> dict:
    """`fit_iterations` of fit() under the plan against DL4J's own fit() from the same parameters and
    random state: the parameters bit-identical where no step is chunked; where steps are chunked, each
    variable's error against a float64 fit() next to DL4J's own float32 error (as the gradients)."""
    ratios = {name: (over_dl4j(v[1], v[2], v[3]) if len(v) == 4 else float("inf"))
              for name, v in r["params_by_variable"].items()}   # [relative, err_dl4j, err_planned, exact_amax]
    worst = max(ratios.values(), default=0.0)
    outside = sorted((n for n, x in ratios.items() if x > CHUNK_TOLERANCE), key=lambda n: -ratios[n])
    bitwise = r["params_relative"] == 0.0
    return {"iterations": r["iteration_count"], "params_bitwise": bitwise, "params_relative": r["params_relative"],
            "error_vs_float64_over_dl4j": round(worst, 3), "variables": len(ratios),
            "outside_tolerance": {n: round(ratios[n], 2) for n in outside},
            "exact": r["iteration_count"][0] == r["iteration_count"][1] and (bitwise if not chunked else not outside)}


def peaks(model: str, batch: int, folder: Path, timeout: float) -> dict:
    """Peak above the idle JVM: fit() and the same job under the liveness and the smallest plan, and
    fit() again in the environment `pyd4j estimate` assumes (glibc's mmap threshold fixed, as pyd4j's
    flags set it; the planned trainer fixes it itself). Each mode's prediction beside it: predicted /
    measured native memory (RSS less the JVM's committed heap and non-heap: what the models count)
    and predicted / measured RSS."""
    out: dict = {"batch": batch, "iterations": 3}
    try:
        files, predicted, environment = predictions(model, batch, folder)
        out["beside_the_step_bytes"] = predicted.pop("beside_the_step")
    except Exception as err:  # noqa: BLE001 - recorded, the benchmark goes on
        return {"error": f"planning at batch {batch}: {err}"[:600]}
    try:
        for mode in PEAK_MODES:
            p = {"path": files[mode]} if mode in files else None
            t = time.monotonic()
            # quiet: the agent takes no live points, whose full collections would free garbage fit() keeps (batch
            # normalization's backlog: ResNet50's fit() held 598 MiB with them, 753 without)
            r = train_run(folder / f"{model}.json", batch, 3, p, folder, extra_env=environment if mode == "fit_flags_env" else None, quiet=True)
            out[mode] = {"peak_above_idle_bytes": r["peak_above_idle_bytes"],
                         "native_above_idle_bytes": r["native_above_idle_bytes"], "seconds": round(time.monotonic() - t, 1)}
            if mode in predicted:
                out[mode].update(prediction(predicted[mode], out[mode]))
            if time.monotonic() - t > timeout:
                out["skipped"] = f"{mode} took more than {timeout:.0f} s; later modes not run"
                break
    except (RuntimeError, subprocess.TimeoutExpired) as err:
        out["error"] = str(err)[-600:]
    if environment:
        out["fit_flags_env_environment"] = environment
    over_fit(out)
    return out


def over_fit(out: dict) -> None:
    """Each plan's peak over fit()'s, as the job runs and in the flags' environment (glibc's mmap threshold
    fixed, which alone takes up to half of fit()'s peak away: what planning adds is the second ratio)."""
    for base, key in (("fit", "over_fit"), ("fit_flags_env", "over_fit_flags_env")):
        fit = out.get(base, {}).get("peak_above_idle_bytes")
        for mode in ("liveness", "smallest"):
            if fit and mode in out:
                out[mode][key] = round(out[mode]["peak_above_idle_bytes"] / fit, 3)


def predictions(model: str, batch: int, folder: Path) -> tuple[dict[str, str], dict[str, int], dict[str, str]]:
    """The plans' files, what each peak-measuring mode is predicted to hold off the heap, and the
    environment `pyd4j estimate` assumes. fit(): `pyd4j estimate` (the one memory model, with the job's
    data pipeline); a plan: what the planned job holds off the heap (`pyd4j.memory.planned_job.planned_job_offheap`,
    the figure `pyd4j plan`, fit()'s `.plan` and `pyd4j tune --plan` show: its device peak plus what any run of the
    network holds besides its step, the same data pipeline and glibc's LSTM pieces)."""
    from pyd4j.memory.estimate import estimate
    from pyd4j.memory.planned_job import planned_job_offheap

    files, predicted = peak_plans(model, batch, folder)
    e = estimate(folder / f"{model}.json", batch)
    planned = {k: planned_job_offheap(v, e) for k, v in predicted.items()}
    return files, {"fit_flags_env": e.offheap_bytes, "beside_the_step": planned["liveness"].beside_the_step_bytes,
                   **{k: v.total_bytes for k, v in planned.items()}}, e.environment


def repredict(models: list[str], args: argparse.Namespace) -> None:
    """Recompute the predictions of the peaks in --out with the current model, keeping what was
    measured (the measurements do not depend on it)."""
    out = Path(args.out)
    rec = Recorder.amending(out)
    doc = rec.doc
    for model in models:
        pk = (doc["models"].get(model) or {}).get("peak") or {}
        if not predicted_peak(pk):
            continue
        _, predicted, _ = predictions(model, pk["batch"], Path(args.configs))
        pk["beside_the_step_bytes"] = predicted.pop("beside_the_step")
        for mode, value in predicted.items():
            if mode in pk:
                pk[mode].update(prediction(value, pk[mode]))
        over_fit(pk)
        pk["repredicted"] = "predictions recomputed with the current model after the measurements"
        print(model, {m: pk[m].get("predicted_over_native") for m in predicted if m in pk}, flush=True)
    finish(rec, [m for m in MODELS if m in doc["models"]], out)


def predicted_peak(pk: dict) -> bool:
    """Whether a model's peak record carries predictions (records of earlier runs do not)."""
    return any("predicted_bytes" in pk.get(mode, {}) for mode in PREDICTED_MODES)


def prediction(predicted: int, measured: dict) -> dict:
    """Predicted / measured, against native memory (what the models count) and against the RSS."""
    native, rss = measured["native_above_idle_bytes"], measured["peak_above_idle_bytes"]
    return {"predicted_bytes": predicted,
            "predicted_over_native": round(predicted / native, 3) if native > 0 else None,
            "predicted_over_rss": round(predicted / rss, 3) if rss > 0 else None}


def table(doc: dict) -> str:
    lines = ["| model | input | planned | opaque steps | liveness | smallest (whole steps) | smallest plan | "
             "fit() under each plan vs DL4J's | peak planned / fit() (liveness; smallest) | "
             "/ fit() in the flags' environment |",
             "|---|---|---|---|---|---|---|---|---|---|"]

    def fitted(plans: dict) -> str:
        whole = [p["fit"] for p in plans.values() if "fit" in p and not p["chunked"]]
        chunked = [p["fit"] for p in plans.values() if "fit" in p and p["chunked"]]
        if not whole and not chunked:
            return "not run"
        n = (whole or chunked)[0]["iterations"][0]
        text = f"{n} it.: " + ("bit-identical" if all(r["params_bitwise"] for r in whole) else "DIFFERS")
        if chunked:
            worst = max(r["error_vs_float64_over_dl4j"] for r in chunked)
            outside = sorted({v for r in chunked for v in r.get("outside_tolerance", {})})
            text += (f"; chunked: within fp32 error ({worst}x DL4J's)" if not outside else
                     f"; chunked: OUTSIDE fp32 error on {len(outside)} of {chunked[0]['variables']} variables (up to "
                     f"{worst}x DL4J's: {', '.join(outside[:3])}{', ...' if len(outside) > 3 else ''})")
        return text

    def verdict(r: dict | None) -> str:
        if r is None:
            return "-"
        if r["chunked"]:
            return f"{'within' if r['exact'] else 'OUTSIDE'} fp32 error ({r['error_vs_float64_over_dl4j']}x DL4J's)"
        return "bit-identical" if r["bitwise"] and r["score_equal"] else f"DIFFERS ({r['max_relative']:.1e})"

    for name, m in doc["models"].items():
        if not m.get("built"):
            lines.append(f"| {name} | - | not built: {m.get('skipped') or m.get('error', '')[:120]} | | | | | | | |")
            continue
        if not m.get("planned") or (m.get("checked") is False and m.get("refused_by")):
            lines.append(f"| {name} | {m['size']} | refused ({m.get('refused_by')}): {m.get('reason', '')[:160]} | | | | | | | |")
            continue
        plans = m.get("plans", {})
        pk = m.get("peak", {})
        ratio = "; ".join(str(pk[k]["over_fit"]) for k in ("liveness", "smallest") if k in pk and "over_fit" in pk[k]) \
            or (pk.get("error", "")[:60] or pk.get("skipped", "") or "not measured")
        flags_env = "; ".join(str(pk[k]["over_fit_flags_env"]) for k in ("liveness", "smallest")
                              if "over_fit_flags_env" in pk.get(k, {})) or "-"
        lines.append(f"| {name} | {m['size']} | accepted | {m['opaque_nodes']} ({', '.join(m['opaque_types'])}) | "
                     f"{verdict(plans.get('liveness'))} | {verdict(plans.get('recompute_in_memory'))} | "
                     f"{verdict(plans.get('smallest'))} | {fitted(plans)} | {ratio} | {flags_env} |")
    return "\n".join(lines)


def prediction_table(doc: dict) -> str:
    """Predicted / measured peak of each model: fit() (`pyd4j estimate`) and each plan (the planner)."""
    lines = ["| model | batch | fit() (flags' environment): predicted / native, MiB | / RSS | liveness plan | / RSS | "
             "smallest plan | / RSS |", "|---|---|---|---|---|---|---|---|"]
    for name, m in doc["models"].items():
        pk = m.get("peak") or {}
        if not predicted_peak(pk):
            continue
        cells = []
        for mode in PREDICTED_MODES:
            r = pk.get(mode, {})
            if "predicted_bytes" not in r:
                cells += ["-", "-"]
                continue
            cells += [f"{r['predicted_bytes'] / 2**20:.0f} / {r['native_above_idle_bytes'] / 2**20:.0f} = "
                      f"**{r['predicted_over_native']}**", str(r["predicted_over_rss"])]
        lines.append(f"| {name} | {pk['batch']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def prediction_summary(doc: dict) -> dict:
    """How many predictions are within the target of the measured native memory, per mode, and the misses."""
    out = {"target": PREDICTION_TARGET}
    for mode in PREDICTED_MODES:
        ratios = {n: m["peak"][mode]["predicted_over_native"] for n, m in doc["models"].items()
                  if (m.get("peak") or {}).get(mode, {}).get("predicted_over_native") is not None}
        out[mode] = {"measured": len(ratios),
                     "within": sum(1 for r in ratios.values() if round(abs(r - 1), 3) <= PREDICTION_TARGET),
                     "misses": {n: r for n, r in ratios.items() if round(abs(r - 1), 3) > PREDICTION_TARGET}}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per build and per check")
    ap.add_argument("--peak-timeout", type=float, default=300.0, help="measure peaks only where the check took less")
    ap.add_argument("--peak-batch", type=int, default=16, help="batch of the peak-measuring runs")
    ap.add_argument("--fit-iterations", type=int, default=10,
                    help="iterations of planned fit() checked against DL4J's own fit() (0: the one-iteration check only)")
    ap.add_argument("--no-peak", action="store_true")
    ap.add_argument("--out", default=str(RESULTS / "zoo_coverage.json"))
    ap.add_argument("--resume", action="store_true", help="keep the models already in --out, run the others")
    ap.add_argument("--table-only", action="store_true", help="summarize --out (e.g. of an interrupted run)")
    ap.add_argument("--peaks-only", action="store_true", help="measure only the peaks of --models, into --out")
    ap.add_argument("--configs", metavar="DIR", help="with --peaks-only: where the built models are (or go)")
    ap.add_argument("--repredict", action="store_true", help="recompute the peaks' predictions in --out with the "
                    "current model, keeping what was measured (needs --configs)")
    args = ap.parse_args()
    models = [m for m in args.models.split(",") if m]
    if args.table_only:   # an interrupted run: summarize what it wrote
        finish(Recorder.amending(args.out), models, Path(args.out))
        return
    if args.peaks_only:
        measure_peaks(models, args)
        return
    if args.repredict:
        if not args.configs:
            raise SystemExit("--repredict needs --configs: the folder the models were built into")
        repredict(models, args)
        return
    rec = Recorder("zoo_coverage")
    doc = rec.doc
    doc.update(meta={"batch": args.batch, "peak_batch": args.peak_batch, "fit_iterations": args.fit_iterations,
                     "timeout_s": args.timeout, "peak_timeout_s": args.peak_timeout,
                     "chunk_tolerance": CHUNK_TOLERANCE, "omp_threads": 1, "dl4j": "1.0.0-M2.1"},
               models={})
    if args.resume and Path(args.out).exists():
        doc["models"] = json.loads(Path(args.out).read_text()).get("models", {})
        doc["meta"]["resumed"] = sorted(doc["models"])
    with tempfile.TemporaryDirectory(prefix="pyd4j-zoo-") as tmp:
        folder = Path(tmp)
        for model in models:
            if model in doc["models"]:
                continue
            m = build_model(model, args.batch, folder, args.timeout)
            if m["built"]:
                verdict, files = plan(model, args.batch, folder)
                m.update(verdict)
                if files:
                    m.update(check(model, args.batch, folder, files, args.timeout, args.fit_iterations))
                    if m.get("checked") and not args.no_peak and m["check_s"] <= args.peak_timeout:
                        m["peak"] = peaks(model, args.peak_batch, folder, args.peak_timeout)
                    elif m.get("checked"):
                        m["peak"] = {"skipped": "no peak measured" if args.no_peak else
                                     f"the check took {m['check_s']} s > {args.peak_timeout:.0f} s"}
            doc["models"][model] = m
            print(model, json.dumps({k: v for k, v in m.items() if k not in ("plans",)})[:400], flush=True)
            rec.write(args.out)
    finish(rec, models, Path(args.out))


def measure_peaks(models: list[str], args: argparse.Namespace) -> None:
    """Step 4 alone for `models`, each already accepted and checked in --out."""
    out = Path(args.out)
    rec = Recorder.amending(out)
    doc = rec.doc
    with tempfile.TemporaryDirectory(prefix="pyd4j-zoo-") as tmp:
        folder = Path(args.configs or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for model in models:
            m = doc["models"].get(model)
            if not (m and m.get("checked")):
                raise SystemExit(f"{model}: not accepted and checked in {out}; run it without --peaks-only first")
            if not (folder / f"{model}.json").exists():
                built = build_model(model, args.batch, folder, args.timeout)
                if built.get("size") != m["size"]:
                    raise SystemExit(f"{model}: built at {built.get('size')} now, {m['size']} in {out}: {built}")
            m["peak"] = {**peaks(model, args.peak_batch, folder, args.timeout),
                         "note": f"measured by --peaks-only, timeout {args.timeout:.0f} s, the agent quiet"}
            print(model, json.dumps(m["peak"]), flush=True)
            rec.write(out)
    finish(rec, [m for m in MODELS if m in doc["models"]], out)


def finish(rec: Recorder, models: list[str], out: Path) -> None:
    """Add the summary (models not run are listed as such), write the JSON, print the table."""
    doc = rec.doc
    built = [m for m in doc["models"].values() if m.get("built")]
    accepted = [m for m in built if m.get("planned") and m.get("checked")]
    doc["summary"] = {"models": len(models), "run": len(doc["models"]), "built": len(built),
                      "accepted": len(accepted), "exact": sum(1 for m in accepted if m.get("exact")),
                      "refused": {n: m.get("reason") for n, m in doc["models"].items()
                                  if m.get("built") and not (m.get("planned") and m.get("checked"))},
                      "not_built": {n: m.get("error") or m.get("skipped") for n, m in doc["models"].items()
                                    if not m.get("built")},
                      "not_run": [m for m in models if m not in doc["models"]],
                      "predicted_over_measured_peak": prediction_summary(doc)}
    rec.write(out)
    print(table(doc))
    print()
    print(prediction_table(doc))
    print(json.dumps(doc["summary"], indent=1))


if __name__ == "__main__":
    main()
