"""Run a user's job under pyd4j's agent: every JVM it starts is profiled, nothing it starts
outlives the run, its output is kept in the run directory, its timelines streamed to disk.

The job is any command (`java ...`, `bash -c "java ..."`, `mvn exec:java`, Gradle,
`spark-submit`): the agent reaches every JVM through JAVA_TOOL_OPTIONS (see
pyd4j.profile.command), and each JVM writes its own timeline `jvm-<pid>.jsonl` (see
pyd4j.profile.jvms for who is who).

Two ways for the agents to send their lines: straight into their files (default, survives
anything), or a loopback socket that this process listens on, with a token
(pyd4j.profile.agent_stream).

The job runs in its own session (process group) with a marker in its environment; at its end, at
its measurement window, on a timeout, on Ctrl-C/SIGTERM or on any error here, whatever it started
and left running is ended (pyd4j.profile.processes), and each agent also ends its JVM when this
process is gone (even after SIGKILL). A run with a window (pyd4j.profile.window) ends there.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable

from pyd4j.jvm.classpath import HELPER_JAR, ClasspathError
from pyd4j.memory.machine import cgroup_limit_bytes
from pyd4j.profile.agent_stream import SocketReceiver as _SocketReceiver, os_error as _os_error
from pyd4j.profile.command import TOOL_OPTIONS, JobCommand, JobCommandError
from pyd4j.profile.jvms import LANE_PATTERN, LANE_PREFIX, LANE_SUFFIX
from pyd4j.profile.processes import GRACE_S, RUN_MARKER, ProcessTree, kill_tree, new_marker  # noqa: F401 (kill_tree: the one way)
from pyd4j.profile.signals import Stopped, exit_status, held_signals, stopped_as_asked
from pyd4j.profile.timeline import RUN_META, Timeline, share_meta
from pyd4j.profile.window import AFTER_WINDOW_GRACE_S, RunWindow

DEFAULT_INTERVAL_MS = 100
_AGENT_WRITE_FAILED = re.compile(r"\[pyd4j agent\] could not write the timeline of pid (\d+) \((.*?)\) at (\d+) ms")


class RunDirError(JobCommandError):
    """The run directory given already holds files; a run never overwrites them."""


def check_run_dir(run_dir: Path) -> None:
    """Refuse a run directory that exists and is not empty: the run and its report would write
    jvm-*.jsonl, run.json, stdout.log, stderr.log, report.html, ... over what is there."""
    if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
        raise RunDirError(f"run directory {run_dir} already exists and is not empty; pyd4j does not overwrite "
                          f"earlier runs or other files: give a new or empty directory with --out, or remove it")


def agent_jar() -> Path:
    """The helper jar, which is also the agent (Premain-Class org.pyd4j.agent.Agent)."""
    if not HELPER_JAR.exists():
        raise ClasspathError(f"the profiling agent {HELPER_JAR} is not built; run `make setup`")
    return HELPER_JAR


def agent_option(interval_ms: int, out: Path | None = None, port: int | None = None, hooks: bool = True,
                 parent: int | None = None, plan: Path | None = None, describe: bool = False,
                 extra: list[str] | tuple[str, ...] = ()) -> str:
    """The -javaagent option. Files are given last since a path may hold '=' (not ','); an `out`
    with %p gives each JVM its own file. With `parent`, each JVM ends itself when that process
    (pyd4j) is gone; with `plan`, its networks train under that pyd4j plan file (planned
    training); with `describe`, the agent reports each network's configuration and first batch
    shape (what pyd4j plans from)."""
    if interval_ms < 1:
        raise ValueError(f"sampling interval {interval_ms} ms is too small; use 1 ms or more (default {DEFAULT_INTERVAL_MS})")
    parts = [f"interval={interval_ms}"]
    if not hooks:
        parts.append("hooks=false")
    if parent is not None:
        parts.append(f"parent={parent}")
    if describe:
        parts.append("describe=true")
    parts += [o for o in extra if not o.startswith("stop_file=")]
    stop = [o for o in extra if o.startswith("stop_file=")]
    if stop and "," in stop[0]:
        raise ValueError(f"{stop[0]} contains ',', which the agent's option syntax cannot carry; pick another --out")
    if plan is not None:
        if "," in str(plan):
            raise ValueError(f"plan file {plan} contains ',', which the agent's option syntax cannot carry; move it")
        parts.append(f"plan={plan}")
    parts += stop   # a file: after the options, before the output
    if port is not None:
        parts.append(f"port={port}")
    elif out is not None:
        if "," in str(out):
            raise ValueError(f"run directory {out} contains ',', which the agent's option syntax cannot carry; pick another --out")
        parts.append(f"out={out}")
    return f"-javaagent:{agent_jar()}={','.join(parts)}"


def default_run_dir(title: str, root: Path = Path("runs")) -> Path:
    """`runs/<MainClass>-<YYYYmmdd-HHMMSS>` under the current directory."""
    short = title.rsplit(".", 1)[-1].rsplit("/", 1)[-1] or "job"
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in short)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    path = root / f"{safe}-{stamp}"
    n = 1
    while path.exists():
        n += 1
        path = root / f"{safe}-{stamp}-{n}"
    return path


@dataclass
class JobRun:
    """A finished (or stopped) profiled run: the job's timeline plus every JVM's (`lanes`)."""

    run_dir: Path
    command: list[str]
    returncode: int | None
    interrupted: bool
    wall_s: float
    timeline: Timeline = field(repr=False)
    lanes: list[Timeline] = field(default_factory=list, repr=False)
    stopped_by: str | None = None     # "window", "timeout", "SIGINT", "SIGTERM", "SIGHUP" or None

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.interrupted

    @classmethod
    def load(cls, run_dir: Path | str) -> "JobRun":
        """A run `pyd4j profile` (or tune) wrote, read back from its directory (FileNotFoundError: none there)."""
        lanes = Timeline.load_lanes(run_dir)
        primary = next((t for t in lanes if t.jvm is not None and t.jvm.primary), lanes[0])
        meta = primary.meta
        return cls(Path(run_dir), list(meta.get("command") or []), meta.get("returncode"), bool(meta.get("interrupted")),
                   float(meta.get("wall_s") or primary.duration_s()), primary, lanes, meta.get("stopped_by"))

    @property
    def stopped_as_asked(self) -> bool:
        """Ended at its measurement window or at --timeout: a part of the job, not a failure."""
        return stopped_as_asked(self.stopped_by)


class _LaneTail:
    """Follows every `jvm-*.jsonl` of the run directory as it grows: a new JVM's start line goes to
    `on_jvm`, each sample (with its JVM's "pid" added) to `on_sample`."""

    def __init__(self, run_dir: Path, tree: ProcessTree, on_sample: Callable[[dict], None] | None,
                 on_jvm: Callable[[dict], None] | None) -> None:
        self.run_dir = run_dir
        self.tree = tree
        self.on_sample = on_sample
        self.on_jvm = on_jvm
        self.files: dict[Path, list] = {}   # path -> [position, pending bytes, pid]
        self.windowed = False               # a JVM ended itself at its measurement window

    def poll(self) -> None:
        for path in self.run_dir.glob(f"{LANE_PREFIX}*{LANE_SUFFIX}"):
            state = self.files.setdefault(path, [0, b"", None])
            try:
                with path.open("rb") as fh:
                    fh.seek(state[0])
                    chunk = fh.read()
            except OSError:
                continue
            state[0] += len(chunk)
            state[1] += chunk
            *lines, state[1] = state[1].split(b"\n")
            for line in lines:
                self._line(line, state)

    def _line(self, line: bytes, state: list) -> None:
        try:
            event = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return
        if not isinstance(event, dict):
            return
        kind = event.get("type")
        if kind == "start" and state[2] is None:
            state[2] = event.get("pid")
            if isinstance(state[2], int):
                self.tree.add(state[2])
            if self.on_jvm is not None:
                self.on_jvm(event)
        elif kind == "sample" and self.on_sample is not None:
            self.on_sample({**event, "pid": state[2]})
        elif kind == "window":
            self.windowed = True


# -- the run ------------------------------------------------------------------------------------

def profile_job(
    argv: list[str],
    run_dir: Path | str | None = None,
    interval_ms: int = DEFAULT_INTERVAL_MS,
    extra_jvm_options: list[str] | tuple[str, ...] = (),
    drop_memory_flags: bool = False,
    transport: str = "file",
    hooks: bool = True,
    on_sample: Callable[[dict], None] | None = None,
    echo_output: bool = False,
    timeout_s: float | None = None,
    plan: Path | str | None = None,
    describe: bool = False,
    on_jvm: Callable[[dict], None] | None = None,
    spark_conf: dict[str, str] | None = None,
    env_changes: dict[str, str | None] | None = None,
    window: RunWindow | None = None,
) -> JobRun:
    """Run the job command under the agent and return its timelines.

    `on_sample` gets each sample as it arrives, with its JVM's "pid" (live display); `on_jvm`
    each JVM's start line. `extra_jvm_options` reach the job's JVMs (on a `java` command line
    before the user's own options, so the user's win unless `drop_memory_flags` removes the user's
    -Xmx/-Xms/MaxDirectMemorySize/JavaCPP limits first: pyd4j tune's second run). Past
    `timeout_s` the job is ended and the run returned with stopped_by="timeout". On Ctrl-C (or
    pyd4j.profile.signals.Stopped) the job is ended and Stopped raised with `.run` set.
    `plan`: the job's networks train under that pyd4j plan file (the agent's plan= option);
    `describe`: the agent reports each network (configuration, first batch shape) in the timeline.
    `spark_conf`: Spark settings for a spark-submit job (pyd4j tune's), given as --conf.
    `env_changes`: environment variables set (or, with None, removed) for the job (pyd4j tune --speed's).
    `window`: the run's measurement window (pyd4j.profile.window): the job is ended there, stopped_by="window".
    """
    command = JobCommand.parse(argv)
    run_dir = Path(run_dir) if run_dir else default_run_dir(command.title)
    check_run_dir(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    run_dir = run_dir.resolve()
    stop_file = run_dir / "window.stop"
    agent, env, receiver, marker = _agent_and_env(run_dir, interval_ms, transport, hooks, plan, describe, env_changes,
                                                  window.agent_options(stop_file) if window is not None else [])
    full, env = command.launch(agent, extra_jvm_options, drop_memory_flags=drop_memory_flags, env=env,
                               spark_conf=spark_conf)
    meta = {
        "command": full, "user_command": list(argv), "launcher": command.kind, "title": command.title,
        "interval_ms": interval_ms, "transport": transport, "started": time.time(),
        "cgroup_limit_bytes": cgroup_limit_bytes(), "extra_jvm_options": list(extra_jvm_options),
        "java_tool_options": env.get(TOOL_OPTIONS, ""), "spark_conf": dict(spark_conf or {}),
        "env_changes": dict(env_changes or {}), "returncode": None, "interrupted": False, "stopped_by": None,
    }
    _write_meta(run_dir, meta)
    started = time.monotonic()
    proc, stdout, stderr = _start(full, env, run_dir, echo_output, receiver)
    tree = ProcessTree(proc, marker)
    pumps = []
    if echo_output:
        pumps.append(threading.Thread(target=_tee, args=(proc.stdout, stdout), daemon=True))
        pumps[-1].start()
    stopped: Stopped | None = None
    stopped_by = None
    try:
        stopped_by = _watch(proc, _LaneTail(run_dir, tree, on_sample, on_jvm), tree, timeout_s, started,
                            _WindowWatch(window, run_dir, stop_file) if window is not None else None)
    except KeyboardInterrupt as err:
        stopped = err if isinstance(err, Stopped) else Stopped(signal.SIGINT)
        stopped_by = stopped.name
    finally:
        root_done, left, still, signum = _end(proc, tree, pumps, (stdout, stderr), receiver)
        if signum is not None and stopped is None:
            stopped = Stopped(signum)
            stopped_by = stopped_by or stopped.name
        # one figure for how the job ended: 128 + N for a signal, as a shell says it (and the signal itself)
        meta.update(returncode=exit_status(proc.returncode), interrupted=stopped_by is not None, stopped_by=stopped_by,
                    signal=-proc.returncode if proc.returncode is not None and proc.returncode < 0 else None,
                    wall_s=time.monotonic() - started, ended=time.time(),
                    ended_after_exit=left if root_done else [], left_running=still,
                    window=window.record() if window is not None else None)
    return _finished(run_dir, full, meta, receiver, stopped)


def _end(proc: subprocess.Popen, tree: ProcessTree, pumps: list[threading.Thread], logs: tuple,
         receiver: _SocketReceiver | None) -> tuple[bool, list[dict], list[dict], int | None]:
    """End the job's processes and close its streams, a stop signal held meanwhile (it must not cut that
    short): (the root had exited, what was still running then, what is left now, the signal held)."""
    with held_signals() as held:
        root_done = proc.poll() is not None
        left = tree.end()
        still = tree.left_running()
        for pump in pumps:
            pump.join(timeout=5)
        for log in logs:
            log.close()
        if receiver is not None:
            receiver.close()
    return root_done, left, still, held.signum


def _start(full: list[str], env: dict[str, str], run_dir: Path, echo_output: bool,
           receiver: _SocketReceiver | None) -> tuple[subprocess.Popen, object, object]:
    """The job started in a session of its own, its output into the run directory: (process, stdout, stderr)."""
    stdout = (run_dir / "stdout.log").open("wb")
    stderr = (run_dir / "stderr.log").open("wb")
    try:
        proc = subprocess.Popen(full, stdout=subprocess.PIPE if echo_output else stdout, stderr=stderr,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    except OSError as err:
        stdout.close()
        stderr.close()
        if receiver is not None:
            receiver.close(timeout_s=1)
        raise JobCommandError(f"could not start {full[0]!r}: {err.strerror or err}") from None
    return proc, stdout, stderr


def _agent_and_env(run_dir: Path, interval_ms: int, transport: str, hooks: bool, plan, describe: bool,
                   env_changes: dict[str, str | None] | None, extra: list[str]
                   ) -> tuple[str, dict[str, str], _SocketReceiver | None, str]:
    """The agent option, the job's environment (its changes, the run's marker, the socket's token), the
    socket receiver when the lines stream over one, and the marker."""
    env = dict(os.environ)
    for name, value in (env_changes or {}).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    marker = new_marker()
    env[RUN_MARKER] = marker
    receiver = None
    if transport == "socket":
        token = secrets.token_hex(16)
        receiver = _SocketReceiver(run_dir, token)
        receiver.start()
        env["PYD4J_AGENT_TOKEN"] = token
        agent = agent_option(interval_ms, port=receiver.port, hooks=hooks, parent=os.getpid(), plan=plan,
                             describe=describe, extra=extra)
    elif transport == "file":
        agent = agent_option(interval_ms, out=run_dir / LANE_PATTERN, hooks=hooks, parent=os.getpid(), plan=plan,
                             describe=describe, extra=extra)
    else:
        raise ValueError(f"transport {transport!r}: use 'file' or 'socket'")
    return agent, env, receiver, marker


def _finished(run_dir: Path, full: list[str], meta: dict, receiver: _SocketReceiver | None,
              stopped: Stopped | None) -> JobRun:
    """The ended run read back, its run.json completed; Stopped raised with it when pyd4j was stopped."""
    lanes = Timeline.load_lanes(run_dir)
    meta["jvms"] = [t.jvm.to_dict() for t in lanes if t.jvm is not None]
    meta["write_errors"] = _write_errors(run_dir, lanes, receiver, meta)
    _write_meta(run_dir, meta)
    share_meta(lanes, meta)
    primary = next((t for t in lanes if t.jvm is not None and t.jvm.primary), lanes[0])
    stopped_by = meta["stopped_by"]
    run = JobRun(run_dir, full, meta["returncode"], stopped_by is not None, meta["wall_s"], primary, lanes, stopped_by)
    if stopped is not None:
        stopped.run = run
        raise stopped
    return run


def _write_meta(run_dir: Path, meta: dict) -> None:
    """run.json; a full disk loses it (said in write_errors kept in memory), not the run."""
    try:
        (run_dir / RUN_META).write_text(json.dumps(meta, indent=2))
    except OSError as err:
        meta.setdefault("write_errors", []).append({"file": RUN_META, "error": _os_error(err)})


def _write_errors(run_dir: Path, lanes: list[Timeline], receiver: _SocketReceiver | None, meta: dict) -> list[dict]:
    """What could not be written: streams the receiver could not store, and timelines an agent
    could not write itself (it says so on stderr), each with where the kept part ends."""
    errors = [e for e in meta.get("write_errors", []) if e.get("file") == RUN_META]
    if receiver is not None:
        errors += receiver.write_errors
    try:
        text = (run_dir / "stderr.log").read_text(errors="replace")
    except OSError:
        text = ""
    for match in _AGENT_WRITE_FAILED.finditer(text):
        pid = int(match.group(1))
        lane = next((t for t in lanes if t.start.get("pid") == pid), None)
        errors.append({"pid": pid, "file": lane.path.name if lane and lane.path else None, "error": match.group(2),
                       "from_t_ms": int(match.group(3)), "lost_lines": None, "lost_bytes": None})
    ended_ms = meta.get("ended", time.time()) * 1000.0
    for e in errors:
        lane = next((t for t in lanes if t.start.get("pid") == e.get("pid")), None)
        last = lane.samples[-1]["t"] if lane is not None and lane.samples else None
        e["last_kept_t_ms"] = last
        e["lost_s"] = round((ended_ms - last) / 1000.0, 3) if last else None
    return errors


def _tee(src, dst) -> None:
    for chunk in iter(lambda: src.readline(), b""):
        dst.write(chunk)
        dst.flush()
        os.write(1, chunk)


class _WindowWatch:
    """A run's measurement window as `_watch` follows it: an auto window is judged on the timelines and
    the agent asked to end the job through the stop file; once a JVM ended itself at its window, or the
    agent did not end it within the grace after it was asked, the window is over for the whole job."""

    def __init__(self, window: RunWindow, run_dir: Path, stop_file: Path) -> None:
        self.window, self.run_dir, self.stop_file = window, run_dir, stop_file
        self.asked: float | None = None
        self.seen: float | None = None

    def ended(self, tail: _LaneTail) -> bool:
        """True once the rest of the job is to be ended: the grace after the window is spent."""
        now = time.monotonic()
        if self.asked is None and self.window.over(self.run_dir):
            self.asked = now
            try:
                self.stop_file.touch()
            except OSError:
                return True   # the agent cannot be asked: end the job here
        if tail.windowed and self.seen is None:
            self.seen = now
        if self.seen is not None:
            return now - self.seen > AFTER_WINDOW_GRACE_S
        return self.asked is not None and now - self.asked > self.window.stop_grace_s(self.run_dir)

    def reached(self, tail: _LaneTail) -> bool:
        return tail.windowed or self.asked is not None


def _watch(proc: subprocess.Popen, tail: _LaneTail, tree: ProcessTree, timeout_s: float | None,
           started: float, window: _WindowWatch | None = None) -> str | None:
    """Wait for the job's root process, following its timelines; "timeout" past timeout_s, "window"
    once its measurement window is over."""
    scans = 0
    while True:
        done = proc.poll() is not None
        if scans % 5 == 0 and not done:
            tree.scan()  # remember children while they are still under the root
        scans += 1
        tail.poll()
        if done:
            tail.poll()
            # a JVM that ended itself at a window (the job's own -Dpyd4j.agent=window_... too) stopped as asked
            return "window" if tail.windowed or (window is not None and window.reached(tail)) else None
        if window is not None and window.ended(tail):
            return "window"
        if timeout_s is not None and time.monotonic() - started > timeout_s:
            return "timeout"
        time.sleep(0.2)
