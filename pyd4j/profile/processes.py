"""The job's processes: everything a run starts ends with it.

The job runs in its own session (process group), and its environment carries a marker
(`PYD4J_RUN=<token>`, inherited by every process it starts, through shells, launchers, `setsid`
and double forks alike). At the end of the run (its own end, a window, a timeout, a signal, an
error in pyd4j) every process of the group, every process seen under the job while it ran, and
every process carrying the marker is ended: SIGTERM (the agents' shutdown hooks write their
timelines' end lines), then SIGKILL after a grace period. What is still running after that is
found by the same marker and reported (`left_running` in run.json), never left unsaid.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from typing import Callable

import psutil

# How long the job's processes get between SIGTERM (shutdown hooks write the timelines' end lines)
# and SIGKILL.
GRACE_S = 5.0
RUN_MARKER = "PYD4J_RUN"


def new_marker() -> str:
    """A token for one run's environment marker."""
    return secrets.token_hex(8)


def marked(token: str) -> list[psutil.Process]:
    """This user's processes whose environment carries the run's marker (other users' cannot be read,
    and a job never runs as another user)."""
    want = f"{RUN_MARKER}={token}".encode()
    uid = os.getuid()
    found = []
    for p in psutil.process_iter(["uids"]):
        try:
            if p.pid == os.getpid() or p.info["uids"] is None or p.info["uids"].real != uid:
                continue
            with open(f"/proc/{p.pid}/environ", "rb") as fh:
                if want in fh.read().split(b"\0"):
                    found.append(p)
        except (OSError, psutil.Error):
            continue
    return [p for p in found if _running(p)]


class ProcessTree:
    """Every process the job started, remembered as it runs (pid with its start time, so a reused
    pid is never taken for one of ours): children and grandchildren seen under the root, and every
    JVM whose agent reported in, even one that left the tree (a Gradle daemon detaches itself).
    With the run's `marker`, also every process that inherited the job's environment."""

    def __init__(self, root: subprocess.Popen, marker: str | None = None) -> None:
        self.root = root
        self.marker = marker
        self.seen: dict[int, float] = {}

    def add(self, pid: int) -> None:
        if pid == self.root.pid or pid in self.seen:
            return
        try:
            self.seen[pid] = psutil.Process(pid).create_time()
        except psutil.Error:
            pass

    def scan(self) -> None:
        if self.root.returncode is not None:
            return   # reaped: its pid may be another process's now, and its children were handed to init
        try:
            for child in psutil.Process(self.root.pid).children(recursive=True):
                self.add(child.pid)
        except psutil.Error:
            pass

    def alive(self) -> list[psutil.Process]:
        out = []
        for pid, created in self.seen.items():
            try:
                p = psutil.Process(pid)
                if p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
            except psutil.Error:
                pass
        return out

    def _others(self) -> list[psutil.Process]:
        """The job's processes other than the root that are running: seen, marked, or in its group."""
        self.scan()
        procs = {p.pid: p for p in self.alive()}
        if self.marker:
            for p in marked(self.marker):
                self.add(p.pid)
                procs.setdefault(p.pid, p)
        return [p for p in procs.values() if p.pid != self.root.pid]

    def _group_is_ours(self, others: list[psutil.Process]) -> bool:
        """Whether the job's process group may be signalled: its root runs, or a process of ours is in it
        (once the root is gone its pid, the group's id, could be another's only when the group is empty)."""
        if self.root.poll() is None:
            return True
        for p in others:
            try:
                if os.getpgid(p.pid) == self.root.pid:
                    return True
            except OSError:
                pass
        return False

    def end(self, grace_s: float = GRACE_S) -> list[dict]:
        """SIGTERM to the job's process group and to every process of the job, SIGKILL to what is left
        after `grace_s`. The root is reaped by Popen.wait() (never by psutil), so its real exit
        status is kept. Returns the processes other than the root that were still running."""
        others = self._others()
        left = [{"pid": p.pid, "name": _name(p)} for p in others]
        if self._group_is_ours(others):
            _signal_group(self.root.pid, signal.SIGTERM)
        for p in others:
            _try(p.terminate)
        deadline = time.monotonic() + grace_s
        try:
            self.root.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        _, survivors = psutil.wait_procs(others, timeout=max(0.1, deadline - time.monotonic()))
        survivors = [p for p in survivors if _running(p)]
        if self.root.poll() is None or survivors:
            if self._group_is_ours(survivors):
                _signal_group(self.root.pid, signal.SIGKILL)
            _try(self.root.kill)
            for p in survivors:
                _try(p.kill)
        self.root.wait()
        psutil.wait_procs(survivors, timeout=grace_s)
        return left

    def left_running(self) -> list[dict]:
        """After `end`: the job's processes still running (none, unless one ignores SIGKILL's reach:
        another user's, or stuck in the kernel), each with its pid and command line."""
        return [{"pid": p.pid, "name": _name(p)} for p in self._others() if _running(p)]


def _name(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())[:300] or p.name()
    except psutil.Error:
        return "?"


def _running(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _try(action: Callable[[], object]) -> None:
    try:
        action()
    except (psutil.Error, ProcessLookupError):
        pass


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_tree(pid: int, grace_s: float = 3.0) -> None:
    """End a process that is not our child and everything it started: SIGTERM, then SIGKILL."""
    try:
        parent = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    procs = [parent, *parent.children(recursive=True)]
    for p in procs:
        _try(p.terminate)
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        _try(p.kill)
    psutil.wait_procs(alive, timeout=grace_s)
