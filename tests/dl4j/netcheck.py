"""The properties every generated DL4J network (`tests.dl4j.netgen`) is checked for, on real DL4J in
this process's JVM:

(a) the plan route -- the planner's graph with DL4J's probe (`pyd4j.dl4j.graph.probed_graph`) and the
    plans `choose_plan` and `smallest_plan` make of it, and `pyd4j plan --model FILE` -- gives a plan or
    refuses with an error that names a layer or vertex of the network and the reason; never a traceback;
(b) a network DL4J's own `fit()` trains trains under planned `fit()` -- the liveness plan, the smallest
    plan and an offloading plan (utp, on the disk tier) -- to parameters bit-identical to `fit()`'s; a
    plan that runs steps in batch chunks to within DL4J's own float32 error (the float64 rule below).

Each network ends in one `Outcome`: "exact", "refused" (by name), "failed" (a traceback, an unnamed
refusal, or parameters that differ), or "dl4j_refused" (DL4J's own builders or `fit()` refused it:
not a network DL4J trains, so not counted against the planner).
"""

from __future__ import annotations

import copy
import json
import re
import tempfile
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tests.dl4j import netbuild
from tests.dl4j.netgen import Spec

# (mode, fit() arguments) of the planned runs
MODES = {"liveness": {"policy": "liveness"},
         "smallest": {"policy": "smallest", "tier": "none"},
         "offload": {"policy": "utp", "tier": "disk"}}
# A plan in batch chunks adds floating-point addition orders: its error against the float64 result may
# be this many times DL4J's own float32 error, or one part in 10^6 of the largest parameter
CHUNK_TOLERANCE = 4.0
SEED = 11


@dataclass
class Outcome:
    status: str                      # exact, refused, failed, dl4j_refused
    stage: str = ""                  # build, fit, plan, cli, liveness, smallest, offload
    detail: str = ""
    chunked: list[str] = field(default_factory=list)   # modes whose plan ran steps in batch chunks
    modes: dict[str, str] = field(default_factory=dict)   # each planned mode's own status
    preprocessors: list[str] = field(default_factory=list)   # the input preprocessors DL4J added

    def report(self, spec: Spec) -> str:
        return f"{self.status} at {self.stage}: {self.detail}\nnetwork: {json.dumps(spec)}"


def names(spec: Spec) -> list[str]:
    """What a refusal may name: the network's layers and vertices (DL4J's default names for a
    MultiLayerNetwork), and its inputs."""
    if spec["kind"] == "multilayer":
        return [f"layer{i}" for i in range(len(spec["layers"]))]
    return [s["name"] for s in spec["layers"]] + [f"in{k}" for k in range(len(spec["inputs"]))]


class JarChanged(RuntimeError):
    """The helper jar was rebuilt while this JVM ran (classes of two builds met): not an outcome of the
    network; rebuild (`make setup`) and run again."""


LINKAGE = ("IllegalAccessError", "NoClassDefFoundError", "NoSuchMethodError", "NoSuchFieldError",
           "IncompatibleClassChangeError", "AbstractMethodError")


def classify(err: BaseException, spec: Spec, stage: str) -> Outcome:
    """A refusal that names a layer or vertex and the reason, or a failure (with its traceback)."""
    from pyd4j.dl4j.config import ConfigurationError
    from pyd4j.sched.graph import GraphError

    text = str(err)
    java = getattr(err, "java_class", "") or ""
    if java.rsplit(".", 1)[-1] in LINKAGE and "org.pyd4j" in text:
        raise JarChanged(f"{stage}: {text}") from err
    refusal = isinstance(err, (GraphError, ConfigurationError)) or java.endswith("PlanRefusedException")
    named = any(re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", text) for n in names(spec))
    if refusal and named:
        return Outcome("refused", stage, f"{type(err).__name__}: {text}")
    why = "refusal names no layer" if refusal else "traceback"
    return Outcome("failed", stage, f"{why}: {type(err).__name__}: {text}\n{traceback.format_exc(limit=-6)}")


def sidecar(spec: Spec) -> list[dict[str, Any]]:
    """The network's input types as `<name>.input.json` entries."""
    out = []
    for s in spec["inputs"]:
        k = s["kind"]
        if k in ("ff", "index"):
            out.append({"type": "feedForward", "size": s.get("size", 1)})
        elif k in ("cnn", "cnnflat"):
            out.append({"type": "convolutional" if k == "cnn" else "convolutionalFlat", "height": s["height"],
                        "width": s["width"], "channels": s["channels"]})
        else:
            out.append({"type": "recurrent", "size": s.get("size", 1), "timeSeriesLength": s["steps"]})
    return out


def planner_shapes(spec: Spec) -> Any:
    from pyd4j.dl4j.input_types import planner_shape

    shapes = [planner_shape(s) for s in sidecar(spec)]
    return shapes[0] if len(shapes) == 1 else shapes


def plan_route(spec: Spec, doc: dict[str, Any], net: Any) -> None:
    """Property (a) in process: the probed graph, the chosen and the smallest plan, their plan files."""
    from pyd4j.dl4j.graph import network_kind, probed_graph
    from pyd4j.dl4j.plan_file import plan_document
    from pyd4j.dl4j.probe import of_network
    from pyd4j.sched.choose import choose_plan, smallest_plan

    graph = probed_graph(doc, spec["batch"], planner_shapes(spec), probe=of_network(net))
    for plan, result in (choose_plan(graph), smallest_plan(graph, offload=False), smallest_plan(graph)):
        plan_document(plan, result, network_kind(doc), "generated")


def cli_route(spec: Spec, doc: dict[str, Any]) -> Outcome | None:
    """Property (a) through `pyd4j plan --model FILE --emit-plan PLAN` (in process): None when it wrote
    a plan; the refusal or failure otherwise."""
    from click.testing import CliRunner

    from pyd4j.cli import main

    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "net.json"
        model.write_text(json.dumps(doc))
        (Path(tmp) / "net.input.json").write_text(json.dumps({"inputs": sidecar(spec)}))
        plan = Path(tmp) / "net.plan.json"
        run = CliRunner().invoke(main, ["plan", "--model", str(model), "--batch", str(spec["batch"]),
                                        "--emit-plan", str(plan), "--json"])
        if run.exit_code == 0 and plan.exists():
            return None
        if run.exception is None or isinstance(run.exception, SystemExit):   # pyd4j's one line of error
            message = run.output.strip()
            named = any(re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", message) for n in names(spec))
            return Outcome("refused" if named else "failed", "cli", message if named else
                           f"refusal names no layer: {message}")
        trace = "".join(traceback.format_exception(*run.exc_info)) if run.exc_info else run.output
        return Outcome("failed", "cli", f"traceback (exit {run.exit_code}): {trace[-3000:]}")


def params(net: Any) -> np.ndarray:
    from pyd4j.nd import to_numpy

    return to_numpy(net.params(), copy=True)


def fresh(conf: Any) -> Any:
    """A configuration of its own for each network (a network counts its iterations in its configuration),
    read back from DL4J's JSON: DL4J's clone() of a graph drops a SameDiff vertex's updater."""
    return conf.fromJson(conf.toJson())


def train(spec: Spec, conf: Any, data: list[tuple], init: np.ndarray, **planned: Any) -> tuple[Any, Any]:
    """(parameters after fit(), its plan summary) of a new network of `conf` trained on `data` from the
    parameters `init` and DL4J's random state seeded as for every run (DL4J's seed 0 initialises at random)."""
    import jpype

    from pyd4j.nd import from_numpy
    from pyd4j.train import fit

    net = netbuild.network(fresh(conf))
    net.setParams(from_numpy(np.ascontiguousarray(init.reshape(1, -1)), copy=True))
    jpype.JClass("org.nd4j.linalg.factory.Nd4j").getRandom().setSeed(jpype.JLong(SEED))
    # each run its own copy of the batches: DL4J's fit() may write over its features (a layer dropping its
    # input in place through a MaskLayer, which passes its input on), and pyd4j hands DL4J numpy's memory
    result = fit(net, copy.deepcopy(data), progress=False, prefetch=1,
                 **({"memory": "superneurons", **planned} if planned else {}))
    return params(net), result.plan


def within_float32_error(spec: Spec, planned: np.ndarray, plain: np.ndarray, start: np.ndarray,
                         data: list[tuple]) -> str | None:
    """A chunked plan's parameters against the float64 run from the same start (the float32 parameters
    cast exactly, the same batches): None when their error is at most CHUNK_TOLERANCE x DL4J's own
    float32 error plus one part in 10^6 of the largest parameter; else what exceeded it."""
    if spec["dtype"] == "DOUBLE":
        exact = plain
    else:
        wide = [tuple(None if a is None else _double(a) for a in b) for b in data]
        exact, _ = train(spec, netbuild.configuration(spec, "DOUBLE"), wide, start.astype(np.float64))
    own = float(np.max(np.abs(plain - exact), initial=0.0))
    err = float(np.max(np.abs(planned.astype(np.float64) - exact), initial=0.0))
    limit = CHUNK_TOLERANCE * own + 1e-6 * float(np.max(np.abs(exact), initial=0.0))
    if spec["dtype"] == "DOUBLE":
        limit = 1e-9 * float(np.max(np.abs(exact), initial=1.0))
    return None if err <= limit else f"error {err:.3g} against float64 exceeds {limit:.3g} (DL4J's own {own:.3g})"


def _double(a: Any) -> Any:
    return [None if x is None else x.astype(np.float64) for x in a] if isinstance(a, list) else a.astype(np.float64)


def preprocessors(doc: dict[str, Any]) -> list[str]:
    """The classes of the input preprocessors in a configuration (setInputType adds them)."""
    found = list((doc.get("inputPreProcessors") or {}).values())
    found += [v.get("preProcessor") for v in (doc.get("vertices") or {}).values()]
    return sorted({str(p["@class"]).rsplit(".", 1)[-1] for p in found if isinstance(p, dict) and "@class" in p})


def planned_mode(spec: Spec, mode: str, conf: Any, data: list[tuple], start: np.ndarray,
                 plain: np.ndarray) -> Outcome:
    """One planned run against fit()'s parameters."""
    try:
        planned, plan = train(spec, conf, data, start, **MODES[mode])
    except Exception as err:  # noqa: BLE001 - classified
        return classify(err, spec, mode)
    if plan["trainer"].get("chunked_steps"):
        why = within_float32_error(spec, planned, plain, start, data)
        if why:
            return Outcome("failed", mode, f"chunked plan not within DL4J's float32 error: {why}", [mode])
        return Outcome("exact", mode, "", [mode])
    if planned.tobytes() != plain.tobytes():
        diff = np.abs(planned.astype(np.float64) - plain)
        return Outcome("failed", mode, f"parameters differ from fit()'s: {int(np.sum(diff > 0))} of {diff.size}, "
                       f"largest {float(np.nanmax(diff, initial=0)):.3g}")
    return Outcome("exact", mode)


RANK = ("exact", "refused", "failed")   # a network's status: its worst mode's


def check(spec: Spec, modes: tuple[str, ...] = tuple(MODES), cli: bool = False,
          progress: Any = lambda stage: None) -> Outcome:
    """The outcome of one generated network (see the module docstring); every planned mode runs, and the
    network's status is its worst mode's. `progress(stage)` is told each stage as it starts (a JVM that dies
    in DL4J's own fit() is DL4J's, not the planner's)."""
    progress("build")
    try:
        conf = netbuild.configuration(spec)
        start = params(netbuild.network(fresh(conf)))
    except Exception as err:  # noqa: BLE001 - DL4J's builders refused it
        return Outcome("dl4j_refused", "build", f"{type(err).__name__}: {err}")
    doc = json.loads(str(conf.toJson()))
    found = preprocessors(doc)
    data = netbuild.batches(spec)
    progress("fit")
    try:
        plain, _ = train(spec, conf, data, start)
    except Exception as err:  # noqa: BLE001 - DL4J's own fit() refused it
        return Outcome("dl4j_refused", "fit", f"{type(err).__name__}: {err}", preprocessors=found)
    progress("plan")
    try:
        plan_route(spec, doc, netbuild.network(fresh(conf)))
        outcome = cli_route(spec, doc) if cli else None
    except Exception as err:  # noqa: BLE001 - classified
        outcome = classify(err, spec, "plan")
    if outcome is not None:
        outcome.preprocessors = found
        return outcome
    runs = []
    for mode in modes:
        progress(mode)
        runs.append(planned_mode(spec, mode, conf, data, start, plain))
    worst = max(runs, key=lambda r: RANK.index(r.status))
    return Outcome(worst.status, worst.stage if worst.status != "exact" else ",".join(modes), worst.detail,
                   [m for r in runs for m in r.chunked], {m: r.status for m, r in zip(modes, runs)}, found)
