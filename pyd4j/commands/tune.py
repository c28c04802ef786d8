"""`pyd4j tune -- java ...`: profile, recommend flags from measured peaks, verify by re-running."""

from __future__ import annotations

import sys
from pathlib import Path

import click


@click.command("tune", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=None, help="directory for both runs")
@click.option("--interval", "interval_ms", type=int, default=100, show_default=True, help="sampling interval, ms")
@click.option("--total", default=None, help="memory budget for the whole process, e.g. 8g (default: cgroup limit or RAM)")
@click.option("--headroom", type=float, default=0.15, show_default=True, help="fraction added over measured needs")
@click.option("--no-verify", is_flag=True, help="skip the second run")
@click.option("--timeout", "timeout_s", type=float, default=None, help="stop each run after this many seconds")
@click.option("--repeat", type=click.IntRange(min=1, max=50), default=1, show_default=True,
              help="runs per side for the before/after throughput (median, min-max); the flags come from the first run")
@click.option("--json", "as_json", is_flag=True, help="print one JSON document")
@click.argument("job", nargs=-1, type=click.UNPROCESSED)
def command(out_dir, interval_ms, total, headroom, no_verify, timeout_s, repeat, as_json, job) -> None:
    """Run the job, compute -Xmx / MaxDirectMemorySize / JavaCPP limits from what it used, run it
    again with them and print before/after.

    \b
    pyd4j tune -- java -cp job.jar com.acme.Train
    pyd4j tune --repeat 3 -- java -cp job.jar com.acme.Train

    \b
    Exit status:
      0  verified: the re-run with the recommended flags finished cleanly (or --no-verify)
      1  nothing to tune: the first run recorded no measurements, or died before its
         first iteration for a reason other than memory (a wrong class path or main class)
      2  bad arguments
      3  not verified: the re-run finished but shows a problem (a leak, GC pressure,
         a limit within 10%, no training iteration)
      4  re-run failed: the re-run with the recommended flags failed (out of memory or a
         crash), even after one new recommendation read from its error
    """
    from pyd4j.memory.flags import BudgetError  # noqa: PLC0415
    from pyd4j.output import emit_json, fail, human_bytes, print_table  # noqa: PLC0415
    from pyd4j.profile.command import JavaCommand, JobCommandError  # noqa: PLC0415
    from pyd4j.profile.report import write_report  # noqa: PLC0415
    from pyd4j.profile.tune import EXIT_ERROR, JobFailedError, tune_job  # noqa: PLC0415
    from pyd4j.units import SizeError, parse_bytes  # noqa: PLC0415

    # Bad arguments are refused here, before the job runs (a run can take hours).
    try:
        JavaCommand.parse(list(job))
    except JobCommandError as err:
        raise click.UsageError(str(err)) from None
    try:
        budget = parse_bytes(total, "--total") if total is not None else None
    except SizeError as err:
        raise click.BadParameter(str(err)) from None
    if budget is not None and budget <= 0:
        raise click.BadParameter(f"{total!r} must be more than 0 bytes; write e.g. '8g'", param_hint="--total")
    if not 0 <= headroom <= 4:
        raise click.BadParameter(f"{headroom!r} must be a fraction between 0 and 4 (0.15 = 15%)", param_hint="--headroom")
    try:
        doc = tune_job(list(job), out_dir, interval_ms=interval_ms, total=total, headroom=headroom,
                       verify=not no_verify, timeout_s=timeout_s, repeat=repeat)
    except JobCommandError as err:
        raise click.UsageError(str(err)) from None
    except BudgetError as err:
        raise click.ClickException(str(err)) from None
    except JobFailedError as err:
        write_report(err.doc["before"]["run_dir"])
        fail(str(err), as_json, code=EXIT_ERROR, **err.doc)
    last = doc.get("after") or doc["before"]
    doc["report"] = str(write_report(last["run_dir"])["html"])
    if doc.get("after"):
        write_report(doc["before"]["run_dir"])
    if as_json:
        emit_json(doc)
        sys.exit(doc["exit_code"])
    sides = [("before", doc["before"])] + ([("after", doc["after"])] if doc.get("after") else [])

    def row(label, fn):
        return [label, *(fn(s) for _, s in sides)]

    speed = lambda s: f"{s['iterations_per_s']:.2f}" if s["iterations_per_s"] else "-"  # noqa: E731
    print_table("pyd4j tune", ["", *(n for n, _ in sides)], [
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
    click.echo("recommended flags:")
    click.echo("  " + " ".join(doc["recommended"]))
    for arg, why in doc["reasons"].items():
        click.echo(f"    {arg}: {why}")
    if doc.get("rerecommended_after"):
        click.echo("the first re-run was refused at a limit (" + "; ".join(doc["rerecommended_after"])
                   + "): recommended again from the numbers it names, and re-ran")
    speed = doc.get("throughput") or {}
    if speed.get("before") and speed.get("after"):
        b, a = speed["before"], speed["after"]
        click.echo(f"iterations/s: before {b['median']:.3g} (min-max {b['min']:.3g}-{b['max']:.3g}, {b['runs']} runs), "
                   f"after {a['median']:.3g} (min-max {a['min']:.3g}-{a['max']:.3g}, {a['runs']} runs): "
                   f"{speed['speedup']:.2f}x")
    if speed.get("warning"):
        click.echo(f"warning: {speed['warning']}")
    outcome = doc.get("outcome")
    if outcome == "verified":
        click.echo("verified: the re-run finished cleanly with these flags")
    elif outcome == "not-verified":
        click.echo("NOT verified: the re-run finished but shows problems (" + ", ".join(doc["after"]["findings"])
                   + "); see the report")
    elif outcome == "rerun-failed":
        click.echo(f"re-run FAILED with these flags (exit code {doc['after']['exit_code']}; "
                   + ", ".join(doc["after"]["findings"]) + "); see the report")
    click.echo(f"report: {doc['report']}")
    sys.exit(doc["exit_code"])


