"""Run a user's Java job under pyd4j's agent: a child in its own process group that never
outlives us, its output kept in the run directory, its timeline streamed to disk as it comes.

Two ways for the agent to send its lines: straight into `timeline.jsonl` (default, survives
anything), or a loopback socket that this process listens on, where the first line must carry
a random token handed to the job in its environment (PYD4J_AGENT_TOKEN), so no other local
process can inject samples.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable

import psutil

from pyd4j.jvm.classpath import HELPER_JAR, ClasspathError
from pyd4j.memory.machine import cgroup_limit_bytes
from pyd4j.profile.command import JavaCommand, JobCommandError
from pyd4j.profile.timeline import RUN_META, TIMELINE, Timeline

DEFAULT_INTERVAL_MS = 100
# How long a connection to the socket receiver may take to send its hello line before it is
# dropped, so a silent local process cannot hold the one accept slot the agent needs.
HELLO_TIMEOUT_S = 5.0


class RunDirError(JobCommandError):
    """The run directory given already holds files; a run never overwrites them."""


def check_run_dir(run_dir: Path) -> None:
    """Refuse a run directory that exists and is not empty: the run and its report would write
    timeline.jsonl, run.json, stdout.log, stderr.log, report.html, ... over what is there."""
    if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
        raise RunDirError(f"run directory {run_dir} already exists and is not empty; pyd4j does not overwrite "
                          f"earlier runs or other files: give a new or empty directory with --out, or remove it")


def agent_jar() -> Path:
    """The helper jar, which is also the agent (Premain-Class org.pyd4j.agent.Agent)."""
    if not HELPER_JAR.exists():
        raise ClasspathError(f"the profiling agent {HELPER_JAR} is not built; run `make setup`")
    return HELPER_JAR


def agent_option(interval_ms: int, out: Path | None = None, port: int | None = None, hooks: bool = True,
                 parent: int | None = None, plan: Path | None = None, describe: bool = False) -> str:
    """The -javaagent option. Files are given last since a path may hold '=' (not ',').
    With `parent`, the job ends itself when that process (pyd4j) is gone; with `plan`, its
    networks train under that pyd4j plan file (planned training); with `describe`, the agent
    reports each network's configuration and first batch shape (what pyd4j plans from)."""
    if interval_ms < 1:
        raise ValueError(f"sampling interval {interval_ms} ms is too small; use 1 ms or more (default {DEFAULT_INTERVAL_MS})")
    parts = [f"interval={interval_ms}"]
    if not hooks:
        parts.append("hooks=false")
    if parent is not None:
        parts.append(f"parent={parent}")
    if describe:
        parts.append("describe=true")
    if plan is not None:
        if "," in str(plan):
            raise ValueError(f"plan file {plan} contains ',', which the agent's option syntax cannot carry; move it")
        parts.append(f"plan={plan}")
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
    """A finished (or interrupted) profiled run."""

    run_dir: Path
    command: list[str]
    returncode: int | None
    interrupted: bool
    wall_s: float
    timeline: Timeline = field(repr=False)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.interrupted


def kill_tree(pid: int, grace_s: float = 3.0) -> None:
    """End a process and everything it started: SIGTERM to all, then SIGKILL to the survivors."""
    try:
        parent = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    procs = [parent, *parent.children(recursive=True)]
    for p in procs:
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=grace_s)


class _SocketReceiver(threading.Thread):
    """Accepts one agent connection on loopback, checks its token, appends its lines to disk."""

    def __init__(self, path: Path, token: str) -> None:
        super().__init__(name="pyd4j-agent-receiver", daemon=True)
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.5)
        self.port = self.server.getsockname()[1]
        self.path = path
        self.token = token
        self.rejected = 0
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            with self.path.open("ab") as out:
                while not self.stop.is_set():
                    try:
                        conn, _ = self.server.accept()
                    except OSError:
                        continue
                    with conn:
                        rest = self._hello(conn)
                        if rest is None:
                            self.rejected += 1  # a local process without the token: drop it
                            continue
                        conn.settimeout(None)
                        for chunk in iter(lambda: conn.recv(1 << 16), b""):
                            out.write(rest + chunk)
                            out.flush()
                            rest = b""
                        out.write(rest)
                        return
        finally:
            self.server.close()

    def _hello(self, conn: socket.socket) -> bytes | None:
        """Read the first line within HELLO_TIMEOUT_S; the bytes after it if it carries the token."""
        deadline = time.monotonic() + HELLO_TIMEOUT_S
        data = b""
        while b"\n" not in data:
            left = deadline - time.monotonic()
            if left <= 0 or len(data) > 4096:
                return None
            conn.settimeout(left)
            try:
                chunk = conn.recv(4096)
            except OSError:
                return None
            if not chunk:
                return None
            data += chunk
        first, rest = data.split(b"\n", 1)
        try:
            hello = json.loads(first)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None
        if not isinstance(hello, dict) or hello.get("type") != "hello" \
                or not secrets.compare_digest(str(hello.get("token", "")).encode(), self.token.encode()):
            return None
        return rest


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
) -> JobRun:
    """Run `java ... Main ...` under the agent and return its timeline.

    The job runs in its own session (process group); on Ctrl-C, timeout or any exception here
    the whole tree is terminated, and the timeline written so far stays in `run_dir`.
    `on_sample` gets each sample as it arrives (live display). `extra_jvm_options` go before the
    user's own options; `drop_memory_flags` removes the user's -Xmx/-Xms/MaxDirectMemorySize/
    JavaCPP limits first (pyd4j tune's second run). `plan`: the job's networks train under
    that pyd4j plan file (the agent's plan= option); `describe`: the agent reports each network
    (configuration, first batch shape) in the timeline.
    """
    command = JavaCommand.parse(argv)
    run_dir = Path(run_dir) if run_dir else default_run_dir(command.title)
    check_run_dir(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    timeline_path = (run_dir / TIMELINE).resolve()
    timeline_path.write_text("")
    env = dict(os.environ)
    receiver = None
    if transport == "socket":
        token = secrets.token_hex(16)
        receiver = _SocketReceiver(timeline_path, token)
        receiver.start()
        env["PYD4J_AGENT_TOKEN"] = token
        agent = agent_option(interval_ms, port=receiver.port, hooks=hooks, parent=os.getpid(), plan=plan,
                             describe=describe)
    elif transport == "file":
        agent = agent_option(interval_ms, out=timeline_path, hooks=hooks, parent=os.getpid(), plan=plan,
                             describe=describe)
    else:
        raise ValueError(f"transport {transport!r}: use 'file' or 'socket'")
    full = command.argv([agent, *extra_jvm_options], drop_memory_flags=drop_memory_flags)
    meta = {
        "command": full, "user_command": list(argv), "title": command.title, "interval_ms": interval_ms,
        "transport": transport, "started": time.time(), "cgroup_limit_bytes": cgroup_limit_bytes(),
        "extra_jvm_options": list(extra_jvm_options), "returncode": None, "interrupted": False,
    }
    (run_dir / RUN_META).write_text(json.dumps(meta, indent=2))
    stdout = (run_dir / "stdout.log").open("wb")
    stderr = (run_dir / "stderr.log").open("wb")
    started = time.monotonic()
    proc = subprocess.Popen(full, stdout=subprocess.PIPE if echo_output else stdout, stderr=stderr,
                            stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    pumps = []
    if echo_output:
        pumps.append(threading.Thread(target=_tee, args=(proc.stdout, stdout), daemon=True))
        pumps[-1].start()
    interrupted = False
    try:
        _watch(proc, timeline_path, on_sample, timeout_s, started)
    except BaseException:
        interrupted = True
        kill_tree(proc.pid)
        raise
    finally:
        if proc.poll() is None:
            kill_tree(proc.pid)
        proc.wait()
        for pump in pumps:
            pump.join(timeout=5)
        stdout.close()
        stderr.close()
        if receiver is not None:
            receiver.stop.set()
            receiver.join(timeout=5)
        meta.update(returncode=proc.returncode, interrupted=interrupted, wall_s=time.monotonic() - started,
                    ended=time.time())
        (run_dir / RUN_META).write_text(json.dumps(meta, indent=2))
    timeline = Timeline.load(run_dir)
    return JobRun(run_dir, full, proc.returncode, interrupted, meta["wall_s"], timeline)


def _tee(src, dst) -> None:
    for chunk in iter(lambda: src.readline(), b""):
        dst.write(chunk)
        dst.flush()
        os.write(1, chunk)


def _watch(proc: subprocess.Popen, path: Path, on_sample: Callable[[dict], None] | None,
           timeout_s: float | None, started: float) -> None:
    """Wait for the job, handing new samples to on_sample; raise TimeoutError past timeout_s."""
    position = 0
    pending = b""
    while True:
        done = proc.poll() is not None
        if on_sample is not None and path.exists():
            with path.open("rb") as fh:
                fh.seek(position)
                chunk = fh.read()
            position += len(chunk)
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if event.get("type") == "sample":
                    on_sample(event)
        if done:
            return
        if timeout_s is not None and time.monotonic() - started > timeout_s:
            raise TimeoutError(f"the job ran past --timeout {timeout_s:.0f} s and was stopped; its timeline so far is kept")
        time.sleep(0.2)
