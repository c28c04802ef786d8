"""`pyd4j tune --from RUN_DIR`: the recommendation from a run that already happened (a production run
under `pyd4j profile`), without starting the job: the anchors that tune from completed runs (Dr.
Elephant, Sparklens) do the same. Nothing verifies the flags; the run decides for what they are sized
(pyd4j.profile.flatness): a run that completed, or one ended at its window or --timeout with its
memory shown flat, sizes them for the whole job; otherwise the limits stay at what it ran with.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from pyd4j.memory.flags import DEFAULT_HEADROOM
from pyd4j.profile.command import JobCommandError
from pyd4j.profile.diagnose import diagnose
from pyd4j.profile.launch import JobRun
from pyd4j.profile.need import environment_for, flags_for, keep_unshown_limits, measured_need
from pyd4j.profile.tune import JobFailedError, recommended_only, window_notes
from pyd4j.profile.tune_outcome import EXIT_ERROR, side_of, untunable


class NotARunError(JobCommandError):
    """RUN_DIR is not a run `pyd4j profile` wrote, or one tune cannot read a recommendation from."""


def tune_from(run_dir: Path | str, out_dir: Path | str | None = None, total: str | int | None = None,
              headroom: float = DEFAULT_HEADROOM) -> dict:
    """The tune document of the run in `run_dir`: its side as `before`, the recommended flags with their
    reasons, "recommended" (exit 0) or "not-verified" (3, with why). Saved as tune.json in `out_dir` if given."""
    run_dir = Path(run_dir)
    try:
        run = JobRun.load(run_dir)
    except FileNotFoundError as err:
        raise NotARunError(f"--from {run_dir}: {err}") from None
    if run.timeline.meta.get("launcher") == "spark-submit":
        raise NotARunError(f"--from {run_dir}: a spark-submit run is sized per executor from runs tune makes itself; "
                           f"run `pyd4j tune -- spark-submit ...` instead")
    first = side_of(run)
    failure = untunable(run, first)
    if failure:
        raise JobFailedError(failure.replace("the first run", "the run"),
                             {"from": str(run_dir), "before": first, "outcome": "error", "exit_code": EXIT_ERROR})
    findings = diagnose(run.timeline)
    need = measured_need(run.timeline, findings)
    flagset = keep_unshown_limits(flags_for(need, run.timeline.name, total, headroom), run.timeline, findings)
    doc = {"from": str(run_dir), "out_dir": str(out_dir) if out_dir else None,
           "command": run.timeline.meta.get("user_command") or run.command, "partial": False, "before": first,
           "recommended": flagset.args(), "recommended_environment": environment_for(first["findings"]),
           "reasons": {f.arg: f.reason for f in flagset.flags},
           "measured_need": asdict(need), "container_bytes": flagset.container_bytes,
           "notes": [f"recommended from the run in {run_dir} without starting the job: no re-run verified these flags",
                     *flagset.notes, *window_notes(first)]}
    return recommended_only(doc, Path(out_dir) if out_dir else None, first)
