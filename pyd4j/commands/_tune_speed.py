"""`pyd4j tune --speed` (and `--speed --memory`) from the command line: the runs, the document, the exit."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from pyd4j.commands._tune_output import finish, stopped_exit


def memory_first(job: list[str], out_dir, interval_ms: int, total, headroom: float, timeout_s, as_json: bool,
                 window=None, verify_full: bool = False) -> dict:
    """`tune --speed --memory`, first half: the memory tune (in OUT/memory); when it does not verify its
    flags, its result is the answer and the speed tune is not run (exit with its code)."""
    from pyd4j.memory.flags import BudgetError  # noqa: PLC0415
    from pyd4j.output import fail  # noqa: PLC0415
    from pyd4j.profile.signals import Stopped, stop_on_signals  # noqa: PLC0415
    from pyd4j.profile.tune import EXIT_ERROR, JobFailedError, tune_job  # noqa: PLC0415

    with stop_on_signals():
        try:
            doc = tune_job(job, Path(out_dir) / "memory" if out_dir else None, interval_ms=interval_ms, total=total,
                           headroom=headroom, timeout_s=timeout_s, window=window, verify_full=verify_full)
        except BudgetError as err:
            raise click.ClickException(str(err)) from None
        except JobFailedError as err:
            fail(str(err), as_json, code=EXIT_ERROR, **err.doc)
        except Stopped as err:
            if err.doc is not None:
                err.doc["speed"] = None
            stopped_exit(err, job, as_json, "the job and everything it started were ended; the speed tune was not run")
    if doc["exit_code"] != 0:
        doc["speed"] = None
        doc.setdefault("notes", []).append("the speed tune was not run: the memory tune did not verify its flags, "
                                           "and speed changes are measured on top of them")
        finish(doc, as_json)
        if not as_json:
            click.echo("speed: not tuned (the memory tune did not verify its flags)")
        sys.exit(doc["exit_code"])
    return doc


def speed_tune(job: list[str], out_dir, interval_ms: int, timeout_s, max_runs: int, as_json: bool,
               memory_doc: dict | None = None, window=None, budget_runs: int | None = None,
               budget_minutes: float | None = None) -> None:
    """`tune --speed`: the A/B-verified speed settings (pyd4j.profile.speed); exits with its code. With
    the memory tune's document, every run carries its recommended flags and one document holds both."""
    from pyd4j.output import emit_json  # noqa: PLC0415
    from pyd4j.profile.launch import check_run_dir  # noqa: PLC0415
    from pyd4j.profile.signals import Stopped, stop_on_signals  # noqa: PLC0415
    from pyd4j.profile.speed import Budget, print_speed, tune_speed  # noqa: PLC0415

    speed_dir = out_dir if out_dir is None or memory_doc is None else Path(out_dir) / "speed"
    if speed_dir is not None:
        check_run_dir(Path(speed_dir))
    # on top of the memory tune's verified settings: JVM flags, or Spark settings for a spark-submit job
    spark = bool(memory_doc and memory_doc.get("spark_conf"))
    base = memory_doc["recommended"] if memory_doc and not spark else []
    budget = Budget(runs=budget_runs, seconds=budget_minutes * 60 if budget_minutes else None)
    with stop_on_signals():
        try:
            doc = tune_speed(job, speed_dir, interval_ms=interval_ms, timeout_s=timeout_s, max_runs=max_runs,
                             base_jvm=base, base_spark=memory_doc["spark_conf"] if spark else None, window=window,
                             budget=budget, base_env=(memory_doc or {}).get("recommended_environment"))
        except Stopped as err:
            if memory_doc is not None and err.doc is not None:
                memory_doc.update(speed=err.doc.get("speed"), speed_tune={"out": err.doc.get("out")},
                                  stopped_by=err.name, stopped_in="the speed tune")
                err.doc = memory_doc
            stopped_exit(err, job, as_json, "the job and everything it started were ended; no change is recommended "
                                            "from an unfinished comparison")
    if memory_doc is not None:
        for key in ("probe", "base_jvm_options", "base_environment", "base_spark_conf", "spark_cluster", "error",
                    "budget", "window", "expected_gain"):
            if key in doc:
                memory_doc.setdefault("speed_tune", {})[key] = doc[key]
        memory_doc.setdefault("speed_tune", {})["out"] = doc["out"]
        memory_doc["speed"] = doc["speed"]
        memory_doc["memory_exit_code"] = memory_doc["exit_code"]
        memory_doc["exit_code"] = doc["exit_code"]
        finish(memory_doc, as_json)
        if not as_json:
            print_speed(doc)
        sys.exit(doc["exit_code"])
    if as_json:
        emit_json(doc)
    else:
        print_speed(doc)
    sys.exit(doc["exit_code"])
