"""Profile pyd4j's own in-process JVM (JPype) from Python:

    with pyd4j.profile.session("runs/notebook") as run:
        ...  # ND4J work in this process
    print(run.timeline.peaks())

The sampler is the agent's, started through JPype in a JVM that has no -javaagent, so there are
no bytecode hooks: heap, GC, NIO pools, JavaCPP counters, RSS and threads are sampled, workspaces
and DL4J iterations are not.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from pyd4j.profile.launch import DEFAULT_INTERVAL_MS, check_run_dir, default_run_dir
from pyd4j.profile.timeline import RUN_META, TIMELINE, Timeline


@dataclass
class SessionRun:
    run_dir: Path
    timeline: Timeline | None = field(default=None, repr=False)


@contextlib.contextmanager
def session(run_dir: str | Path | None = None, interval_ms: int = DEFAULT_INTERVAL_MS) -> Iterator[SessionRun]:
    """Sample this process's JVM (started now with defaults if it is not running) while the block runs.
    `run_dir` (default `runs/session-<time>`) must be new or empty: earlier runs are never overwritten."""
    import jpype  # noqa: PLC0415

    import pyd4j.jvm  # noqa: PLC0415

    if interval_ms < 1:
        raise ValueError(f"sampling interval {interval_ms} ms is too small; use 1 ms or more")
    run_dir = Path(run_dir) if run_dir is not None else default_run_dir("session")
    check_run_dir(run_dir)
    pyd4j.jvm.info()  # the running JVM, or one started with default options
    run_dir.mkdir(parents=True, exist_ok=True)
    path = (run_dir / TIMELINE).resolve()
    if "," in str(path):
        raise ValueError(f"run directory {run_dir} contains ',', which the agent's option syntax cannot carry")
    path.write_text("")
    started = time.time()
    (run_dir / RUN_META).write_text(json.dumps({"command": ["(in-process JPype session)"], "title": "in-process session",
                                                "interval_ms": interval_ms, "started": started, "returncode": None}))
    agent = jpype.JClass("org.pyd4j.agent.Agent")
    state = str(agent.startInProcess(f"interval={interval_ms},out={path}"))
    if state != "started":
        raise RuntimeError(f"the in-process sampler did not start ({state}); only one session may run at a time")
    run = SessionRun(run_dir)
    try:
        yield run
    finally:
        agent.stopInProcess()
        (run_dir / RUN_META).write_text(json.dumps({"command": ["(in-process JPype session)"], "title": "in-process session",
                                                    "interval_ms": interval_ms, "started": started, "returncode": 0,
                                                    "wall_s": time.time() - started}))
        run.timeline = Timeline.load(run_dir)
