"""The one harness every benchmark runs on: each result file's `run` record (machine, load, command
line, commit and date under fixed keys), validated against one schema before it is written; sides of an
A/B interleaved, with their median and spread; and what several benchmarks measure on (the training
job, DL4J's zoo, the job corpus, the speed jobs, deeplearning4j-examples jobs), one module each.

    from harness import Recorder
    rec = Recorder("inference_footprint")
    ... rec.doc["models"][name] = row; rec.write(path)

Scripts import this package and pyd4j, never each other. Importing it puts the project's folder on
`sys.path` (scripts run as `python benchmarks/<name>.py`), so that no script edits `sys.path` itself.
`python -m benchmarks.harness` lists the benchmarks: what each measures and how long it takes.
"""

from __future__ import annotations

import sys

from .ab import interleave, median_range, order, ratios, run_pool
from .record import FIXTURES, RESULTS, ROOT, Recorder, ResultFile, RunRecord, amend, portable, write_json

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

__all__ = ["FIXTURES", "RESULTS", "ROOT", "Recorder", "ResultFile", "RunRecord", "amend", "interleave",
           "median_range", "order", "portable", "ratios", "run_pool", "write_json"]
