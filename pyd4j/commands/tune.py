"""`pyd4j tune -- <job command>`: profile, recommend flags from measured peaks, verify by re-running."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from pyd4j.commands import _params as params
from pyd4j.schemas import TUNE_SCHEMA


@click.command("tune", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--out", "out_dir", type=params.OutputDir(agent_safe=True), default=None,
              help="directory for both runs (new or empty)")
@click.option("--interval", "interval_ms", type=params.INTERVAL_MS, default=100, show_default=True, help="sampling interval, ms")
@click.option("--total", default=None, type=params.SIZE,
              help="memory budget for the whole process, e.g. 8g (default: cgroup limit or RAM)")
@click.option("--headroom", type=params.HEADROOM, default=0.15, show_default=True, help="fraction added over measured needs")
@click.option("--no-verify", is_flag=True, help="skip the second run")
@click.option("--timeout", "timeout_s", type=params.SECONDS, default=None, help="stop each run after this many seconds")
@click.option("--repeat", type=params.Whole(1, 50, example="--repeat 3"), default=1, show_default=True,
              help="runs per side for the before/after throughput (median, min-max); the flags come from the first run")
@click.option("--plan", "plan_policy", type=click.Choice(["superneurons", "liveness", "recompute_in_memory"]),
              help="run the job again with its network under a pyd4j plan (planned training, same flags) instead "
              "of with new flags: before/after shows what the plan saves. superneurons: the smallest plan the "
              "trainer can run; or one policy's minimum-memory plan")
@click.option("--speed", is_flag=True, help="tune for speed instead of memory: try thread, ND4J GC, heap, workspace, "
              "prefetch and nd4j-native build settings the job's code does not see, keep only what an alternated A/B proves faster (exit 3: no verified change)")
@click.option("--max-runs", type=params.Whole(4, 50, example="--max-runs 8",
                                             why="4 runs a side are the fewest with which a 95% interval can exclude 1"),
              default=8, show_default=True,
              help="with --speed: the most runs per side of each A/B (it stops earlier once its 95% interval excludes 1)")
@click.option("--memory", "and_memory", is_flag=True,
              help="with --speed: the memory tune first (its flags verified by a re-run), then the speed tune with "
              "those flags on every run of its A/Bs; one document with both")
@click.option("--json", "as_json", is_flag=True, help="print one JSON document")
@click.argument("job", nargs=-1, type=click.UNPROCESSED)
def command(out_dir, interval_ms, total, headroom, no_verify, timeout_s, repeat, as_json, job, plan_policy=None,
            speed=False, max_runs=8, and_memory=False) -> None:
    """Run the job, compute -Xmx / MaxDirectMemorySize / JavaCPP limits from what it used, run it
    again with them and print before/after.

    \b
    pyd4j tune -- java -cp job.jar com.acme.Train
    pyd4j tune -- mvn -q exec:java -Dexec.mainClass=com.acme.Train
    pyd4j tune --repeat 3 -- java -cp job.jar com.acme.Train
    pyd4j tune --plan superneurons -- java -cp job.jar com.acme.Train
    pyd4j tune --speed -- java -cp job.jar com.acme.Train
    pyd4j tune --speed --memory -- java -cp job.jar com.acme.Train

    The job is any command that starts JVMs (java, a shell command, mvn, gradle, spark-submit);
    the recommended flags reach its JVMs through JAVA_TOOL_OPTIONS (on the command line for a
    plain `java` command, replacing the job's own memory flags). A spark-submit job on a cluster gets
    them as Spark settings; with --speed, each change reaches its executors as spark.executorEnv.* and
    spark.executor.extraJavaOptions, and its speed is the executors' sum. Ctrl-C or SIGTERM ends the
    job and reports the partial tune (exit 130 / 143).

    \b
    Exit status:
      0  verified: the re-run with the recommended flags finished cleanly (or --no-verify)
      1  nothing to tune: the first run recorded no measurements, or died before its
         first iteration for a reason other than memory (a wrong class path or main class)
      2  bad arguments
      3  not verified: the re-run finished but a run shows a problem (a leak in either
         run, GC pressure, a limit within 5%, no training iteration, or too little
         measured to rule a leak out), or with --plan: the plan was not applied (the
         reason is printed; the job was ended rather than trained unplanned); with
         --speed: no verified change (no change was proved faster by the A/B; nothing
         is recommended); with --speed --memory: the memory tune's code when it did
         not verify its flags (the speed tune is then not run), else the speed tune's
      4  re-run failed: the re-run with the recommended flags failed (out of memory or a
         crash), after new recommendations read from its errors: 3 re-runs at most
    """
    from pyd4j.memory.flags import BudgetError  # noqa: PLC0415
    from pyd4j.output import fail  # noqa: PLC0415
    from pyd4j.profile.command import JobCommandError  # noqa: PLC0415
    from pyd4j.profile.signals import Stopped, stop_on_signals  # noqa: PLC0415
    from pyd4j.profile.tune import EXIT_ERROR, JobFailedError, tune_job  # noqa: PLC0415

    # Bad arguments are refused here, before the job runs (a run can take hours).
    try:
        params.job_command(job)
    except JobCommandError as err:
        raise click.UsageError(str(err)) from None
    if and_memory and not speed:
        raise click.UsageError("--memory goes with --speed (the memory tune and then the speed tune); "
                               "`pyd4j tune` without --speed is the memory tune alone")
    if speed:
        given = [o for o, v in (("--plan", plan_policy), ("--no-verify", no_verify), ("--repeat", repeat != 1),
                                ("--total", total and not and_memory)) if v]
        if given:
            raise click.UsageError(f"{', '.join(given)} belong to the memory tune; --speed runs its own A/B "
                                   f"(--max-runs): run `pyd4j tune` without --speed for memory flags"
                                   + ("" if and_memory else ", or add --memory for --total"))
        memory_doc = _memory_first(list(job), out_dir, interval_ms, total, headroom, timeout_s, as_json) \
            if and_memory else None
        _speed(list(job), out_dir, interval_ms, timeout_s, max_runs, as_json, memory_doc)
    with stop_on_signals():
        try:
            doc = tune_job(list(job), out_dir, interval_ms=interval_ms, total=total, headroom=headroom,
                           verify=not no_verify, timeout_s=timeout_s, repeat=repeat, plan_policy=plan_policy)
        except JobCommandError as err:
            raise click.UsageError(str(err)) from None
        except BudgetError as err:
            raise click.ClickException(str(err)) from None
        except JobFailedError as err:
            _report(err.doc, "before")
            fail(str(err), as_json, code=EXIT_ERROR, **err.doc)
        except Stopped as err:
            if err.doc is None:
                click.echo(f"stopped ({err.name}) before the job started; nothing was run", err=True)
                sys.exit(err.exit_code)
            click.echo(f"stopped ({err.name}) during the {err.doc.get('stopped_in')} run: the job and everything it "
                       f"started were ended; the partial tune is reported", err=True)
            doc = err.doc
            _finish(doc, as_json)
            sys.exit(err.exit_code)
        _finish(doc, as_json)
    sys.exit(doc["exit_code"])


def _memory_first(job: list[str], out_dir, interval_ms: int, total, headroom: float, timeout_s,
                  as_json: bool) -> dict:
    """`tune --speed --memory`, first half: the memory tune (in OUT/memory); when it does not verify its
    flags, its result is the answer and the speed tune is not run (exit with its code)."""
    from pyd4j.memory.flags import BudgetError  # noqa: PLC0415
    from pyd4j.output import fail  # noqa: PLC0415
    from pyd4j.profile.signals import Stopped, stop_on_signals  # noqa: PLC0415
    from pyd4j.profile.tune import EXIT_ERROR, JobFailedError, tune_job  # noqa: PLC0415

    with stop_on_signals():
        try:
            doc = tune_job(job, Path(out_dir) / "memory" if out_dir else None, interval_ms=interval_ms, total=total,
                           headroom=headroom, timeout_s=timeout_s)
        except BudgetError as err:
            raise click.ClickException(str(err)) from None
        except JobFailedError as err:
            fail(str(err), as_json, code=EXIT_ERROR, **err.doc)
        except Stopped as err:
            click.echo(f"stopped ({err.name}) during the memory tune: the job and everything it started were ended; "
                       f"the speed tune was not run", err=True)
            sys.exit(err.exit_code)
    if doc["exit_code"] != 0:
        doc["speed"] = None
        doc.setdefault("notes", []).append("the speed tune was not run: the memory tune did not verify its flags, "
                                           "and speed changes are measured on top of them")
        _finish(doc, as_json)
        if not as_json:
            click.echo("speed: not tuned (the memory tune did not verify its flags)")
        sys.exit(doc["exit_code"])
    return doc


def _speed(job: list[str], out_dir, interval_ms: int, timeout_s, max_runs: int, as_json: bool,
           memory_doc: dict | None = None) -> None:
    """`tune --speed`: the A/B-verified speed settings (pyd4j.profile.speed); exits with its code. With
    the memory tune's document, every run carries its recommended flags and one document holds both."""
    from pyd4j.output import emit_json  # noqa: PLC0415
    from pyd4j.profile.launch import check_run_dir  # noqa: PLC0415
    from pyd4j.profile.signals import stop_on_signals  # noqa: PLC0415
    from pyd4j.profile.speed import print_speed, tune_speed  # noqa: PLC0415

    speed_dir = out_dir if out_dir is None or memory_doc is None else Path(out_dir) / "speed"
    if speed_dir is not None:
        check_run_dir(Path(speed_dir))
    from pyd4j.profile.signals import Stopped  # noqa: PLC0415

    # on top of the memory tune's verified settings: JVM flags, or Spark settings for a spark-submit job
    spark = bool(memory_doc and memory_doc.get("spark_conf"))
    base = memory_doc["recommended"] if memory_doc and not spark else []
    with stop_on_signals():
        try:
            doc = tune_speed(job, speed_dir, interval_ms=interval_ms, timeout_s=timeout_s, max_runs=max_runs,
                             base_jvm=base, base_spark=memory_doc["spark_conf"] if spark else None)
        except Stopped as err:
            click.echo(f"stopped ({err.name}): the job and everything it started were ended; no change is "
                       f"recommended from an unfinished comparison", err=True)
            sys.exit(err.exit_code)
    if memory_doc is not None:
        for key in ("probe", "base_jvm_options", "base_spark_conf", "spark_cluster", "error"):
            if key in doc:
                memory_doc.setdefault("speed_tune", {})[key] = doc[key]
        memory_doc["speed_tune"]["out"] = doc["out"]
        memory_doc["speed"] = doc["speed"]
        memory_doc["memory_exit_code"] = memory_doc["exit_code"]
        memory_doc["exit_code"] = doc["exit_code"]
        _finish(memory_doc, as_json)
        if not as_json:
            print_speed(doc)
        sys.exit(doc["exit_code"])
    if as_json:
        emit_json(doc)
    else:
        print_speed(doc)
    sys.exit(doc["exit_code"])


def _report(doc: dict, side: str) -> str | None:
    """Write the report of one of the tune's runs (the tune document gives it its before/after)."""
    from pyd4j.profile.report import write_report  # noqa: PLC0415

    if not doc.get(side):
        return None
    try:
        return str(write_report(doc[side]["run_dir"])["html"])
    except OSError as err:
        click.echo(f"error: could not write the report of {doc[side]['run_dir']}: {err.strerror or err}", err=True)
        return None


def _finish(doc: dict, as_json: bool) -> None:
    from pyd4j.output import emit_json, human_bytes, print_table  # noqa: PLC0415

    last = "after" if doc.get("after") else "before"
    if last == "after":
        _report(doc, "before")
    doc["report"] = _report(doc, last)
    doc.setdefault("schema", TUNE_SCHEMA)
    if as_json:
        emit_json(doc)
        return
    sides = [(n, doc[n]) for n in ("before", "after") if doc.get(n)]
    if not sides:
        return

    def row(label, fn):
        return [label, *(fn(s) for _, s in sides)]

    speed = lambda s: f"{s['iterations_per_s']:.2f}" if s["iterations_per_s"] else "-"  # noqa: E731
    partial = f" (PARTIAL: stopped by {doc['stopped_by']} during the {doc['stopped_in']} run)" if doc.get("partial") else ""
    print_table("pyd4j tune" + partial, ["", *(("after (tuned)" if n == "after" else n) for n, _ in sides)], [
        row("exit code", lambda s: s["exit_code"]),
        row("memory flags", lambda s: " ".join(s["jvm_memory_flags"]) or "(JVM defaults)"),
        row("-Xmx", lambda s: human_bytes(s["limits"]["heap_max"])),
        row("JavaCPP maxbytes", lambda s: human_bytes(s["limits"]["javacpp_max"])),
        row("JavaCPP maxphysicalbytes", lambda s: human_bytes(s["limits"]["javacpp_max_physical"])),
        row("peak heap used", lambda s: human_bytes(s["peaks"]["heap_used"])),
        row("peak live heap", lambda s: human_bytes(s["peaks"]["heap_live"])),
        row("peak native", lambda s: human_bytes(s["peaks"]["native"])),
        row("peak RSS", lambda s: human_bytes(s["peaks"]["rss"])),
        row("iterations/s", speed),
        row("findings", lambda s: ", ".join(s["findings"]) or "none"),
    ])
    if (doc.get("before") or {}).get("spark"):
        from pyd4j.profile.spark_tuning import before_after_rows  # noqa: PLC0415

        headers, rows = before_after_rows(doc)
        print_table("per executor (the worst one sizes them all)", headers, rows)
    if doc.get("plan"):
        p = doc["plan"]
        said = next((e["result"] for e in p.get("agent", []) if e["type"] == "plan"), {"status": "not reached"})
        click.echo(f"after: the job's network under the {p['policy']} plan {p['path']} (predicted peak "
                   f"{human_bytes(p['predicted_peak_bytes'])}): {said.get('status')}"
                   + (f" ({said['reason']})" if said.get("reason") else ""))
    if doc.get("recommended"):
        click.echo("recommended flags:")
        click.echo("  " + " ".join(doc["recommended"]))
        for arg, why in doc["reasons"].items():
            click.echo(f"    {arg}: {why}")
    for note in doc.get("notes") or []:
        click.echo(f"note: {note}")
    failures = doc.get("own_limit_failures") or []
    for i, failure in enumerate(failures, start=1):
        then = failure.get("stopped") or ("recommended again from what it showed, and re-ran"
                                          if i < doc.get("max_reruns", 0) else
                                          f"stopped after {doc.get('max_reruns')} re-runs")
        click.echo(f"re-run {i} of at most {doc.get('max_reruns')}: {failure['said']}; {then}")
    speed = doc.get("throughput") or {}
    if speed.get("before") and speed.get("after"):
        b, a = speed["before"], speed["after"]
        click.echo(f"iterations/s: before {b['median']:.3g} (min-max {b['min']:.3g}-{b['max']:.3g}, {b['runs']} runs), "
                   f"after {a['median']:.3g} (min-max {a['min']:.3g}-{a['max']:.3g}, {a['runs']} runs): "
                   f"{speed['speedup']:.2f}x")
    if speed.get("warning"):
        click.echo(f"warning: {speed['warning']}")
    outcome = None if doc.get("partial") else doc.get("outcome")
    if doc.get("gc_pressure_not_from_flags"):
        click.echo(f"note: GC pressure in the re-run: {doc['gc_pressure_not_from_flags']}")
    if outcome == "verified":
        click.echo("verified: the re-run finished cleanly" + ("" if doc.get("plan") else " with these flags"))
    elif outcome == "not-verified" and doc["after"].get("plan_not_applied"):
        click.echo(f"not verified: plan not applied ({doc['after']['plan_not_applied']})")
    elif outcome == "not-verified":
        click.echo("NOT verified: " + "; ".join(doc.get("not_verified_because") or doc["after"]["findings"])
                   + "; see the report")
    elif outcome == "rerun-failed":
        failures = ((doc["after"].get("spark") or {}).get("executor_memory_failures") or [])
        click.echo(f"re-run FAILED (exit code {doc['after']['exit_code']}; "
                   + ", ".join(doc["after"]["findings"] + failures) + "); see the report")
    if doc.get("report"):
        click.echo(f"report: {doc['report']}")
