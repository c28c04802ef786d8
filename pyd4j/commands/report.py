"""`pyd4j report RUN`: HTML page, PNG plots and a Perfetto trace for a profiled run."""

from __future__ import annotations

from pathlib import Path

import click

from pyd4j.commands import _params as params


@click.command("report")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--out", "out_dir", type=params.OutputDir(), default=None,
              help="where to write: a new or empty directory (default: the run directory)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON document (summary, findings, file paths)")
def command(run_dir: Path, out_dir: Path | None, as_json: bool) -> None:
    """Write report.html (+ memory.png, gc.png, workspaces.png, trace.json) for RUN_DIR.

    Timeline lines that cannot be used are skipped and counted (`skipped`). A run without a single
    sample still gets its report (the job's errors may explain why), but exits 1: nothing was measured.
    """
    from pyd4j.output import emit_json, print_table  # noqa: PLC0415
    from pyd4j.profile.report import summary, write_report  # noqa: PLC0415
    from pyd4j.profile.timeline import Timeline  # noqa: PLC0415

    try:
        timeline = Timeline.load(run_dir)
    except FileNotFoundError as err:
        raise click.ClickException(str(err)) from None
    _check_tune_document(run_dir)
    paths = write_report(run_dir, out_dir)
    doc = summary(Timeline.load_lanes(run_dir))
    doc["skipped"] = timeline.skipped
    doc["files"] = {k: str(v) for k, v in paths.items()}
    if not timeline.samples:
        doc.update(ok=False, error=f"{run_dir} holds no usable sample ({_skipped(timeline) or 'the timeline is empty'}): "
                                   f"nothing was measured; the report shows only the run's other records. "
                                   f"Profile the job again")
    if as_json:
        emit_json(doc)
    else:
        print_table(f"report for {doc['job']}", ["file", "path"], sorted(doc["files"].items()))
        if timeline.skipped:
            click.echo(f"skipped in the timeline: {_skipped(timeline)}", err=True)
        if doc.get("stopped_as_asked"):
            click.echo(f"the run ended at its {'measurement window' if doc['stopped_by'] == 'window' else '--timeout'} "
                       f"after {doc['iterations']} iterations, as asked: not a failure")
        for f in doc["findings"]:
            click.echo(f"[{f['severity']}] {f['title']}: {f['fix']}")
    if not timeline.samples:
        if not as_json:
            click.echo(f"error: {doc['error']}", err=True)
        raise SystemExit(1)


def _skipped(timeline) -> str:
    return ", ".join(f"{n} {why}" for why, n in timeline.skipped.items())


def _check_tune_document(run_dir: Path) -> None:
    """The tune document beside a tune's run (tune.json), when there is one, read and validated before
    the report uses it: one that is a directory, not UTF-8, cut short, nested too deep or of wrong types
    is an error naming the file and the field, not passed over without a word."""
    from pyd4j.inputs import InputError, read_json  # noqa: PLC0415
    from pyd4j.profile.tune import TUNE_DOC  # noqa: PLC0415
    from pyd4j.schemas import check  # noqa: PLC0415

    path = run_dir.resolve().parent / TUNE_DOC
    if not path.exists() and not path.is_symlink():
        return
    fix = "tune the job again with this pyd4j, or move the file away to report on the run alone"
    try:
        doc = read_json(path, "tune document")
    except InputError as err:
        raise InputError(f"{err}; {fix}") from None
    check("tune", doc, f"tune document {str(path)!r}", fix)
