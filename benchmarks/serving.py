"""`pyd4j serve` under a memory budget: 8 DL4J models whose footprints sum to >= 3x the budget,
a Zipf request mix over loopback, against all models resident and against loading from the zip.

    .venv/bin/python benchmarks/serving.py [--requests 400] [--soak 1250] [--out benchmarks/results/serving.json]

All in one process and one JVM (as the server runs). The models are MLPs and LeNets from
examples/networks (hidden sizes varied), written as ModelSerializer zips. Three servers see the
same request sequence (batch-1 JSON requests from an async httpx client, `--concurrency` at once):

  budget     the disk tier: idle models evicted LRU, restored from a memory-mapped file
  resident   no budget: every model resident (the speed ceiling, at 3x+ the memory)
  zip        the same budget, an evicted model reloaded from its zip (load on demand)

run in the order resident, budget, zip, zip, budget, resident (`--rounds 2`), figures pooled.
Also: restore from the disk tier vs ModelSerializer restore from the zip per model (interleaved,
in-process); the server's latency over calling output() in-process at batch 1 and 32
(interleaved, sequential); the RSS an eviction gives back on a larger MLP; and a soak
(`--soak N` requests per model through the budgeted server, and through one with no budget) with
the profiler's leak verdict; `--soak-only` reruns just the soaks into an existing result.
Bounded: `--max-seconds` per run of the mix.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from harness import RESULTS, Recorder, interleave, order
from harness.training import NETWORKS

# (name, base network, first hidden layer size or None for the example as it is, seed)
MODELS = [("mlp256", "mlp", 256, 1), ("mlp512", "mlp", 512, 2), ("mlp1024", "mlp", 1024, 3),
          ("mlp1536", "mlp", 1536, 4), ("mlp2048", "mlp", 2048, 5), ("mlp3072", "mlp", 3072, 6),
          ("lenet_a", "lenet", None, 7), ("lenet_b", "lenet", None, 8)]


def write_models(d: Path) -> dict[str, Path]:
    """The 8 models as ModelSerializer zips (parameters from each configuration's seed)."""
    from org.deeplearning4j.nn.conf import MultiLayerConfiguration
    from org.deeplearning4j.nn.multilayer import MultiLayerNetwork
    from org.deeplearning4j.util import ModelSerializer

    out = {}
    for name, base, hidden, seed in MODELS:
        doc = json.loads((NETWORKS / f"{base}.json").read_text())
        if hidden:
            doc["confs"][0]["layer"]["nout"] = hidden
            doc["confs"][1]["layer"]["nin"] = hidden
        for c in doc["confs"]:
            c["seed"] = seed
        net = MultiLayerNetwork(MultiLayerConfiguration.fromJson(json.dumps(doc)))
        net.init()
        path = d / f"{name}.zip"
        ModelSerializer.writeModel(net, str(path), False)
        (d / f"{name}.input.json").write_text((NETWORKS / f"{base}.input.json").read_text())
        out[name] = path
    return out


def zipf_plan(names: list[str], n: int, s: float, seed: int) -> list[str]:
    """n model names drawn with P(rank k) ~ 1/k^s (rank 1: the first name)."""
    w = 1.0 / np.arange(1, len(names) + 1) ** s
    idx = np.random.default_rng(seed).choice(len(names), size=n, p=w / w.sum())
    return [names[i] for i in idx]


def percentiles(xs: list[float]) -> dict[str, float]:
    a = np.array(xs, dtype=float) * 1000
    return {"p50_ms": round(float(np.percentile(a, 50)), 2), "p99_ms": round(float(np.percentile(a, 99)), 2),
            "mean_ms": round(float(a.mean()), 2)}


def run_mix(models: dict[str, Path], mode: str, budget: int, plan: list[str], args) -> dict:
    from pyd4j.serve import ModelServer
    from pyd4j.serve.soak import drive, request_body

    server = ModelServer({n: p for n, p in models.items()}, None if mode == "resident" else budget, port=0,
                         max_batch=args.max_batch, max_wait_ms=args.max_wait_ms, queue_size=4 * len(plan),
                         timeout_s=300, restore_from="zip" if mode == "zip" else "disk")
    server.start()
    try:
        bodies = {n: request_body(server.model(n), 1, seed=i) for i, n in enumerate(models)}
        drive(server.url, list(models), bodies, 1)  # one request each: JIT and workspaces warm, as in service
        t0 = time.perf_counter()
        results = drive(server.url, plan, bodies, args.concurrency, args.max_seconds)
        seconds = time.perf_counter() - t0
        st = server.status()
    finally:
        server.stop()
    ok = [r for r in results if r[1] == 200]
    restores = [m for m in st["models"].values() if m.get("restores")]
    return {"mode": mode, "requests": len(results), "ok": len(ok), "failed": len(results) - len(ok),
            "statuses": sorted({r[1] for r in results}), "server_errors": sum(r[1] >= 500 for r in results), "seconds": round(seconds, 2),
            "throughput_rps": round(len(ok) / seconds, 2), **percentiles([r[2] for r in ok]),
            "evictions": sum(m.get("evictions", 0) for m in st["models"].values()),
            "restores": sum(m.get("restores", 0) for m in st["models"].values()),
            "resident_bytes_end": st["resident_bytes"], "peak_resident_bytes": st["peak_resident_bytes"],
            "restore_models": len(restores)}


def restore_vs_zip(models: dict[str, Path], repeats: int) -> dict:
    """Per model, in-process: restore from the disk tier vs ModelSerializer restore from the zip (medians)."""
    from org.deeplearning4j.util import ModelSerializer

    from pyd4j.serve.model import ServedModel

    d = Path(tempfile.mkdtemp(prefix="pyd4j-bench-spill-"))
    out = {}
    for name, path in models.items():
        m = ServedModel(name, path, d)
        fp = m.load(32)
        x = [np.zeros((1, *s.shape[1:]), np.float32) for s in m.inputs]

        def restore(how: str, _round: int, m=m, path=path, x=x) -> float:
            m.evict()
            if how == "disk":
                seconds = m.restore()
            else:
                t0 = time.perf_counter()
                m.net = ModelSerializer.restoreMultiLayerNetwork(str(path), False)
                seconds = time.perf_counter() - t0
            m.infer(x)
            return seconds

        times = interleave(("disk", "zip"), repeats, restore)
        disk, zipped = times["disk"], times["zip"]
        m.close()
        out[name] = {"footprint_bytes": fp.total_bytes, "params_bytes": fp.params_bytes,
                     "workspace_bytes": fp.workspace_bytes, "estimate_bytes": fp.estimate_bytes,
                     "zip_bytes": path.stat().st_size,
                     "restore_disk_ms": round(statistics.median(disk) * 1000, 2),
                     "load_zip_ms": round(statistics.median(zipped) * 1000, 2),
                     "zip_over_disk": round(statistics.median(zipped) / statistics.median(disk), 2)}
    return out


def server_overhead(models: dict[str, Path], name: str, repeats: int) -> dict:
    """Sequential requests to one model over HTTP (JSON) vs net.output() in-process, interleaved."""
    import httpx

    import pyd4j.nd as nd
    from pyd4j.serve import ModelServer
    from pyd4j.serve.soak import request_body

    out = {}
    with ModelServer({name: models[name]}, port=0, max_batch=32, max_wait_ms=0) as server:
        net = server.model(name).net  # the same network object; in-process calls from this thread
        with httpx.Client(base_url=server.url, timeout=120) as client:
            for batch in (1, 32):
                body = request_body(server.model(name), batch)
                x = np.asarray(json.loads(body)["inputs"][0]["data"], np.float32).reshape(batch, -1)
                http_s, local_s = [], []
                for i in range(repeats + 3):
                    t0 = time.perf_counter()
                    r = client.post(f"/v2/models/{name}/infer", content=body, headers={"content-type": "application/json"})
                    t1 = time.perf_counter()
                    assert r.status_code == 200, r.text
                    y = nd.to_numpy(net.output(nd.from_numpy(x)), copy=True)
                    t2 = time.perf_counter()
                    if i >= 3:  # warm-up
                        http_s.append(t1 - t0)
                        local_s.append(t2 - t1)
                np.testing.assert_allclose(np.asarray(r.json()["outputs"][0]["data"]).reshape(y.shape), y, rtol=1e-5, atol=1e-6)
                h, loc = statistics.median(http_s), statistics.median(local_s)
                out[f"batch{batch}"] = {"server_ms": round(h * 1000, 3), "in_process_ms": round(loc * 1000, 3),
                                        "server_over_in_process": round(h / loc, 2), "overhead_ms": round((h - loc) * 1000, 3),
                                        "repeats": repeats}
    return out


def backend_choice(models: dict[str, Path], name: str, repeats: int) -> dict:
    """output() on one model through in-process ND4J (JPype, what the server uses) vs the helper jar's
    out-of-process JVM (Py4J gateway, arrays through its shared-memory arena): numpy in, numpy out,
    batch 1 and 32, interleaved, medians. The faster one is the server's route."""
    from pyd4j.jvm.gateway import Gateway
    from pyd4j.serve.model import ServedModel

    m = ServedModel(name, models[name], Path(tempfile.mkdtemp(prefix="pyd4j-bench-backend-")))
    m.load(32)
    out = {}
    with Gateway(heap_max="1g") as gw:
        net = gw.jvm.org.deeplearning4j.util.ModelSerializer.restoreMultiLayerNetwork(str(models[name]), False)
        for batch in (1, 32):
            x = np.random.default_rng(batch).random((batch, *m.inputs[0].shape[1:]), dtype=np.float32)
            inproc, child = [], []
            for i in range(repeats + 3):
                t0 = time.perf_counter()
                y_in = m.infer([x])[0]
                t1 = time.perf_counter()
                y_gw = gw.get(net.output(gw.put(x)))
                t2 = time.perf_counter()
                if i >= 3:
                    inproc.append(t1 - t0)
                    child.append(t2 - t1)
            np.testing.assert_allclose(y_gw, y_in, rtol=1e-5, atol=1e-6)  # the same network both ways
            a, b = statistics.median(inproc), statistics.median(child)
            out[f"batch{batch}"] = {"in_process_jpype_ms": round(a * 1000, 3), "gateway_py4j_ms": round(b * 1000, 3),
                                    "gateway_over_in_process": round(b / a, 2), "repeats": repeats}
    m.close()
    faster = {k: "in_process" if v["gateway_over_in_process"] >= 1 else "gateway" for k, v in out.items()}
    return {"model": name, **out, "faster": faster}


def eviction_frees(repeats: int = 3) -> dict:
    """RSS before and after evicting, and after restoring, an MLP 784-4096-4096-10 (~80 MB of parameters)."""
    import psutil

    from pyd4j.serve.model import ServedModel

    d = Path(tempfile.mkdtemp(prefix="pyd4j-bench-big-"))
    doc = json.loads((NETWORKS / "mlp.json").read_text())
    doc["confs"][0]["layer"]["nout"] = 4096
    doc["confs"][1]["layer"]["nin"] = 4096
    doc["confs"][1]["layer"]["nout"] = 4096
    doc["confs"][2]["layer"]["nin"] = 4096
    (d / "big.json").write_text(json.dumps(doc))
    (d / "big.input.json").write_text((NETWORKS / "mlp.input.json").read_text())
    m = ServedModel("big", d / "big.json", d)
    fp = m.load(32)
    x = [np.zeros((32, 784), np.float32)]
    rss = psutil.Process().memory_info
    freed, back = [], []
    for _ in range(repeats):
        m.infer(x)
        r0 = rss().rss
        m.evict()
        r1 = rss().rss
        m.restore()
        m.infer(x)
        r2 = rss().rss
        freed.append(r0 - r1)
        back.append(r2 - r1)
    m.close()
    return {"params_bytes": fp.params_bytes, "footprint_bytes": fp.total_bytes,
            "rss_freed_by_eviction_bytes": int(statistics.median(freed)),
            "rss_taken_by_restore_bytes": int(statistics.median(back)),
            "freed_over_footprint": round(statistics.median(freed) / fp.total_bytes, 3), "repeats": repeats}


def soak_run(models: dict[str, Path], budget: int, n: int, args) -> dict:
    from pyd4j.commands.serve import judge_soak
    from pyd4j.serve import ModelServer
    from pyd4j.serve.soak import soak

    with ModelServer({k: v for k, v in models.items()}, budget, port=0, max_batch=args.max_batch,
                     max_wait_ms=args.max_wait_ms, queue_size=256) as server:
        result = judge_soak(soak(server, n, points=10, concurrency=args.concurrency))
    return {k: v for k, v in result.items() if k != "samples"} | {
        "rss_mib": [round(s["rss"] / 2**20, 1) for s in result["samples"]],
        "heap_live_mib": [round(s["heap_live"] / 2**20, 1) for s in result["samples"]]}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=400, help="requests per run of the Zipf mix")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of resident/budget/zip (order alternates)")
    ap.add_argument("--zipf", type=float, default=1.1, help="Zipf exponent of the request mix")
    ap.add_argument("--ratio", type=float, default=3.5, help="sum of footprints / budget (>= 3)")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--max-batch", type=int, default=32)
    ap.add_argument("--max-wait-ms", type=float, default=2.0)
    ap.add_argument("--max-seconds", type=float, default=300.0, help="bound on one run of the mix")
    ap.add_argument("--repeats", type=int, default=7, help="repeats of the in-process comparisons")
    ap.add_argument("--soak", type=int, default=1250, help="soak requests per model (0: no soak)")
    ap.add_argument("--soak-only", action="store_true",
                    help="run only the soaks (budget and no budget) and replace them in an existing --out")
    ap.add_argument("--soak-budget-only", action="store_true",
                    help="with --soak-only: only the soak under the budget (the one with evictions)")
    ap.add_argument("--backend-only", action="store_true",
                    help="run only the in-process vs gateway comparison and put it in an existing --out")
    ap.add_argument("--out", default=str(RESULTS / "serving.json"))
    return ap


def again(args: argparse.Namespace, models: dict[str, Path]) -> None:
    """--backend-only and --soak-only: measure again only those, into the existing --out."""
    rec = Recorder.amending(args.out)
    doc = rec.doc
    if args.backend_only:
        doc["backend_choice"] = backend_choice(models, "mlp1024", args.repeats * 3)
        rec.write(args.out, indent=2)
        print(json.dumps(doc["backend_choice"]))
        return
    doc["soak"] = soak_run(models, doc["budget_bytes"], args.soak, args)
    if not args.soak_budget_only:
        doc["soak_no_budget"] = soak_run(models, None, args.soak, args)
    doc["settings"]["soak"] = args.soak
    rec.write(args.out, indent=2)
    for key in ("soak",) if args.soak_budget_only else ("soak", "soak_no_budget"):
        print(key, json.dumps({k: doc[key][k] for k in ("requests", "failed", "verdict", "seconds", "rss_mib", "heap_live_mib")}))


def pooled(runs: list[dict], mode: str) -> dict:
    """The runs of one mode of the mix, pooled: medians of their percentiles and throughput, sums of the rest."""
    rs = [r for r in runs if r["mode"] == mode]
    return {"runs": len(rs), "requests": sum(r["requests"] for r in rs), "failed": sum(r["failed"] for r in rs),
            "p50_ms": round(statistics.median(r["p50_ms"] for r in rs), 2),
            "p99_ms": round(statistics.median(r["p99_ms"] for r in rs), 2),
            "throughput_rps": round(statistics.median(r["throughput_rps"] for r in rs), 2),
            "restores": sum(r["restores"] for r in rs), "evictions": sum(r["evictions"] for r in rs),
            "peak_resident_bytes": max(r["peak_resident_bytes"] for r in rs)}


def comparison(summary: dict, restore: dict) -> dict:
    b, a, z = summary["budget"], summary["resident"], summary["zip"]
    return {"budget_p50_over_resident": round(b["p50_ms"] / a["p50_ms"], 2),
            "budget_p99_over_resident": round(b["p99_ms"] / a["p99_ms"], 2),
            "budget_throughput_over_resident": round(b["throughput_rps"] / a["throughput_rps"], 2),
            "zip_p50_over_budget": round(z["p50_ms"] / b["p50_ms"], 2),
            "zip_p99_over_budget": round(z["p99_ms"] / b["p99_ms"], 2),
            "budget_throughput_over_zip": round(b["throughput_rps"] / z["throughput_rps"], 2),
            "median_zip_load_over_disk_restore": round(statistics.median(r["zip_over_disk"] for r in restore.values()), 2)}


def main() -> None:
    args = parser().parse_args()
    import logging

    import pyd4j.jvm

    logging.getLogger("pyd4j.serve").setLevel(logging.WARNING)
    pyd4j.jvm.start(heap_max="2g")
    t_start = time.perf_counter()
    d = Path(tempfile.mkdtemp(prefix="pyd4j-bench-models-"))
    models = write_models(d)
    if args.backend_only or args.soak_only:
        again(args, models)
        return
    rec = Recorder("serving")
    restore = restore_vs_zip(models, args.repeats)
    footprints = {n: r["footprint_bytes"] for n, r in restore.items()}
    budget = max(int(sum(footprints.values()) / args.ratio), max(footprints.values()))
    plan = zipf_plan(list(models), args.requests, args.zipf, seed=0)
    print(f"footprints {footprints}, sum {sum(footprints.values())}, budget {budget}", file=sys.stderr)
    modes = ["resident", "budget", "zip"]
    runs = []
    for r in range(args.rounds):
        for mode in order(modes, r):
            runs.append(run_mix(models, mode, budget, plan, args))
            print(json.dumps(runs[-1]), file=sys.stderr)
    summary = {m: pooled(runs, m) for m in modes}
    overhead = server_overhead(models, "mlp1024", args.repeats * 3)
    backends = backend_choice(models, "mlp1024", args.repeats * 3)
    frees = eviction_frees()
    soak = soak_run(models, budget, args.soak, args) if args.soak else None
    soak_no_budget = soak_run(models, None, args.soak, args) if args.soak else None
    rec.doc.update({
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "models": restore, "footprint_sum_bytes": sum(footprints.values()), "budget_bytes": budget,
        "footprint_sum_over_budget": round(sum(footprints.values()) / budget, 2),
        "server_errors": sum(r["server_errors"] for r in runs),  # a Java OOM in output() answers 500
        "failed_requests": sum(r["failed"] for r in runs),
        "mix": summary, "comparison": comparison(summary, restore), "runs": runs,
        "server_overhead": overhead, "backend_choice": backends, "eviction_frees": frees, "soak": soak,
        "soak_no_budget": soak_no_budget,
        "seconds": round(time.perf_counter() - t_start, 1),
    })
    rec.write(args.out, indent=2)
    print(json.dumps({k: rec.doc[k] for k in ("footprint_sum_over_budget", "failed_requests", "mix", "comparison",
                                              "server_overhead", "eviction_frees")}, indent=1))
    if soak:
        print(json.dumps({k: soak[k] for k in ("requests", "failed", "verdict", "seconds")}))


if __name__ == "__main__":
    main()
