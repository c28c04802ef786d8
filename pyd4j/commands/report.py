"""`pyd4j report RUN`: HTML page, PNG plots and a Perfetto trace for a profiled run."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("report")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=None, help="where to write (default: the run directory)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON document (summary, findings, file paths)")
def command(run_dir: Path, out_dir: Path | None, as_json: bool) -> None:
    """Write report.html (+ memory.png, gc.png, workspaces.png, trace.json) for RUN_DIR."""
    from pyd4j.output import emit_json, print_table  # noqa: PLC0415
    from pyd4j.profile.report import summary, write_report  # noqa: PLC0415
    from pyd4j.profile.timeline import Timeline  # noqa: PLC0415

    try:
        paths = write_report(run_dir, out_dir)
    except FileNotFoundError as err:
        raise click.ClickException(str(err)) from None
    doc = summary(Timeline.load_lanes(run_dir))
    doc["files"] = {k: str(v) for k, v in paths.items()}
    if as_json:
        emit_json(doc)
    else:
        print_table(f"report for {doc['job']}", ["file", "path"], sorted(doc["files"].items()))
        for f in doc["findings"]:
            click.echo(f"[{f['severity']}] {f['title']}: {f['fix']}")
