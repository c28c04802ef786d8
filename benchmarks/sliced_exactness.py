"""Sliced steps against DL4J's whole-batch steps and a float64 run, on DL4J's zoo models.

    .venv/bin/python benchmarks/sliced_exactness.py [--zoo ResNet50,Darknet19,SqueezeNet] [--batch 4]
        [--iterations 10] [--configs DIR] [--out benchmarks/results/sliced_exactness.json]

Each model (built by DL4J's zoo code, `harness.zoo`) is planned in its sliced variant
(`pyd4j.sched.choose.sliced_variant`: batch normalization in two passes, activation layers in
slices) twice: every step whole (one slice), and every sliceable step (convolutions, batch
normalizations, activations, LRN) in as many batch slices as the batch allows.
`org.pyd4j.fixtures.PlannedCheck` (`-Dpyd4j.check.f64=true`) runs one planned iteration against
DL4J's own `computeGradientAndScore()` and both against the same computation in float64 (the exact
result), then `--iterations` of planned `fit()` against DL4J's `fit()`. Per plan: the worst ratio
over the network's variables of the planned gradient's error to DL4J's own float32 error (both
against float64), the same for the parameters after the iterations (the network's worst of each,
as tests/train/test_sliced_steps.py compares them), and the score's. The claim: at most 4.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from pathlib import Path

from harness import FIXTURES, RESULTS, Recorder
from harness.zoo import build_zoo

FLOOR = 4.0


def plans(config: Path, batch: int, folder: Path) -> list[str]:
    """The sliced variant's plan files: whole, and every sliceable step in slices."""
    from pyd4j.dl4j.graph import network_kind
    from pyd4j.dl4j.plan_file import write_plan
    from pyd4j.dl4j.probe import of_configuration
    from pyd4j.sched.choose import choose_plan, default_cost, sliced_variant
    from pyd4j.sched.convws import assign_workspaces
    from pyd4j.sched.simulator import simulate

    from harness.training import planned_graph

    doc = json.loads(config.read_text())
    g = sliced_variant(planned_graph(config, batch, of_configuration(doc, str(config))))
    if g is None:
        raise SystemExit(f"{config.stem} has no sliceable layer")
    cost = default_cost()
    whole, r = choose_plan(g, policy="liveness")
    sliced = assign_workspaces(choose_plan(g, policy="liveness")[0], cost, 0)
    return [str(write_plan(folder / f"{config.stem}.{tag}.json", p, res, network_kind(doc), str(config)))
            for tag, p, res in (("whole", whole, r), ("sliced", sliced, simulate(sliced, cost)))]


def check(config: Path, batch: int, iterations: int, files: list[str]) -> list[dict]:
    from pyd4j.jvm.classpath import classpath

    cp = ":".join([str(FIXTURES / "pyd4j-fixtures.jar")] + classpath())
    side = config.with_name(config.stem + ".input.json")
    out = subprocess.run(["java", "-Dpyd4j.check.f64=true", "-Xmx3g", "-cp", cp, "org.pyd4j.fixtures.PlannedCheck",
                          str(config), str(side), str(batch), str(iterations), *files],
                         capture_output=True, text=True, timeout=7200, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def summary(r: dict) -> dict:
    """Worst planned-to-DL4J error ratios against float64 (gradients per variable, parameters and score)."""
    grads = [plan_err / fit_err if fit_err > 0 else (0.0 if plan_err <= 1e-7 * scale else float("inf"))
             for _, _, fit_err, plan_err, scale in r["gradient_by_variable"].values()]
    params = r["params_by_variable"].values()
    worst_fit = max(fit_err / scale for _, fit_err, _, scale in params if scale > 0)
    worst_plan = max(plan_err / scale for _, _, plan_err, scale in params if scale > 0)
    exact = r["score_f64"]
    score_ratio = abs(r["score"] - exact) / max(abs(r["score_ref"] - exact), 1e-12 * abs(exact))
    gradient_ok = all(plan_err <= FLOOR * fit_err + 1e-7 * scale
                      for _, _, fit_err, plan_err, scale in r["gradient_by_variable"].values())
    return {"plan": Path(r["plan"]).name, "variables": len(grads), "gradient_worst_ratio": round(max(grads), 3),
            "gradient_median_ratio": round(sorted(grads)[len(grads) // 2], 3), "gradients_within": gradient_ok,
            "params_worst_fit": worst_fit, "params_worst_plan": worst_plan,
            "params_ratio": round(worst_plan / worst_fit, 3) if worst_fit else None,
            "score": r["score"], "score_dl4j": r["score_ref"], "score_f64": exact, "score_ratio": round(score_ratio, 3),
            "sliced_steps": r["stats"]["chunked_steps"], "iterations": r["iteration_count"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--zoo", default="ResNet50,Darknet19,SqueezeNet")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--configs", help="where the zoo models are built (kept between runs)")
    ap.add_argument("--out", default=str(RESULTS / "sliced_exactness.json"))
    args = ap.parse_args()
    rec = Recorder("sliced_exactness")
    rec.doc.update(batch=args.batch, iterations=args.iterations, floor=FLOOR, models={})
    folder = Path(args.configs or tempfile.mkdtemp(prefix="pyd4j-zoo-"))
    models = [m for m in args.zoo.split(",") if m]
    built = build_zoo(models, folder)
    with tempfile.TemporaryDirectory(prefix="pyd4j-sliced-") as tmp:
        for m in models:
            if "error" in built[m]:
                rec.doc["models"][m] = built[m]
                continue
            config = folder / f"{m}.json"
            rows = check(config, args.batch, args.iterations, plans(config, args.batch, Path(tmp)))
            rec.doc["models"][m] = [summary(r) for r in rows]
            print(m, rec.doc["models"][m], flush=True)
            rec.write(args.out)
    rec.write(args.out)


if __name__ == "__main__":
    main()
