"""What `pyd4j tune` prints: the reports of its runs, the before/after table, the recommendation and
the outcome, or one JSON document."""

from __future__ import annotations

import sys

import click

from pyd4j.schemas import TUNE_SCHEMA


def report(doc: dict, side: str) -> str | None:
    """Write the report of one of the tune's runs (the tune document gives it its before/after)."""
    from pyd4j.profile.report import write_report  # noqa: PLC0415

    if not doc.get(side):
        return None
    try:
        return str(write_report(doc[side]["run_dir"])["html"])
    except OSError as err:
        click.echo(f"error: could not write the report of {doc[side]['run_dir']}: {err.strerror or err}", err=True)
        return None


def finish(doc: dict, as_json: bool) -> None:
    """The tune's document printed: the JSON document, or the before/after table and what follows it."""
    from pyd4j.output import emit_json  # noqa: PLC0415

    last = "after" if doc.get("after") else "before"
    if last == "after":
        report(doc, "before")
    if not doc.get("from"):   # --from: the run's own report stays as `pyd4j profile` wrote it
        doc["report"] = report(doc, last)
    doc.setdefault("schema", TUNE_SCHEMA)
    if as_json:
        emit_json(doc)
        return
    if not any(doc.get(n) for n in ("before", "after")):
        return
    _print_sides(doc)
    _print_recommendation(doc)
    _print_outcome(doc)
    if doc.get("report"):
        click.echo(f"report: {doc['report']}")


def _print_sides(doc: dict) -> None:
    """The before/after table (and, for a Spark job, the one per executor)."""
    from pyd4j.output import human_bytes, print_table  # noqa: PLC0415

    sides = [(n, doc[n]) for n in ("before", "after") if doc.get(n)]

    def row(label, fn):
        return [label, *(fn(s) for _, s in sides)]

    speed = lambda s: f"{s['iterations_per_s']:.2f}" if s["iterations_per_s"] else "-"  # noqa: E731
    ended = lambda s: f"stopped at the {s['stopped_by']} (as asked)" if s.get("stopped_as_asked") else (  # noqa: E731
        f"stopped ({s['stopped_by']})" if s.get("stopped_by") else "ran to its end")
    partial = f" (PARTIAL: stopped by {doc['stopped_by']} during the {doc['stopped_in']} run)" if doc.get("partial") else ""
    print_table("pyd4j tune" + partial, ["", *(("after (tuned)" if n == "after" else n) for n, _ in sides)], [
        row("exit code", lambda s: s["exit_code"]),
        row("ended", ended),
        row("iterations", lambda s: s["iterations"]),
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


def _print_recommendation(doc: dict) -> None:
    """What the tune ran or recommends: the plan, the flags and why, notes, its re-runs and the throughput."""
    from pyd4j.output import human_bytes  # noqa: PLC0415

    if doc.get("plan"):
        p = doc["plan"]
        said = next((e["result"] for e in p.get("agent", []) if e["type"] == "plan"), {"status": "not reached"})
        click.echo(f"after: the job's network under the {p['policy']} plan {p['path']} (predicted peak "
                   f"{human_bytes(p['predicted_peak_bytes'])}): {said.get('status')}"
                   + (f" ({said['reason']})" if said.get("reason") else ""))
        if p.get("planned_job_offheap"):
            from pyd4j.memory.planned_job import offheap_line  # noqa: PLC0415

            click.echo(f"  {offheap_line(p['planned_job_offheap'])}")
    if doc.get("recommended"):
        click.echo("recommended flags:")
        click.echo("  " + " ".join(doc["recommended"]))
        for arg, why in doc["reasons"].items():
            click.echo(f"    {arg}: {why}")
    if doc.get("recommended_environment"):
        from pyd4j.memory.estimate import assignments  # noqa: PLC0415

        setting = " ".join(assignments(doc["recommended_environment"]))
        click.echo(f"recommended environment (the flags assume it{'' if doc.get('from') else '; the re-run had it'}):")
        click.echo(f"  {setting}")
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


def _print_outcome(doc: dict) -> None:
    """The tune's verdict in one line (none for a partial tune)."""
    outcome = None if doc.get("partial") else doc.get("outcome")
    if doc.get("gc_pressure_not_from_flags"):
        click.echo(f"note: GC pressure in the re-run: {doc['gc_pressure_not_from_flags']}")
    if outcome == "verified":
        click.echo("verified: the re-run finished cleanly" + ("" if doc.get("plan") else " with these flags")
                   + (f", for {doc['verified_for']}" if doc.get("verified_for") not in (None, "the whole job") else ""))
    elif outcome == "recommended":
        click.echo("recommended (not verified by a re-run)")
    elif outcome == "not-verified" and doc["after"].get("plan_not_applied"):
        click.echo(f"not verified: plan not applied ({doc['after']['plan_not_applied']})")
    elif outcome == "not-verified":
        click.echo("NOT verified: " + "; ".join(doc.get("not_verified_because") or (doc.get("after") or {}).get("findings") or [])
                   + "; see the report")
    elif outcome == "rerun-failed":
        failures = ((doc["after"].get("spark") or {}).get("executor_memory_failures") or [])
        click.echo(f"re-run FAILED (exit code {doc['after']['exit_code']}; "
                   + ", ".join(doc["after"]["findings"] + failures) + "); see the report")


def stopped_exit(err, job: list[str], as_json: bool, then: str) -> None:
    """A tune stopped by a signal: what it had (one JSON document with --json, "partial": true), then exit
    128 + the signal."""
    doc = err.doc if err.doc is not None else {"command": list(job), "partial": True, "stopped_by": err.name,
                                               "stopped_in": "the start", "outcome": "stopped"}
    doc.update(partial=True, exit_code=err.exit_code)
    where = doc.get("stopped_in") or "the tune"
    click.echo(f"stopped ({err.name}) during {where if where.startswith('the ') else 'the ' + where + ' run'}: {then}",
               err=True)
    if "speed" in doc and "before" not in doc:
        from pyd4j.output import emit_json  # noqa: PLC0415
        from pyd4j.profile.speed import print_speed  # noqa: PLC0415

        emit_json(doc) if as_json else (print_speed(doc) if doc.get("probe") else None)
    else:
        finish(doc, as_json)
    sys.exit(err.exit_code)
