"""`pyd4j profile -- <job command>`: run a DL4J job under the agent, live view, report."""

from __future__ import annotations

import contextlib
import runpy
import sys
from pathlib import Path

import click

from pyd4j.commands import _params as params
from pyd4j.commands.tune import WindowParam

# pyd4j's own exit status when --timeout ended the job (as coreutils' timeout).
TIMEOUT_EXIT = 124


@click.command("profile", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--out", "out_dir", type=params.OutputDir(agent_safe=True), default=None,
              help="run directory, new or empty (default runs/<Main>-<time>)")
@click.option("--interval", "interval_ms", type=params.INTERVAL_MS, default=100, show_default=True, help="sampling interval, ms")
@click.option("--socket", "use_socket", is_flag=True, help="stream over a loopback socket (with a token) instead of files")
@click.option("--timeout", "timeout_s", type=params.SECONDS, default=None, help="stop the job after this many seconds")
@click.option("--window", "window", type=WindowParam(), default="full", show_default=True,
              help="end the job at a measurement window: N iterations (2000), a time of training (90s, 5m), or auto "
                   "(once the leak verdicts are decided and the memory is flat); the agent ends it cleanly, exit 0")
@click.option("--report/--no-report", default=True, show_default=True, help="write report.html, plots and trace.json")
@click.option("--python", "script", type=params.InputFile("Python script"), default=None,
              help="profile pyd4j's in-process JVM while this Python script runs (instead of a job command)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON document")
@click.argument("job", nargs=-1, type=click.UNPROCESSED)
def command(out_dir, interval_ms, use_socket, timeout_s, report, script, as_json, job, window="full") -> None:
    """Run a Java job as is under pyd4j's agent and tell what it used and what is wrong. The job
    is any command that starts JVMs: every JVM it starts is profiled, each in its own lane.

    \b
    pyd4j profile -- java -Xmx2g -cp job.jar com.acme.Train --epochs 3
    pyd4j profile -- mvn -q exec:java -Dexec.mainClass=com.acme.Train
    pyd4j profile -- bash -c "java -cp job.jar com.acme.Train"
    pyd4j profile --python train.py

    Exits with the job's own exit status when the job fails (1 if it has none), after the
    summary and report, so scripts notice; 1 when the run recorded no measurements or could not be
    written whole (disk full: the summary says what was lost); 130 on Ctrl-C,
    143 on SIGTERM (the summary and the report of the partial run are still written), 124 when
    --timeout ended the job; 0 when the job ended at its --window, as asked (the summary says so).
    """
    from pyd4j.profile.command import JobCommand, JobCommandError  # noqa: PLC0415
    from pyd4j.profile.signals import Stopped, stop_on_signals  # noqa: PLC0415

    if script is not None and job:
        raise click.UsageError("give either --python SCRIPT or a job command after --, not both")
    if script is not None and not window.full:
        raise click.UsageError(f"--window {window.text()} ends a job command at an iteration; a --python script's "
                               f"in-process JVM is not ended by the agent: give a job command, or leave --window out")
    if script is None:
        try:
            params.job_command(job)  # a bad command is refused before the live view or any JVM starts
            command = JobCommand.parse(list(job))
        except JobCommandError as err:
            raise click.UsageError(str(err)) from None
    stopped: Stopped | None = None
    stopped_by: str | None = None
    script_error: str | None = None
    with stop_on_signals():
        try:
            if script is not None:
                run_dir, script_error = _profile_script(Path(script), out_dir, interval_ms, as_json)
            else:
                run_dir, stopped_by = _profile_command(command, out_dir, interval_ms, use_socket, timeout_s, as_json,
                                                       window)
        except Stopped as err:
            stopped = err
            if err.run is None:
                click.echo(f"stopped ({err.name}) before the job started; nothing was run", err=True)
                sys.exit(err.exit_code)
            run_dir = err.run.run_dir
            stopped_by = err.name
        doc = _summarise(run_dir, report, as_json, stopped_by, script_error)
    if stopped is not None:
        sys.exit(stopped.exit_code)
    if stopped_by == "timeout":
        sys.exit(TIMEOUT_EXIT)
    if stopped_by == "window":   # ended where asked: what it measured is what was asked for
        sys.exit(1 if any(f["kind"] == "no-data" for f in doc["findings"]) or incomplete(doc) else 0)
    if script_error:
        click.echo(f"error: {script_error}", err=True)
        sys.exit(1)
    code = doc.get("exit_code")
    if code not in (None, 0):
        sys.exit(code if isinstance(code, int) and 0 < code < 256 else 1)
    if any(f["kind"] == "no-data" for f in doc["findings"]):
        sys.exit(1)  # no measurements is never success
    if incomplete(doc):
        sys.exit(1)


def incomplete(doc: dict) -> bool:
    """A timeline cut short (disk full), or a report or network file not written: not a whole run."""
    return bool(doc.get("write_errors") or doc.get("report_error") or doc.get("networks_error"))


def _profile_command(command, out_dir, interval_ms, use_socket, timeout_s, as_json, window) -> tuple[Path, str | None]:
    from pyd4j.profile.command import JobCommandError  # noqa: PLC0415
    from pyd4j.profile.launch import profile_job  # noqa: PLC0415
    from pyd4j.profile.live import LiveView  # noqa: PLC0415
    from pyd4j.profile.window import RunWindow  # noqa: PLC0415

    live = contextlib.nullcontext(None) if as_json else LiveView(command.title)
    try:
        with live as view:
            run = profile_job(list(command.argv), out_dir, interval_ms=interval_ms,
                              transport="socket" if use_socket else "file",
                              on_sample=view.update if view else None, on_jvm=view.jvm if view else None,
                              timeout_s=timeout_s, describe=True,
                              window=None if window.full else RunWindow(window, "memory"))
    except JobCommandError as err:
        raise click.UsageError(str(err)) from None
    if run.stopped_by == "timeout":
        click.echo(f"stopped: the job ran past --timeout {timeout_s:g} s; it and everything it started were ended, "
                   f"the timeline so far is kept", err=True)
    elif run.stopped_by == "window":
        click.echo(f"stopped at the window ({window.text()}) after {run.timeline.iterations()} iterations, as asked: "
                   f"the job and everything it started were ended; not a failure", err=True)
    return run.run_dir, run.stopped_by


def _profile_script(script: Path, out_dir: Path | None, interval_ms: int, as_json: bool) -> tuple[Path, str | None]:
    """Profile pyd4j's in-process JVM while the script runs; returns the run and how the script
    failed, if it did (the profile is kept either way)."""
    from pyd4j.output import stdout_to_stderr  # noqa: PLC0415
    from pyd4j.profile.launch import RunDirError, check_run_dir, default_run_dir  # noqa: PLC0415
    from pyd4j.profile.session import SessionRun, session  # noqa: PLC0415
    from pyd4j.profile.signals import Stopped  # noqa: PLC0415

    run_dir = out_dir or default_run_dir(f"{script.stem}-session")
    try:
        check_run_dir(run_dir)
    except RunDirError as err:
        raise click.UsageError(str(err)) from None
    # With --json the script's own prints go to stderr: stdout holds the one JSON document.
    quiet = stdout_to_stderr() if as_json else contextlib.nullcontext()
    script_error = None
    try:
        with session(run_dir, interval_ms=interval_ms), quiet:
            sys.argv = [str(script)]
            try:
                runpy.run_path(str(script), run_name="__main__")
            except SystemExit as err:
                if err.code not in (None, 0):
                    script_error = f"{script} exited with status {err.code}"
            except Exception as err:  # noqa: BLE001  (the user's script failed: say so, keep the profile)
                import traceback  # noqa: PLC0415

                trace = run_dir / "script-traceback.txt"
                trace.write_text("".join(traceback.format_exception(err)))
                script_error = f"{script} raised {type(err).__name__}: {err} (traceback in {trace})"
    except KeyboardInterrupt as err:
        stopped = err if isinstance(err, Stopped) else Stopped()
        stopped.run = SessionRun(run_dir)
        raise stopped from None
    return run_dir, script_error


def _summarise(run_dir: Path, report: bool, as_json: bool, stopped_by: str | None,
               script_error: str | None = None) -> dict:
    """Summary (and report) of the run, whole or partial, printed; returns the summary."""
    from pyd4j.output import emit_json  # noqa: PLC0415
    from pyd4j.profile.networks import save_networks  # noqa: PLC0415
    from pyd4j.profile.report import summary, write_report  # noqa: PLC0415
    from pyd4j.profile.timeline import Timeline  # noqa: PLC0415

    if stopped_by and stopped_by not in ("timeout", "window"):
        click.echo(f"stopped ({stopped_by}): the job and everything it started were ended; "
                   f"the partial run is summarised and reported", err=True)
    lanes = Timeline.load_lanes(run_dir)
    doc = summary(lanes)
    try:
        doc["networks"] = save_networks(run_dir, lanes)
    except OSError as err:
        doc["networks_error"] = f"could not write the job's networks into {run_dir}: {err.strerror or err}"
        click.echo(f"error: {doc['networks_error']}", err=True)
    if script_error:
        doc.update(ok=False, error=script_error)
    if report:
        try:
            doc["report"] = {k: str(v) for k, v in write_report(run_dir, lanes=lanes).items()}
        except OSError as err:
            doc["report_error"] = f"could not write the report into {run_dir}: {err.strerror or err}; the timelines are kept"
            click.echo(f"error: {doc['report_error']}", err=True)
    if as_json:
        emit_json(doc)
    else:
        _print_summary(doc)
    return doc


def _print_summary(doc: dict) -> None:
    from pyd4j.output import human_bytes, print_table  # noqa: PLC0415
    from pyd4j.profile.jvms import role_text  # noqa: PLC0415

    speed = doc["iterations_per_s"]
    partial = (f" (stopped at the {doc['stopped_by']}, as asked)" if doc.get("stopped_as_asked")
               else f" (PARTIAL: stopped by {doc['stopped_by']})" if doc.get("stopped_by") else "")
    print_table(f"{doc['job']}: exit {doc['exit_code']}, {doc['duration_s']:.1f} s, {doc['iterations']} iterations"
                + (f" ({speed:.2f}/s)" if speed else "") + partial,
                ["measure", "peak", "limit"],
                [("heap used", human_bytes(doc["peaks"]["heap_used"]), human_bytes(doc["limits"]["heap_max"])),
                 ("live heap (after full collections)", human_bytes(doc["peaks"]["heap_live"]), ""),
                 ("heap after any GC (upper bound)", human_bytes(doc["peaks"].get("heap_after_gc")), ""),
                 ("native (ND4J etc.)", human_bytes(doc["peaks"]["native"]), ""),
                 ("JavaCPP totalBytes", human_bytes(doc["peaks"]["javacpp_total"]), human_bytes(doc["limits"]["javacpp_max"])),
                 ("RSS (JavaCPP physicalBytes)", human_bytes(doc["peaks"]["rss"]), human_bytes(doc["limits"]["javacpp_max_physical"])),
                 ("NIO direct", human_bytes(doc["peaks"]["direct_used"]), human_bytes(doc["limits"]["max_direct"])),
                 ("GC time share", f"{doc['gc_share']:.1%}", "")])
    if len(doc["jvms"]) > 1:
        print_table("JVMs of the run", ["pid", "role", "main class", "parent JVM", "samples", "iterations", "peak RSS"],
                    [(j["pid"], role_text(j), j["main_class"], j["parent_jvm"] or "-",
                      j["samples"], j["iterations"], human_bytes(j.get("rss_peak"))) for j in doc["jvms"]])
    if doc.get("spark_executors"):
        executors = [j for j in doc["jvms"] if j.get("spark") == "executor"]
        click.echo(f"{len(executors)} Spark executor(s): {sum(j['iterations'] or 0 for j in executors)} iterations in all")
        print_table("Spark executors", ["executor", "pid", "exit code", "ended", "diagnosis"],
                    [(e["executor_id"], e["pid"] or "-", e["exit_code"] if e["exit_code"] is not None else "-",
                      e["kind"], e["diagnosis"]) for e in doc["spark_executors"]])
    peak = doc.get("peak_sites")
    if peak and peak["sites"]:
        print_table("off-heap peak by call site (sampled)", ["call site", "allocator", "held at the peak", "share"],
                    [(x["site"] + ("" if x["user"] else " (library)"), x["kind"], human_bytes(x["live_bytes"]),
                      f"{x['share']:.0%}" if x["share"] is not None else "-") for x in peak["sites"][:5]])
    if doc.get("time_split"):
        from pyd4j.profile.timesplit import describe  # noqa: PLC0415

        click.echo(describe(doc["time_split"]))
    if doc["findings"]:
        print_table("findings", ["severity", "finding", "fix", "flags"],
                    [(f["severity"], f["title"], f["fix"], " ".join(f["flags"])) for f in doc["findings"]])
        for f in doc["findings"]:
            if f["severity"] == "error":
                for line in f["evidence"]:
                    click.echo(f"  {line}")
    else:
        click.echo("no problems found (no OOM, leak, GC pressure or workspace spills)")
    for e in doc.get("write_errors", []):
        click.echo(f"warning: {e['message']}", err=True)
    for net in doc.get("networks", []):
        click.echo(f"network: {net['kind']} at batch {net['batch']} saved as {net['path']}; "
                   + (f"its memory and JVM flags: {net['flags']}" if "flags" in net else net["inputs_error"]))
    if "report" in doc:
        click.echo(f"report: {doc['report']['html']}")
    click.echo(f"run directory: {doc['run_dir']}")
