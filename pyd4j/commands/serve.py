"""`pyd4j serve`: several DL4J models under a memory budget, over the Open Inference Protocol v2."""

from __future__ import annotations

import logging
import sys

import click

from pyd4j.commands import _params as params
from pyd4j.output import emit_json, fail, human_bytes, print_table

PORT = params.Whole(0, 65535, example="--port 8000", why="a TCP port; 0 picks a free one")
MAX_BODY = params.ByteSize(example="64m")
MAX_SOAK = 1_000_000   # requests per model: hours of soak at the slowest example network's speed
SOAK = params.Whole(10, MAX_SOAK, example="--soak 2000", why="requests per model, in 10 rounds")


class SliceRows(click.ParamType):
    """'auto', 'whole' or a whole number of rows (the server checks it against --max-batch)."""

    name = "auto|whole|ROWS"
    rows = params.Whole(1, params.JAVA_INT_MAX, example="--slice-rows 8")

    def convert(self, value, param, ctx):
        if value in ("auto", "whole") or isinstance(value, int):
            return value
        if not str(value).strip().lstrip("-").isdigit():
            self.fail(f"{value!r}: give 'auto', 'whole' or a whole number of rows, e.g. --slice-rows 8", param, ctx)
        return self.rows.convert(value, param, ctx)


def _input_specs(given: tuple[str, ...]) -> dict[str, str]:
    """--input NAME=SPEC options as {name: spec}; each model once (the server checks the names are served)."""
    from pyd4j.serve.model import parse_model_arg  # noqa: PLC0415

    specs: dict[str, str] = {}
    for text in given:
        name, sep, spec = text.partition("=")
        if not sep or not spec.strip():
            raise click.BadParameter(f"{text!r}: write NAME=SPEC, the name of a --model and its input type, e.g. "
                                     f"--input mlp=ff:784 or --input net=cnn:32x32x3", param_hint="--input")
        name = parse_model_arg(text, "--input")[0]
        if name in specs:
            raise click.BadParameter(f"model {name!r} is given twice ({specs[name]!r} and {spec!r}); give one input "
                                     f"type per model", param_hint="--input")
        specs[name] = spec.strip()
    return specs


def _status_rows(status: dict) -> list[list[str]]:
    rows = []
    for name, m in status["models"].items():
        fp = m.get("footprint") or {}
        rows.append([name, m["state"], m.get("memory_state", "-"), m.get("source") or "-",
                     human_bytes(fp.get("total_bytes")) if fp else "-",
                     human_bytes(fp.get("estimate_bytes")) if fp else "-",
                     f"{fp['slice_rows']} of {fp['max_batch']}" if fp else "-", m.get("error") or ""])
    return rows


def judge_soak(result: dict) -> dict:
    """The profiler's leak verdicts (pyd4j.profile.leak_verdicts.judge) on a soak's memory samples: server
    RSS, live heap and JavaCPP's count after full collections against requests served. The first
    round is warm-up (JIT, workspaces learning their sizes) and is left out, as the profiler does."""
    from dataclasses import asdict  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415

    from pyd4j.profile.leak_verdicts import LEAK_MIN_GROWTH, LEAK_MIN_GROWTH_HEAP, LEAK_MIN_RELATIVE_HEAP, judge  # noqa: PLC0415

    used = result["samples"][2:]
    x = np.array([s["requests"] for s in used], dtype=float)

    def col(key: str) -> np.ndarray:
        return np.array([s[key] for s in used], dtype=float)

    verdicts = [judge(x, col("rss"), "iteration", "server RSS after full collections", LEAK_MIN_GROWTH),
                judge(x, col("heap_live"), "iteration", "live heap", LEAK_MIN_GROWTH_HEAP, LEAK_MIN_RELATIVE_HEAP),
                judge(x, col("javacpp_total"), "iteration", "JavaCPP Pointers kept (totalBytes)", LEAK_MIN_GROWTH)]
    statuses = [v.status for v in verdicts]
    return dict(result, verdicts=[{"status": v.status, "label": v.label, "reason": v.reason,
                                   "trend": asdict(v.trend) if v.trend else None} for v in verdicts],
                leak="leak" in statuses,
                verdict="leak" if "leak" in statuses else ("no-leak" if set(statuses) == {"no-leak"} else "not-enough-data"))


@click.command("serve")
@click.option("--model", "models", multiple=True, required=True, metavar="NAME=PATH",
              help="A model to serve: a DL4J ModelSerializer zip, or a configuration JSON (with its .input.json "
                   "beside it) initialised at random. Repeat for several.")
@click.option("--input", "input_specs", multiple=True, metavar="NAME=SPEC",
              help="Input type of a model whose file does not tell it, e.g. mlp=ff:784 or net=cnn:32x32x3.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (loopback by default).")
@click.option("--port", type=PORT, default=8000, show_default=True, help="TCP port (0: a free one).")
@click.option("--budget", type=params.SIZE, default=None,
              help="Memory the resident models may hold together (e.g. 512m); idle models beyond it go to disk.")
@click.option("--idle-before-evict", "idle_s", type=params.Real(0, 86_400, example="--idle-before-evict 30"), default=0.0,
              show_default=True, metavar="SECONDS",
              help="A model that served a request less than this long ago is not evicted. A request for an evicted "
                   "model that needs its room waits until a model has been idle that long; past --timeout it gets "
                   "503 with Retry-After, naming the budget and the models holding it (raise --budget, or lower this).")
@click.option("--max-batch", type=params.BATCH, default=32, show_default=True,
              help="Largest batch one output() call runs (dynamic batching) and the largest a request may send.")
@click.option("--slice-rows", type=SliceRows(), default="auto", show_default=True,
              help="Rows one output() call runs, which sizes DL4J's inference workspaces: 'auto' measures at load "
                   "the fewest that keep the speed of a --max-batch call, 'whole' runs --max-batch rows in one call, "
                   "a number fixes it.")
@click.option("--max-wait-ms", type=params.Real(0, 60_000, example="--max-wait-ms 2"), default=2.0, show_default=True,
              help="Longest a request waits for others to batch with.")
@click.option("--queue-size", type=params.COUNT, default=64, show_default=True,
              help="Requests a model may queue; beyond it the server answers 429 with Retry-After.")
@click.option("--timeout", "timeout_s", type=params.SECONDS, default=30.0, show_default=True,
              help="Seconds a request may take before the server answers 504.")
@click.option("--max-body", type=MAX_BODY, default="64m", show_default=True,
              help="Largest request body; larger ones get 413.")
@click.option("--soak", type=SOAK, default=None, metavar="N",
              help="Do not serve: send N requests per model over HTTP, then print the leak verdict on the server's memory.")
@click.option("--json", "as_json", is_flag=True, help="Print the model status (or the soak result) as JSON.")
def command(models: tuple[str, ...], input_specs: tuple[str, ...], host: str, port: int, budget: int | None,
            idle_s: float, max_batch: int, slice_rows: int | str, max_wait_ms: float, queue_size: int, timeout_s: float, max_body: int,
            soak: int | None, as_json: bool) -> None:
    """Serve DL4J models over the Open Inference Protocol v2 (KServe/Triton clients), under a memory budget."""
    try:
        from pyd4j.serve import ModelLoadError, ModelServer  # noqa: PLC0415
    except ModuleNotFoundError as err:   # the HTTP side comes with the `serve` extra
        fail(f"pyd4j serve needs {err.name!r}, which is not installed: install the serve extra "
             "(pip install 'pyd4j[serve]')", as_json, code=2)

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # the soak's client: one line per request otherwise
    server = ModelServer(list(models), budget, host=host, port=0 if soak else port, max_batch=max_batch,
                         max_wait_ms=max_wait_ms, queue_size=queue_size, timeout_s=timeout_s, max_body_bytes=max_body,
                         idle_before_evict_s=idle_s, inputs=_input_specs(input_specs), slice_rows=slice_rows)
    try:   # a signal at any point (SIGTERM raises SystemExit once the JVM runs): the workers stop before it exits
        try:
            server.load()
        except ModelLoadError as err:   # every model failed: a server of no model is not started
            fail(str(err), as_json=as_json, code=2)
        status = server.status()
        if soak:
            from pyd4j.serve.soak import soak as run_soak  # noqa: PLC0415

            server.start()
            result = judge_soak(run_soak(server, soak))
            result["status"] = status
            if as_json:
                emit_json(result)
            else:
                print_table(f"Soak: {result['requests']} requests in {result['seconds']} s, {result['failed']} failed",
                            ["memory", "verdict", "why"], [[v["label"], v["status"], v["reason"]] for v in result["verdicts"]])
            sys.exit(1 if result["leak"] or result["failed"] else 0)
        if as_json:
            emit_json(status)
        else:
            print_table(f"pyd4j serve on {host}:{port}, budget {human_bytes(budget) if budget else 'none'}",
                        ["model", "state", "memory", "source", "resident", "estimate", "rows a call", "error"], _status_rows(status))
        server.serve_forever()
    finally:
        server.stop()
