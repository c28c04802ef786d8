"""A Spark standalone cluster on this machine, for tests and demos: one master and N workers on loopback,
each worker with the executors it starts inside its own memory cgroup, sized like a node.

    with LocalCluster(workers=2, cores=1, memory="1500m") as cluster:
        run_example({**cluster.app_properties(), **conf}, job_args, props, env=cluster.env())   # pyd4j.spark.job
        cluster.executor_exits()        # how each executor ended (exit 137 = killed)
        cluster.oom_kills()             # kernel OOM kills per worker's cgroup

A real node's memory holds its worker daemon and the executors it runs; going over it gets an
executor killed by the kernel. Here each worker's cgroup is limited to `memory` (what executors may
use, also the worker's `--memory` offer) plus WORKER_DAEMON_BYTES for the daemon itself, so going
over is a real kill (where this machine lets pyd4j create memory cgroups: root or a delegated cgroup;
elsewhere `limit_memory=None` runs unlimited and says so, `True` refuses).

Every socket is on 127.0.0.1 (SPARK_LOCAL_IP; the daemons' web UIs bind there too, on ephemeral
ports) and RPC needs the cluster's secret (spark.authenticate): jobs get it from `app_properties()`, in a
properties file only this user can read. The daemons are stopped on `stop()`, on leaving the `with` block
(Ctrl-C included), at interpreter exit, and, if this process is killed outright, by the kernel's
parent-death signal; a worker takes its executors down with it, and its cgroup is emptied and removed.
"""

from __future__ import annotations

import atexit
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from pyd4j.spark.install import die_with_parent, spark_env, spark_script, write_properties
from pyd4j.units import parse_bytes

MiB = 1024**2
# The worker daemon's own memory, on top of what its executors may use: heap SPARK_DAEMON_MEMORY plus
# JVM native (Spark's classes, Netty, threads). Measured resident 150-190 MiB with these options.
DAEMON_HEAP = "96m"
DAEMON_JAVA_OPTS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:MaxMetaspaceSize=128m"
WORKER_DAEMON_BYTES = 256 * MiB
MAX_WORKERS = 64      # daemons on one machine; each is a JVM of about 200 MiB
MAX_CORES = 1024


class ClusterError(RuntimeError):
    """The local cluster could not start (a daemon died or never got ready): the message holds its log's tail."""


@dataclass(frozen=True)
class ExecutorExit:
    """How one executor ended, as its worker logged it."""

    worker: int
    app_id: str
    executor_id: str
    state: str           # EXITED, KILLED, FAILED
    exit_status: int | None
    message: str
    stderr_path: Path

    @property
    def killed(self) -> bool:
        """Ended by SIGKILL (exit 137): the kernel's OOM killer, or a kill from outside."""
        return self.exit_status == 137

    def stderr_tail(self, chars: int = 4000) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


@dataclass
class _Daemon:
    name: str
    proc: subprocess.Popen
    log: Path
    group: object | None = None       # pyd4j.memory.container group, for workers
    group_stats: tuple[int, int, int | None] | None = None
    work_dir: Path | None = None


_EXIT_LINE = re.compile(r"Executor (?P<app>app-[\w-]+)/(?P<exec>\d+) finished with state (?P<state>\w+)"
                        r"(?: message (?P<message>.*?))?(?: exitStatus (?P<status>-?\d+|None))?\s*$")


def _child_setup(group) -> None:
    """In each daemon between fork and exec: join the worker's cgroup, and die with this process."""
    if group is not None:
        group.join()
    die_with_parent()


class LocalCluster:
    """A standalone master and `workers` workers with `cores` cores and `memory` for executors each."""

    def __init__(self, workers: int = 2, cores: int = 1, memory: int | str = "1g", *,
                 limit_memory: bool | None = None, directory: str | Path | None = None,
                 start_timeout: float = 180.0, offer: int | str | None = None) -> None:
        if workers < 1 or cores < 1:
            raise ValueError(f"workers={workers}, cores={cores}: a cluster needs at least 1 worker with 1 core")
        self.workers = workers
        self.cores = cores
        self.memory_bytes = parse_bytes(memory, what="worker memory")
        if self.memory_bytes < 64 * MiB:
            raise ValueError(f"worker memory {memory!r} is under 64 MiB: no executor fits; give e.g. '1g'")
        # what each worker offers its executors (--memory; Spark checks spark.executor.memory, the heap, against
        # it): `memory` unless a test needs a node whose real limit is below the executor heap Spark insists on
        self.offer_bytes = parse_bytes(offer, what="worker offer") if offer is not None else self.memory_bytes
        self.limit_memory = limit_memory
        self.limited = False
        self.limit_note = ""
        self.start_timeout = start_timeout
        self._own_dir = directory is None
        self.dir = Path(directory) if directory is not None else None
        self.secret = secrets.token_hex(24)
        self.master_url: str | None = None
        self.master_web_url: str | None = None
        self._master: _Daemon | None = None
        self._workers: list[_Daemon] = []
        self._stopped = False

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def worker_limit_bytes(self) -> int:
        """Each worker's cgroup limit: executors' memory plus the worker daemon's own."""
        return self.memory_bytes + WORKER_DAEMON_BYTES

    def start(self) -> "LocalCluster":
        """Start the master, then the workers; returns once every worker has registered."""
        from pyd4j.memory import container  # noqa: PLC0415

        if self.dir is None:
            self.dir = Path(tempfile.mkdtemp(prefix="pyd4j-spark-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "conf").mkdir(exist_ok=True)  # an empty SPARK_CONF_DIR: no spark-defaults from elsewhere
        write_properties(self.dir / "daemon.properties", self._auth_properties())
        atexit.register(self.stop)
        try:
            if self.limit_memory is not False:
                ok, where = container.available()
                if not ok and self.limit_memory:
                    raise container.ContainerUnavailable(where, [])
                self.limited = ok
                self.limit_note = (f"each worker in a memory cgroup of {self.worker_limit_bytes // MiB} MiB ({where})" if ok
                                   else f"workers NOT memory-limited: {where}")
            self._master = self._spawn("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                                  "--port", "0", "--webui-port", "0"])
            log = self._wait_for(self._master, r"I have been elected leader|ALIVE")
            found = re.search(r"Starting Spark master at (spark://\S+)", log)
            web = re.search(r"(?:MasterWebUI|Master:) .*?started at (http://\S+)", log)
            if not found:
                raise ClusterError(f"the master did not say its URL; log {self._master.log}:\n{log[-3000:]}")
            self.master_url = found.group(1)
            self.master_web_url = web.group(1) if web else None
            for i in range(self.workers):
                group = container.create_group(self.worker_limit_bytes) if self.limited else None
                work = self.dir / f"worker-{i}"
                work.mkdir(exist_ok=True)
                try:
                    daemon = self._spawn(f"worker-{i}", [
                        "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--port", "0",
                        "--webui-port", "0", "--cores", str(self.cores), "--memory", f"{self.offer_bytes // MiB}M",
                        "--work-dir", str(work), self.master_url], group=group)
                except BaseException:
                    if group is not None:
                        group.remove()
                    raise
                daemon.work_dir = work
                self._workers.append(daemon)
            for daemon in self._workers:
                self._wait_for(daemon, r"Successfully registered with master")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop workers (and their executors), then the master; empty and remove the cgroups. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        from pyd4j.profile.launch import kill_tree  # noqa: PLC0415  (the one way pyd4j ends a process tree)

        for daemon in [*self._workers, *([self._master] if self._master else [])]:
            kill_tree(daemon.proc.pid, grace_s=10.0)
            try:
                daemon.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            if daemon.group is not None:
                daemon.group.kill_all()
                daemon.group_stats = daemon.group.stats()
                daemon.group.remove()
        atexit.unregister(self.stop)
        if self._own_dir and self.dir is not None and not os.environ.get("PYD4J_KEEP_SPARK_DIR"):
            shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------------ what jobs need

    def _auth_properties(self) -> dict[str, str]:
        return {"spark.authenticate": "true", "spark.authenticate.secret": self.secret,
                "spark.master.rest.enabled": "false", "spark.ui.killEnabled": "false",
                # an application whose executors keep failing is given up after 3, not 10, relaunches
                "spark.deploy.maxExecutorRetries": "3"}

    def app_properties(self) -> dict[str, str]:
        """What a job on this cluster needs besides its own settings: master, secret, loopback driver."""
        if self.master_url is None:
            raise ClusterError("the cluster is not started; call start() or use `with LocalCluster(...)`")
        return {"spark.master": self.master_url, **self._auth_properties(),
                "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}

    def env(self) -> dict[str, str]:
        """The environment for spark-submit against this cluster (loopback, an empty conf directory)."""
        env = spark_env()
        env["SPARK_CONF_DIR"] = str(self.dir / "conf")
        return env

    # ------------------------------------------------------------------ after a job

    def executor_exits(self) -> list[ExecutorExit]:
        """Every executor that has ended, per worker, from the workers' logs."""
        out = []
        for i, daemon in enumerate(self._workers):
            try:
                text = daemon.log.read_text(errors="replace")
            except OSError:
                continue
            for line in text.splitlines():
                m = _EXIT_LINE.search(line)
                if m:
                    status = m.group("status")
                    out.append(ExecutorExit(i, m.group("app"), m.group("exec"), m.group("state"),
                                            int(status) if status and status != "None" else None,
                                            (m.group("message") or "").strip(),
                                            daemon.work_dir / m.group("app") / m.group("exec") / "stderr"))
        return out

    def executor_logs(self, app_id: str) -> dict[tuple[int, str], Path]:
        """(worker, executor id) -> that executor's stderr, for every executor of `app_id`."""
        out = {}
        for i, daemon in enumerate(self._workers):
            for stderr in sorted((daemon.work_dir / app_id).glob("*/stderr")):
                out[(i, stderr.parent.name)] = stderr
        return out

    def oom_kills(self) -> list[int]:
        """Kernel OOM kills in each worker's cgroup so far (0s when not memory-limited)."""
        out = []
        for daemon in self._workers:
            if daemon.group_stats is not None:
                out.append(daemon.group_stats[0])
            elif daemon.group is not None:
                out.append(daemon.group.stats()[0])
            else:
                out.append(0)
        return out

    def pids(self) -> list[int]:
        """The daemons' process ids (executors are their children)."""
        return [d.proc.pid for d in [*([self._master] if self._master else []), *self._workers]]

    # ------------------------------------------------------------------ internals

    def _spawn(self, name: str, args: list[str], group=None) -> _Daemon:
        env = self.env()
        env["SPARK_DAEMON_MEMORY"] = DAEMON_HEAP
        env["SPARK_DAEMON_JAVA_OPTS"] = DAEMON_JAVA_OPTS
        env["SPARK_NO_DAEMONIZE"] = "1"
        env.pop("SPARK_MASTER_OPTS", None)
        env.pop("SPARK_WORKER_OPTS", None)
        log = self.dir / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen([spark_script("spark-class"), *args, "--properties-file",
                                     str(self.dir / "daemon.properties")], env=env, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                    preexec_fn=lambda: _child_setup(group))  # noqa: PLW1509
        daemon = _Daemon(name, proc, log, group)
        if name == "master":
            self._master = daemon
        return daemon

    def _wait_for(self, daemon: _Daemon, pattern: str) -> str:
        deadline = time.monotonic() + self.start_timeout
        regex = re.compile(pattern)
        while True:
            text = daemon.log.read_text(errors="replace") if daemon.log.exists() else ""
            if regex.search(text):
                return text
            if daemon.proc.poll() is not None:
                raise ClusterError(f"Spark {daemon.name} exited with code {daemon.proc.returncode} before it was "
                                   f"ready; its log ({daemon.log}):\n{text[-3000:]}")
            if time.monotonic() > deadline:
                raise ClusterError(f"Spark {daemon.name} not ready after {self.start_timeout:.0f} s (waiting for "
                                   f"{pattern!r}); its log ({daemon.log}):\n{text[-3000:]}")
            time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    """`python -m pyd4j.spark.cluster`: start a local cluster, print as one JSON line its master URL, its
    daemons, the spark-submit to use and the properties file a job needs (master and secret; readable by
    this user only: `spark-submit --properties-file <it> ...`), keep it up until Ctrl-C or SIGTERM, then stop it."""
    import argparse  # noqa: PLC0415
    import json  # noqa: PLC0415
    import sys  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="python -m pyd4j.spark.cluster", description=main.__doc__)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cores", type=int, default=1)
    parser.add_argument("--memory", default="1g", help="memory per worker for its executors, e.g. 2g")
    args = parser.parse_args(argv)

    def terminate(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt

    from pyd4j.spark.install import SparkNotFoundError, spark_home  # noqa: PLC0415

    for name, value, most in (("--workers", args.workers, MAX_WORKERS), ("--cores", args.cores, MAX_CORES)):
        if not 1 <= value <= most:
            parser.error(f"{name} {value} is not from 1 to {most}; give e.g. {name} 2")
    try:
        cluster = LocalCluster(args.workers, args.cores, args.memory)
        spark_home()
    except (ValueError, SparkNotFoundError) as err:
        parser.error(str(err))
    signal.signal(signal.SIGTERM, terminate)
    # Ctrl-C stops the cluster even when this process was started with SIGINT ignored (a shell's
    # background job), which would leave Python's own handler uninstalled
    signal.signal(signal.SIGINT, terminate)
    try:
        with cluster:
            props = write_properties(cluster.dir / "app.properties", cluster.app_properties())
            print(json.dumps({"master": cluster.master_url, "web_ui": cluster.master_web_url,
                              "pids": cluster.pids(), "memory_limit": cluster.limit_note,
                              "spark_submit": spark_script("spark-submit"), "properties": str(props)}), flush=True)
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        return 130
    except (ClusterError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
