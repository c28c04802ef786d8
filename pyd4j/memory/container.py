"""Run a command under a real container memory limit: a fresh memory cgroup (v1 or v2), removed afterwards.

This is what a Kubernetes/Docker memory limit does to a JVM, reproduced on this machine so the flags
pyd4j generates (whose container limit is `FlagSet.container_bytes`) can be checked against the
kernel rather than against JavaCPP's own bookkeeping:

    with a writable cgroup v2 group (memory in its subtree_control): a child with memory.max
    with a writable cgroup v1 memory hierarchy: a child with memory.limit_in_bytes (and memsw)

The child process joins the group before it execs, so every byte it and its children touch is
charged there. After it ends we read how it ended (exit code, SIGKILL), whether the kernel's OOM
killer fired inside the group (v1 memory.oom_control `oom_kill`, v2 memory.events `oom_kill`),
how often the limit was hit (v1 memory.failcnt, v2 memory.events `max`), and the peak usage
(v1 memory.max_usage_in_bytes, v2 memory.peak). The group is always removed: also on timeout,
on an exception and on Ctrl-C (any process left in it is killed first).

Pure Python; needs root or a delegated cgroup. `ContainerUnavailable` says which paths were tried,
why each failed, and the fix.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

from pyd4j.memory.machine import CGROUP_ROOT, PROC_SELF_CGROUP, own_cgroup_paths
from pyd4j.output import human_bytes

_PREFIX = "pyd4j-limit-"
_MIN_LIMIT = 4 * 1024**2  # below this the kernel cannot even exec a shell; a limit that small is a typo
MiB = 1024**2


class ContainerError(RuntimeError):
    """The limited run could not be set up (bad limit, cgroup refused the process)."""


class ContainerUnavailable(ContainerError):
    """No writable memory cgroup here: lists what was tried and the fix."""

    def __init__(self, message: str, tried: list[tuple[str, str]]) -> None:
        super().__init__(message)
        self.tried = tried


@dataclass(frozen=True)
class ContainerResult:
    """How a command ended under a memory limit."""

    command: tuple[str, ...]
    limit_bytes: int
    cgroup_version: int
    exit_code: int | None          # as subprocess reports it: negative = killed by that signal
    oom_kill_count: int            # kernel OOM kills inside the group
    failcnt: int                   # times usage hit the limit (the kernel then reclaimed or killed)
    peak_bytes: int | None         # peak charged memory (RSS + page cache + kernel), None if unreadable
    seconds: float
    timed_out: bool = False
    stdout: str = ""
    stderr: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def killed_signal(self) -> int | None:
        """The signal that ended the process (also through a shell's 128+N exit code)."""
        if self.exit_code is None:
            return None
        if self.exit_code < 0:
            return -self.exit_code
        if self.exit_code > 128 and self.exit_code - 128 in (signal.SIGKILL, signal.SIGTERM):
            return self.exit_code - 128
        return None

    @property
    def oom_killed(self) -> bool:
        """The kernel OOM killer ended (a process of) the command because of the limit."""
        if self.timed_out:
            return False
        if self.oom_kill_count > 0:
            return True
        # kernels without an oom_kill counter: SIGKILL that nobody sent while the limit was being hit
        return self.killed_signal == signal.SIGKILL and self.failcnt > 0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.oom_killed

    def describe(self) -> str:
        """One line: how it ended, in terms a user can act on."""
        limit = human_bytes(self.limit_bytes)
        peak = f", peak {human_bytes(self.peak_bytes)}" if self.peak_bytes is not None else ""
        if self.timed_out:
            return f"timed out after {self.seconds:.0f} s under the {limit} container limit{peak}"
        if self.oom_killed:
            return (f"memory exhausted: the kernel OOM killer ended the process at the container limit {limit}{peak} "
                    f"(exit {self.exit_code}); raise the container memory limit (k8s resources.limits.memory, "
                    f"docker --memory) to the generated value, or lower the batch")
        if self.exit_code == 0:
            return f"ok under the {limit} container limit{peak}"
        return f"exit code {self.exit_code} under the {limit} container limit{peak} (not an OOM kill)"

    def to_dict(self, output: bool = False) -> dict:
        d = asdict(self)
        d["command"] = list(self.command)
        d.update(oom_killed=self.oom_killed, ok=self.ok, killed_signal=self.killed_signal, description=self.describe())
        if not output:
            d.pop("stdout")
            d.pop("stderr")
        return d


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _keyed(path: Path, key: str) -> int:
    """`key N` from a flat-keyed cgroup file (memory.events, memory.oom_control); 0 if absent."""
    text = _read(path) or ""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == key:
            try:
                return int(parts[1])
            except ValueError:
                return 0
    return 0


def _write(path: Path, value: str) -> None:
    """Write a cgroup control file; never creates one (a missing file means no such controller there)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _int(path: Path) -> int | None:
    text = _read(path)
    try:
        return int(text.strip()) if text is not None else None
    except ValueError:
        return None


@dataclass
class _Group:
    path: Path
    version: int

    def file(self, name: str) -> Path:
        return self.path / name

    def procs(self) -> list[int]:
        text = _read(self.file("cgroup.procs")) or ""
        return [int(p) for p in text.split() if p.strip().isdigit()]

    def join(self) -> None:
        """Move the calling process into this group (a Popen preexec_fn: the child joins before it execs)."""
        with open(self.file("cgroup.procs"), "wb", buffering=0) as f:
            f.write(str(os.getpid()).encode())

    def stats(self) -> tuple[int, int, int | None]:
        """(oom kills, limit hits, peak bytes)."""
        if self.version == 1:
            return (_keyed(self.file("memory.oom_control"), "oom_kill"), _int(self.file("memory.failcnt")) or 0,
                    _int(self.file("memory.max_usage_in_bytes")))
        events = self.file("memory.events")
        return _keyed(events, "oom_kill"), _keyed(events, "max"), _int(self.file("memory.peak"))

    def kill_all(self, timeout: float = 10.0) -> None:
        if self.version == 2 and self.file("cgroup.kill").exists():
            try:
                _write(self.file("cgroup.kill"), "1")
            except OSError:
                pass
        deadline = time.monotonic() + timeout
        while True:
            pids = self.procs()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if time.monotonic() > deadline:
                return
            time.sleep(0.02)

    def remove(self) -> None:
        """Kill whatever is left in the group and remove it (retrying while the kernel lets go of it)."""
        self.kill_all()
        for _ in range(200):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.025)
        raise ContainerError(f"could not remove cgroup {self.path} (processes {self.procs()} still in it); "
                             f"remove it with: rmdir {self.path}")


def _candidates(root: Path, proc_self: Path) -> list[tuple[int, Path]]:
    """Where a child group may be created, most specific first (nested groups keep the parent's limit)."""
    v1_own, v2_own = own_cgroup_paths(proc_self)
    out: list[tuple[int, Path]] = []
    if (root / "cgroup.controllers").exists():  # unified hierarchy mounted at the root
        v2_roots = [root]
    else:
        v2_roots = [root / "unified"] if (root / "unified" / "cgroup.controllers").exists() else []
    for base in v2_roots:
        if v2_own is not None:
            out.append((2, base / v2_own.lstrip("/")))
        out.append((2, base))
    v1 = root / "memory"
    if (v1 / "memory.limit_in_bytes").exists():
        if v1_own and v1_own != "/":
            out.append((1, v1 / v1_own.lstrip("/")))
        out.append((1, v1))
    seen, unique = set(), []
    for version, path in out:
        if (version, path) not in seen:
            seen.add((version, path))
            unique.append((version, path))
    return unique


def _create(version: int, parent: Path, limit: int) -> _Group:
    """Make a child group under `parent` with `limit`; raises OSError/ContainerError with the reason."""
    if version == 2:
        controllers = (_read(parent / "cgroup.controllers") or "").split()
        if "memory" not in controllers:
            raise ContainerError(f"the memory controller is not available in {parent} (cgroup.controllers: "
                                 f"{' '.join(controllers) or 'none'})")
        if "memory" not in (_read(parent / "cgroup.subtree_control") or "").split():
            _write(parent / "cgroup.subtree_control", "+memory")
    group = _Group(parent / f"{_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}", version)
    group.path.mkdir()
    try:
        if version == 1:
            _write(group.file("memory.limit_in_bytes"), str(limit))
            memsw = group.file("memory.memsw.limit_in_bytes")
            if memsw.exists():  # swap must not rescue the process: the container has none either
                try:
                    _write(memsw, str(limit))
                except OSError:
                    pass
            got = _int(group.file("memory.limit_in_bytes"))
        else:
            _write(group.file("memory.max"), str(limit))
            swap = group.file("memory.swap.max")
            if swap.exists():
                try:
                    _write(swap, "0")
                except OSError:
                    pass
            got = _int(group.file("memory.max"))
        page = os.sysconf("SC_PAGE_SIZE")
        if got is None or abs(got - limit) >= page:
            raise ContainerError(f"cgroup {group.path} accepted limit {limit} but reports {got}")
    except BaseException:
        group.remove()
        raise
    return group


def create_group(limit_bytes: int, root: Path = CGROUP_ROOT, proc_self: Path = PROC_SELF_CGROUP) -> _Group:
    """A fresh memory cgroup limited to `limit_bytes`, in the first writable place. Remove it with `.remove()`."""
    tried: list[tuple[str, str]] = []
    for version, parent in _candidates(root, proc_self):
        try:
            return _create(version, parent, limit_bytes)
        except (OSError, ContainerError) as err:
            tried.append((str(parent), f"cgroup v{version}: {err}"))
    detail = "; ".join(f"{p}: {why}" for p, why in tried) or f"no memory cgroup hierarchy under {root}"
    raise ContainerUnavailable(
        f"cannot create a memory-limited cgroup ({detail}). This needs root or a delegated cgroup (cgroup v2 with "
        f"'memory' in the parent's cgroup.subtree_control, or a writable cgroup v1 memory hierarchy); run as root, "
        f"or run the job inside a container with --memory instead", tried)


def available(root: Path = CGROUP_ROOT, proc_self: Path = PROC_SELF_CGROUP) -> tuple[bool, str]:
    """(True, where) if a memory-limited cgroup can be created here, else (False, why and the fix)."""
    try:
        group = create_group(64 * MiB, root, proc_self)
    except ContainerUnavailable as err:
        return False, str(err)
    where = f"cgroup v{group.version} under {group.path.parent}"
    group.remove()
    return True, where


def run_limited(command: Sequence[str], limit_bytes: int, *, timeout: float | None = None, cwd: str | None = None,
                env: dict[str, str] | None = None, capture: bool = True,
                root: Path = CGROUP_ROOT, proc_self: Path = PROC_SELF_CGROUP) -> ContainerResult:
    """Run `command` in a fresh cgroup limited to `limit_bytes` of memory; the cgroup is removed afterwards.

    `capture`: collect stdout/stderr as text (else they go to this process's). A timeout kills the
    command (and everything it started) and reports timed_out. Raises ContainerUnavailable where no
    writable cgroup exists, ContainerError for a bad limit or command.
    """
    if isinstance(limit_bytes, bool) or not isinstance(limit_bytes, int) or limit_bytes < _MIN_LIMIT:
        raise ContainerError(f"container limit {limit_bytes!r} must be an integer number of bytes of at least "
                             f"{_MIN_LIMIT} (4 MiB); write e.g. 512 * 1024**2")
    cmd = tuple(str(c) for c in command)
    if not cmd:
        raise ContainerError("no command to run; give e.g. ['java', '-Xmx1g', 'Main']")
    group = create_group(limit_bytes, root, proc_self)
    join = group.join  # in the child, between fork and exec

    notes: list[str] = []
    proc = None
    t0 = time.monotonic()
    timed_out = False
    out = err = ""
    try:
        pipe = subprocess.PIPE if capture else None
        try:
            proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=pipe, stderr=pipe, text=capture,
                                    preexec_fn=join, start_new_session=True)  # noqa: PLW1509 (single-threaded use)
        except FileNotFoundError:
            raise ContainerError(f"command not found: {cmd[0]!r}; give the full path or put it on PATH") from None
        except subprocess.SubprocessError as exc:
            raise ContainerError(f"could not put the command into cgroup {group.path}: {exc}") from None
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            group.kill_all()
            out, err = proc.communicate()
            notes.append(f"killed after the {timeout} s timeout")
        oom, failcnt, peak = group.stats()
        return ContainerResult(command=cmd, limit_bytes=limit_bytes, cgroup_version=group.version,
                               exit_code=proc.returncode, oom_kill_count=oom, failcnt=failcnt, peak_bytes=peak,
                               seconds=round(time.monotonic() - t0, 3), timed_out=timed_out,
                               stdout=out or "", stderr=err or "", notes=tuple(notes))
    finally:
        if proc is not None and proc.poll() is None:  # an exception or Ctrl-C while it ran
            group.kill_all()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        group.remove()


def leftover_groups(root: Path = CGROUP_ROOT, proc_self: Path = PROC_SELF_CGROUP, pid: int | None = None) -> list[Path]:
    """Groups this module created (in process `pid`, default this one) that still exist; there should be none."""
    prefix = f"{_PREFIX}{os.getpid() if pid is None else pid}-"
    found = []
    for _, parent in _candidates(root, proc_self):
        try:
            found.extend(p for p in parent.iterdir() if p.is_dir() and p.name.startswith(prefix))
        except OSError:
            continue
    return sorted(set(found))


# ----------------------------------------------------------------------------- what ended a JVM job

_JAVA_OOM_LINE = re.compile(r"java\.lang\.OutOfMemoryError:?\s*(?P<msg>[^\"\n]*)|\"error_class\":\s*\"java\.lang\.OutOfMemoryError\",\s*"
                            r"\"error\":\s*\"(?P<json>[^\"]*)\"")


@dataclass(frozen=True)
class Diagnosis:
    """Why a job under a container limit ended. `kind` is 'ok', 'container_oom_kill', a pyd4j.jvm.errors class
    name for a Java OutOfMemoryError, 'timeout' or 'failed' (not memory)."""

    kind: str
    memory_exhausted: bool
    message: str

    def to_dict(self) -> dict:
        return asdict(self)


def diagnose(result: ContainerResult) -> Diagnosis:
    """Read a limited run's ending: the kernel's OOM kill first, then a Java OutOfMemoryError in its output."""
    from pyd4j.jvm.errors import python_class_for  # noqa: PLC0415  (pure: a table lookup)

    if result.timed_out:
        return Diagnosis("timeout", False, result.describe())
    if result.oom_killed:
        return Diagnosis("container_oom_kill", True, result.describe())
    match = _JAVA_OOM_LINE.search(f"{result.stdout}\n{result.stderr}")
    if match:
        text = (match.group("msg") or match.group("json") or "").strip()
        cls = python_class_for(["java.lang.OutOfMemoryError"], text)
        return Diagnosis(cls.__name__, True, f"memory exhausted inside the JVM: java.lang.OutOfMemoryError: {text} "
                                            f"({cls.__doc__.splitlines()[0].strip()}); {cls.fix}")
    if result.ok:
        return Diagnosis("ok", False, result.describe())
    return Diagnosis("failed", False, result.describe())
