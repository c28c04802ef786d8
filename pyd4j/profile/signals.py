"""Stopping `pyd4j profile` / `pyd4j tune` with Ctrl-C, SIGTERM or SIGHUP: the job's process tree
is ended, and what was measured so far is kept, summarised and reported before pyd4j exits with
the conventional status (128 + the signal: 130 for Ctrl-C, 143 for SIGTERM).

A run can also end because pyd4j was asked to end it: at its measurement window (`--window`) or at
`--timeout`. Those ends are the user's choice, never a failure of the job (`stopped_as_asked`).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# How a run ended when pyd4j ended it as it was asked to (run.json's "stopped_by"): not a failure.
AS_ASKED = ("window", "timeout")


def stopped_as_asked(stopped_by: str | None) -> bool:
    """The run was ended at its measurement window or at --timeout, as the user asked: what it measured
    is a part of the job, and nothing about the job failed."""
    return stopped_by in AS_ASKED


def exit_status(returncode: int | None) -> int | None:
    """How a job ended, as one figure everywhere (run.json, summaries, reports, pyd4j's own exit):
    the shell's convention, 128 + the signal for a process a signal ended (Python's subprocess says -N)."""
    if returncode is None:
        return None
    return 128 - returncode if returncode < 0 else returncode


def signal_name(number: int) -> str:
    """SIGKILL for 9; "signal N" for numbers Python does not name."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class Stopped(KeyboardInterrupt):
    """pyd4j was asked to stop while a job ran. `run` (pyd4j.profile.launch.JobRun) is the run that
    was stopped, its timeline kept; `doc` is what `tune` had so far. A KeyboardInterrupt, so code
    that does not know it still stops as it would on Ctrl-C."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)
        self.run: Any = None
        self.doc: dict | None = None

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within the block, the first SIGINT/SIGTERM/SIGHUP raises Stopped in the main thread; later
    ones are ignored so the job's processes can be ended and the report written. Outside the main
    thread (signals cannot be caught there) this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raised: list[int] = []

    def handler(signum, frame):  # noqa: ARG001
        if raised:
            return
        raised.append(signum)
        if _held:
            _held[-1].signum = signum   # raised by the holder once its cleanup is done
            return
        raise Stopped(signum)

    previous = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


class Held:
    """The stop signal that came while signals were held (None: none came)."""

    signum: int | None = None


_held: list[Held] = []


@contextlib.contextmanager
def held_signals() -> Iterator[Held]:
    """Within the block a stop signal does not raise: ending the job's processes must not be cut short
    by the signal that asked for it (that would leave them running). The caller reads `.signum`
    afterwards and stops then."""
    held = Held()
    _held.append(held)
    try:
        yield held
    finally:
        _held.remove(held)
