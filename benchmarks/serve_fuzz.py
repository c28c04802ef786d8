"""schemathesis against a running `pyd4j serve` with two models, from the server's own OpenAPI
description (tests/serve/fuzzing.py does the fuzzing; tests/serve/test_fuzz.py runs a few hundred
requests of it): rounds of seeded generation until at least --requests requests were sent. Counts
server errors (5xx other than 503/504, by design), bodies that are not JSON, schemathesis' schema
check failures, and readiness read between operations. Result: benchmarks/results/serve_fuzz.json.

    .venv/bin/python benchmarks/serve_fuzz.py [--requests 2000] [--examples 100]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from harness import RESULTS, Recorder
from harness.training import NETWORKS
from tests.serve.fuzzing import fuzz, start_serve, stop
SERVE_ARGS = ("--max-batch", "8", "--slice-rows", "whole", "--budget", "8m")  # a budget for one model at a time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--examples", type=int, default=100, help="cases per operation and mode in one round")
    ap.add_argument("--out", type=Path, default=RESULTS / "serve_fuzz.json")
    args = ap.parse_args()
    rec = Recorder("serve_fuzz")
    log = Path(tempfile.mkdtemp(prefix="pyd4j-bench-fuzz-")) / "serve.log"
    proc, url = start_serve({"mlp": NETWORKS / "mlp.json", "lenet": NETWORKS / "lenet.json"}, SERVE_ARGS, log=log)
    rounds, total = [], {"requests": 0, "server_errors": 0, "invalid_json": 0, "check_failures": 0, "not_ready": 0}
    statuses: dict[str, int] = {}
    try:
        seed = 0
        while total["requests"] < args.requests:
            t0 = time.monotonic()
            r = fuzz(url, args.examples, seed)
            r.pop("labels", None)
            r["seconds"] = round(time.monotonic() - t0, 1)
            r["seed"] = seed
            rounds.append(r)
            for k in total:
                total[k] += r[k]
            for k, v in r["statuses"].items():
                statuses[k] = statuses.get(k, 0) + v
            print(f"round {seed}: {r['requests']} requests, {r['server_errors']} server errors, "
                  f"{r['invalid_json']} not JSON, {r['check_failures']} check failures", flush=True)
            seed += 1
    finally:
        code = stop(proc)
    text = log.read_text(errors="replace")
    rec.doc.update(models=["mlp", "lenet"], serve_args=list(SERVE_ARGS), examples_per_operation=args.examples,
                   **total, statuses=statuses, rounds=rounds, exit_code=code,
                   tracebacks_in_log=text.count("Traceback"), operations=rounds[0]["operations"] if rounds else 0)
    print(rec.write(args.out))


if __name__ == "__main__":
    main()
