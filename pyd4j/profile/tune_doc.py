"""The tune's document on disk: tune.json next to its before/ and after/ runs, which each run's report
(now or later) reads for its before/after section."""

from __future__ import annotations

import json
from pathlib import Path

from pyd4j.schemas import TUNE_SCHEMA, check

TUNE_DOC = "tune.json"


def save_tune_doc(out: Path, doc: dict) -> None:
    """tune.json next to the runs, so each run's report (now or later) shows the before/after."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / TUNE_DOC).write_text(json.dumps({"schema": TUNE_SCHEMA, **doc}, indent=2, default=str))
    except OSError:
        pass  # the document is still printed; only the reports' before/after section is lost


def find_tune_doc(run_dir: Path) -> tuple[dict, str] | None:
    """(the tune document, "before" or "after") when `run_dir` is one of `pyd4j tune`'s runs."""
    path = run_dir.parent / TUNE_DOC
    if not path.exists():
        return None
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    check("tune", doc, f"tune document {path}", "tune the job again with this pyd4j, or remove the file")
    moved = _resolved(doc.get("out_dir") or "") != run_dir.parent.resolve()
    for side in ("after", "before"):
        recorded = (doc.get(side) or {}).get("run_dir")
        if not recorded:
            continue
        if moved and Path(recorded).name == run_dir.name:  # the tune directory was moved or copied
            for other in ("before", "after"):
                if (doc.get(other) or {}).get("run_dir"):
                    doc[other]["run_dir"] = str(run_dir.parent / Path(doc[other]["run_dir"]).name)
            return doc, side
        if _resolved(recorded) == run_dir.resolve():
            return doc, side
    return None


def _resolved(text: str) -> Path | None:
    """The path a document records, resolved; None where it names no path this system takes (a NUL byte)."""
    try:
        return Path(text).resolve()
    except (OSError, ValueError):
        return None
