"""`pyd4j profile -- java [options] Main args`: run a DL4J job under the agent, live view, report."""

from __future__ import annotations

import contextlib
import runpy
import sys
from pathlib import Path

import click


@click.command("profile", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=None,
              help="run directory (default runs/<Main>-<time>)")
@click.option("--interval", "interval_ms", type=int, default=100, show_default=True, help="sampling interval, ms")
@click.option("--socket", "use_socket", is_flag=True, help="stream over a loopback socket (with a token) instead of a file")
@click.option("--timeout", "timeout_s", type=float, default=None, help="stop the job after this many seconds")
@click.option("--report/--no-report", default=True, show_default=True, help="write report.html, plots and trace.json")
@click.option("--python", "script", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="profile pyd4j's in-process JVM while this Python script runs (instead of a java command)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON document")
@click.argument("job", nargs=-1, type=click.UNPROCESSED)
def command(out_dir, interval_ms, use_socket, timeout_s, report, script, as_json, job) -> None:
    """Run a Java job as is under pyd4j's agent and tell what it used and what is wrong.

    \b
    pyd4j profile -- java -Xmx2g -cp job.jar com.acme.Train --epochs 3
    pyd4j profile --python train.py

    Exits with the job's own exit status when the job fails (1 if it has none), after the
    summary and report, so scripts notice; 1 when the run recorded no measurements; 130 when stopped.
    """
    from pyd4j.output import emit_json, print_table  # noqa: PLC0415
    from pyd4j.profile.command import JavaCommand, JobCommandError  # noqa: PLC0415
    from pyd4j.profile.diagnose import diagnose  # noqa: PLC0415
    from pyd4j.profile.launch import profile_job  # noqa: PLC0415
    from pyd4j.profile.live import LiveView  # noqa: PLC0415
    from pyd4j.profile.report import summary, write_report  # noqa: PLC0415
    from pyd4j.profile.timeline import Timeline  # noqa: PLC0415

    if script is not None:
        if job:
            raise click.UsageError("give either --python SCRIPT or a java command after --, not both")
        from pyd4j.profile.launch import RunDirError, check_run_dir, default_run_dir  # noqa: PLC0415
        from pyd4j.profile.session import session  # noqa: PLC0415

        run_dir = out_dir or default_run_dir(f"{script.stem}-session")
        try:
            check_run_dir(run_dir)
        except RunDirError as err:
            raise click.UsageError(str(err)) from None
        with session(run_dir, interval_ms=interval_ms):
            sys.argv = [str(script)]
            runpy.run_path(str(script), run_name="__main__")
        timeline = Timeline.load(run_dir)
        interrupted = False
    else:
        try:
            JavaCommand.parse(list(job))  # a bad command is refused before the live view or any JVM starts
        except JobCommandError as err:
            raise click.UsageError(str(err)) from None
        live = contextlib.nullcontext(None) if as_json else LiveView(" ".join(job[-2:]) if job else "job")
        interrupted = False
        try:
            with live as on_sample:
                run = profile_job(list(job), out_dir, interval_ms=interval_ms, transport="socket" if use_socket else "file",
                                  on_sample=on_sample, timeout_s=timeout_s)
            timeline = run.timeline
        except JobCommandError as err:
            raise click.UsageError(str(err)) from None
        except (KeyboardInterrupt, TimeoutError) as err:
            interrupted = True
            click.echo(f"stopped ({type(err).__name__}); the job and its children were ended, partial timeline kept", err=True)
            run_dir = _latest_run(out_dir)
            timeline = Timeline.load(run_dir)
    findings = diagnose(timeline)
    doc = summary(timeline, findings)
    if report:
        doc["report"] = {k: str(v) for k, v in write_report(timeline.run_dir).items()}
    if as_json:
        emit_json(doc)
    else:
        _print_summary(doc, print_table)
    if interrupted:
        sys.exit(130)
    code = doc.get("exit_code")
    if code not in (None, 0):
        sys.exit(code if isinstance(code, int) and 0 < code < 256 else 1)
    if any(f["kind"] == "no-data" for f in doc["findings"]):
        sys.exit(1)  # no measurements is never success


def _latest_run(out_dir: Path | None) -> Path:
    if out_dir is not None:
        return out_dir
    runs = sorted(Path("runs").glob("*/timeline.jsonl"), key=lambda p: p.stat().st_mtime)
    if not runs:
        raise click.ClickException("no run directory was written")
    return runs[-1].parent


def _print_summary(doc: dict, print_table) -> None:
    from pyd4j.output import human_bytes  # noqa: PLC0415

    speed = doc["iterations_per_s"]
    print_table(f"{doc['job']}: exit {doc['exit_code']}, {doc['duration_s']:.1f} s, {doc['iterations']} iterations"
                + (f" ({speed:.2f}/s)" if speed else ""),
                ["measure", "peak", "limit"],
                [("heap used", human_bytes(doc["peaks"]["heap_used"]), human_bytes(doc["limits"]["heap_max"])),
                 ("heap live after GC", human_bytes(doc["peaks"]["heap_live"]), ""),
                 ("native (ND4J etc.)", human_bytes(doc["peaks"]["native"]), ""),
                 ("JavaCPP totalBytes", human_bytes(doc["peaks"]["javacpp_total"]), human_bytes(doc["limits"]["javacpp_max"])),
                 ("RSS (JavaCPP physicalBytes)", human_bytes(doc["peaks"]["rss"]), human_bytes(doc["limits"]["javacpp_max_physical"])),
                 ("NIO direct", human_bytes(doc["peaks"]["direct_used"]), human_bytes(doc["limits"]["max_direct"])),
                 ("GC time share", f"{doc['gc_share']:.1%}", "")])
    if doc["findings"]:
        print_table("findings", ["severity", "finding", "fix", "flags"],
                    [(f["severity"], f["title"], f["fix"], " ".join(f["flags"])) for f in doc["findings"]])
    else:
        click.echo("no problems found (no OOM, leak, GC pressure or workspace spills)")
    if "report" in doc:
        click.echo(f"report: {doc['report']['html']}")
    click.echo(f"run directory: {doc['run_dir']}")
