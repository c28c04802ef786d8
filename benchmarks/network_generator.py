"""Generated DL4J networks through the planner and planned training (the properties of
tests/dl4j/netcheck.py), counted per layer class, vertex class, preprocessor and updater.

    .venv/bin/python benchmarks/network_generator.py [--count 1000] [--per-seed 100] [--first-seed 0]
        [--cli-every 10] [--timeout 1800] [--resume] [--out benchmarks/results/network_generator.json]

Networks come from the hypothesis strategies of tests/dl4j (`tests.dl4j.netgraph.network_specs`, DL4J's own
builders), drawn in chunks of `--per-seed` distinct networks, each chunk from its own seed in a child
process (one JVM each; a network that crashes or hangs its JVM is recorded as failed and the chunk goes
on after it). Every network: DL4J's own fit() on two batches; the plan route (probed graph, the chosen
and the smallest plan; every `--cli-every`-th network also `pyd4j plan --model FILE --emit-plan`); planned
fit() under liveness, the smallest plan and utp on the disk tier, each against fit()'s parameters
(bit-identical; a plan in batch chunks within DL4J's own float32 error).

Statuses: exact; refused (an error naming the layer and the reason); failed (a traceback, an unnamed
refusal, different parameters, a crash); dl4j_refused (DL4J's own builders or fit() refused it: not a
network DL4J trains). Rows stream to `<out>.partial.jsonl` (kept for --resume until the run is complete);
the JSON has the harness's run record (command line, commit, date, machine, load), the totals, each planned
mode's share, and a table per layer class, vertex class, preprocessor and updater.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from harness import RESULTS, ROOT, Recorder

STATUSES = ("exact", "refused", "failed", "dl4j_refused")


def child(seed: int, count: int, cli_every: int, skip: set[str], rows: Path) -> None:
    """Draw `count` distinct networks from `seed` that are not in `skip` and append one row per network to `rows` (a "start"
    line first, so that the parent can name a network that crashed the JVM)."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed

    import pyd4j.jvm
    from tests.dl4j.netcheck import JarChanged, check
    from tests.dl4j.netgraph import network_specs

    pyd4j.jvm.start(heap_max="2g")
    seen: set[str] = set()

    @hseed(seed)
    @settings(max_examples=count * 4, phases=[Phase.generate], database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(network_specs())
    def run(spec: dict[str, Any]) -> None:
        key = json.dumps(spec, sort_keys=True)
        if len(seen) >= count or key in seen or key in skip:   # a network done already is not drawn again
            return
        seen.add(key)
        with rows.open("a") as f:
            f.write(json.dumps({"start": spec, "seed": seed}) + "\n")
        t0 = time.perf_counter()
        try:
            outcome = check(spec, cli=cli_every > 0 and len(seen) % cli_every == 0,
                            progress=lambda stage: rows.open("a").write(json.dumps({"at": stage}) + "\n"))
        except JarChanged:   # not this network's outcome: the parent runs the chunk again in a new JVM
            with rows.open("a") as f:
                f.write(json.dumps({"abort": spec}) + "\n")
            os._exit(3)
        row = {"spec": spec, "seed": seed, "status": outcome.status, "stage": outcome.stage,
               "detail": outcome.detail[:4000], "modes": outcome.modes, "chunked": outcome.chunked,
               "preprocessors": outcome.preprocessors, "seconds": round(time.perf_counter() - t0, 3)}
        with rows.open("a") as f:
            f.write(json.dumps(row) + "\n")

    run()


def read_rows(rows: Path) -> list[dict[str, Any]]:
    """Finished rows, and a failed row for a network that was started and never finished (its JVM died)."""
    out: list[dict[str, Any]] = []
    started: dict[str, dict[str, Any]] = {}
    if not rows.exists():
        return out
    for line in rows.read_text().splitlines():
        r = json.loads(line)
        if "at" in r:   # the stage the last network started is at
            if started:
                started[next(reversed(started))]["at"] = r["at"]
        elif "start" in r:
            started[json.dumps(r["start"], sort_keys=True)] = r
        elif "abort" in r:   # the helper jar changed under the JVM: no outcome, drawn again
            started.pop(json.dumps(r["abort"], sort_keys=True), None)
        else:
            started.pop(json.dumps(r["spec"], sort_keys=True), None)
            out.append(r)
    for r in started.values():   # its JVM died: in DL4J's own builders or fit(), DL4J's; anywhere else, a failure
        dl4j = r.get("at") in ("build", "fit")
        out.append({"spec": r["start"], "seed": r["seed"], "status": "dl4j_refused" if dl4j else "failed",
                    "stage": "crash", "detail": f"the JVM died or hung at stage {r.get('at')!r}"
                    + (" (in DL4J's own builders or fit())" if dl4j else ""), "modes": {}, "chunked": [],
                    "preprocessors": [], "seconds": None})
    return out


def aborted(rows: Path) -> bool:
    """Whether the last line is an abort (the helper jar changed under the JVM): the chunk runs again."""
    lines = rows.read_text().splitlines() if rows.exists() else []
    return bool(lines) and '"abort"' in lines[-1][:10]


def classes(spec: dict[str, Any]) -> tuple[set[str], set[str]]:
    """(layer classes, vertex classes) of a network; a wrapper's layer counts too."""
    from tests.dl4j.netbuild import VERTEX_CLASSES

    layers, vertices = set(), set()
    for s in spec["layers"]:
        (vertices if s["class"] in VERTEX_CLASSES else layers).add(s["class"])
        if "layer" in s:
            layers.add(s["layer"]["class"])
    return layers, vertices


def table(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Totals and per-class counts: generated, accepted (planned and trained), exact, refused by name, failed,
    DL4J-itself-refused; per planned mode, how many of the networks fit() trains it trained exactly."""
    def blank() -> dict[str, int]:
        return {"generated": 0, "accepted": 0, "exact": 0, "refused": 0, "failed": 0, "dl4j_refused": 0}

    by: dict[str, dict[str, dict[str, int]]] = defaultdict(lambda: defaultdict(blank))
    total = blank()
    modes: dict[str, Counter] = defaultdict(Counter)
    for r in rows:
        layers, vertices = classes(r["spec"])
        keys = [("layer", c) for c in layers] + [("vertex", c) for c in vertices] + \
            [("preprocessor", c) for c in r.get("preprocessors", [])] + [("updater", r["spec"]["updater"])] + \
            [("kind", r["spec"]["kind"]), ("dtype", r["spec"]["dtype"])]
        accepted = r["status"] == "exact" or (r["status"] == "failed" and r["stage"] in ("liveness", "smallest", "offload"))
        for counts in [total] + [by[k][c] for k, c in keys]:
            counts["generated"] += 1
            counts[r["status"]] += 1
            counts["accepted"] += int(accepted)
        if r["status"] != "dl4j_refused":
            for m, status in (r.get("modes") or {}).items():
                modes[m][status] += 1
    trained = total["generated"] - total["dl4j_refused"]
    return {"totals": {**total, "trained_by_fit": trained,
                       "exact_share_of_fit_trained": round(total["exact"] / trained, 4) if trained else None,
                       "tracebacks": sum(1 for r in rows if r["status"] == "failed" and "traceback" in r["detail"]),
                       "crashes": sum(1 for r in rows if r["stage"] == "crash")},
            "modes": {m: {**c, "exact_share_of_fit_trained": round(c["exact"] / trained, 4) if trained else None}
                      for m, c in modes.items()},
            "by": {k: dict(sorted(v.items())) for k, v in sorted(by.items())}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=1000, help="distinct networks in all")
    ap.add_argument("--per-seed", type=int, default=100, help="networks per child process (one seed each)")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--cli-every", type=int, default=10, help="every n-th network also through `pyd4j plan` (0: none)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds a child may run")
    ap.add_argument("--resume", action="store_true", help="keep the rows of an earlier run and add to them")
    ap.add_argument("--out", default=str(RESULTS / "network_generator.json"))
    ap.add_argument("--child", nargs=4, metavar=("SEED", "COUNT", "CLI_EVERY", "ROWS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        rows = Path(args.child[3])
        done = {json.dumps(r["spec"], sort_keys=True) for r in read_rows(rows)}
        child(int(args.child[0]), int(args.child[1]), int(args.child[2]), done, rows)
        return
    out = Path(args.out)
    rows_path = out.with_suffix(".partial.jsonl")
    if not args.resume and rows_path.exists():
        rows_path.unlink()
    rec = Recorder("network_generator")
    run_chunks(args, rows_path)
    rows = read_rows(rows_path)[: args.count]
    rec.doc.update({"omp_threads": 1, "networks": len(rows), **table(rows),
                    "failures": [{k: r[k] for k in ("status", "stage", "detail", "spec")}
                                 for r in rows if r["status"] == "failed"],
                    "refusals": sorted(Counter(r["detail"].split("\n")[0][:200]
                                               for r in rows if r["status"] == "refused").items()),
                    "dl4j_refusals": sorted(Counter(r["detail"].split("\n")[0][:160] for r in rows
                                                    if r["status"] == "dl4j_refused").items(), key=lambda kv: -kv[1])})
    rec.write(out)
    if len(rows) >= args.count:
        rows_path.unlink()   # complete: nothing to resume
    t = rec.doc["totals"]
    print(f"{len(rows)} networks: {t['exact']} exact, {t['refused']} refused by name, {t['failed']} failed "
          f"({t['tracebacks']} tracebacks), {t['dl4j_refused']} refused by DL4J itself; exact share of what fit() "
          f"trains {t['exact_share_of_fit_trained']}")


def run_chunks(args: argparse.Namespace, rows_path: Path) -> None:
    """Child processes, one seed each, until `args.count` networks have a row."""
    seed = args.first_seed
    while True:
        rows = read_rows(rows_path)
        if len(rows) >= args.count:
            return
        have = sum(1 for r in rows if r["seed"] == seed)
        want = min(args.per_seed - have, args.count - len(rows))
        if want <= 0:
            seed += 1
            continue
        print(f"== seed {seed}: {have} done, {want} to go", flush=True)
        try:
            subprocess.run([sys.executable, __file__, "--child", str(seed), str(want), str(args.cli_every),
                            str(rows_path)], cwd=ROOT, timeout=args.timeout, env=dict(os.environ, OMP_NUM_THREADS="1"),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            print(f"   seed {seed} ran past {args.timeout} s", flush=True)
        if len(read_rows(rows_path)) == len(rows) and not aborted(rows_path):
            seed += 1   # no progress from this seed (every network it draws is done): the next one


if __name__ == "__main__":
    main()
