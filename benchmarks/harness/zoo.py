"""DL4J's zoo models built by DL4J's own code (`org.pyd4j.fixtures.ZooNets`), and the plans the zoo
benchmarks train them under."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from .record import FIXTURES


def zoo_classpath() -> str:
    from pyd4j.jvm.classpath import classpath

    return ":".join([str(FIXTURES / "pyd4j-fixtures.jar"), str(FIXTURES / "zoo-lib" / "*")] + classpath())


def java(args: list[str], timeout: float, heap: str = "4g") -> subprocess.CompletedProcess:
    """A child JVM of the fixtures' class path, one OpenMP thread."""
    return subprocess.run(["java", f"-Xmx{heap}", *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))


def build_zoo(models: list[str], folder: Path, timeout: float = 1200) -> dict[str, dict[str, Any]]:
    """DL4J's zoo models built by DL4J's code (`org.pyd4j.fixtures.ZooNets`) at the smallest square input
    each builds at, as `<model>.json` with its `<model>.input.json` in `folder`: {model: {"size", "kind"} or
    {"error"}}. Models already in the folder are not built again."""
    folder.mkdir(parents=True, exist_ok=True)
    todo = [m for m in models if not (folder / f"{m}.json").exists()]
    built = {}
    if todo:
        out = java(["-cp", zoo_classpath(), "org.pyd4j.fixtures.ZooNets", str(folder), *todo], timeout)
        built = {r["model"]: r for r in (json.loads(x) for x in out.stdout.splitlines() if x.startswith("{"))}
    return {m: ({"size": built.get(m, {}).get("size"), "kind": built.get(m, {}).get("kind")}
                if (folder / f"{m}.json").exists() else {"error": built.get(m, {}).get("error", "not built")})
            for m in models}


def build_model(model: str, batch: int, folder: Path, timeout: float) -> dict[str, Any]:
    """One zoo model built into `folder` and probed by DL4J at `batch` (`<model>.info.json`: what DL4J
    says of each layer): {"built": True, "size", "kind", "build_s"}, or {"built": False} and why."""
    t = time.monotonic()
    try:
        out = java([f"-Dpyd4j.probe.batch={batch}", "-cp", zoo_classpath(), "org.pyd4j.fixtures.ZooNets",
                    str(folder), model], timeout)
    except subprocess.TimeoutExpired:
        return {"built": False, "skipped": f"building took more than {timeout:.0f} s"}
    rows = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
    if out.returncode != 0 or not rows:
        return {"built": False, "error": (out.stderr or out.stdout)[-600:]}
    r = rows[-1]
    if r.get("size") is None:
        return {"built": False, "error": f"DL4J does not build it at any size tried (last: {r.get('error')})"}
    return {"built": True, "size": r["size"], "kind": r["kind"], "build_s": round(time.monotonic() - t, 1)}


def built_config(model: str, folder: Path, batch: int = 1, timeout: float = 600) -> Path:
    """`model`'s configuration in `folder`, built there first where it is not yet; exits naming why not."""
    config = folder / f"{model}.json"
    if not config.exists():
        built = build_model(model, batch, folder, timeout)
        if not built["built"]:
            raise SystemExit(f"{model}: not built: {built.get('skipped') or built.get('error', '')[-300:]}")
    return config


def input_shape(inp: dict) -> tuple[int, ...]:
    """A model's input shape from its .input.json entry: (C, H, W), or (features, time steps)."""
    return ((inp["channels"], inp["height"], inp["width"]) if inp["type"] == "convolutional"
            else (inp["size"], inp["timeSeriesLength"]))


def peak_plans(model: str, batch: int, folder: Path) -> tuple[dict[str, str], dict[str, int]]:
    """Liveness and smallest plans at the peak-measuring batch, made as `pyd4j plan` makes them (the
    opaque steps' working memory from the line through probes at two small batches,
    `pyd4j.dl4j.probe.fitted`, in this process's JVM), and the device peak each predicts."""
    from pyd4j.dl4j.graph import network_kind, probed_graph
    from pyd4j.dl4j.plan_file import write_plan
    from pyd4j.dl4j.probe import fitted, of_configuration
    from pyd4j.sched.choose import choose_plan, smallest_plan

    doc = json.loads((folder / f"{model}.json").read_text())
    inp = json.loads((folder / f"{model}.input.json").read_text())["inputs"][0]
    g = probed_graph(doc, batch, input_shape(inp), probe=fitted(of_configuration(doc, model)))
    files, predicted = {}, {}
    for policy in ("liveness", "smallest"):
        p, r = smallest_plan(g, offload=False) if policy == "smallest" else choose_plan(g, policy=policy)
        path = folder / f"{model}.{batch}.{policy}.plan.json"
        path.unlink(missing_ok=True)
        files[policy] = str(write_plan(path, p, r, network_kind(doc), model))
        predicted[policy] = r.device_peak_bytes
    return files, predicted
