"""The local Spark cluster leaves nothing behind: no JVM after Ctrl-C or when its owner is killed outright;
its sockets listen on loopback only, and RPC needs the cluster's secret."""

from __future__ import annotations

import ipaddress
import json
import signal
import subprocess
import sys
import time

import psutil
import pytest

from pyd4j.memory.container import leftover_groups

pytestmark = pytest.mark.slow


def _start(tmp_path) -> tuple[subprocess.Popen, dict, list[psutil.Process]]:
    """`python -m pyd4j.spark.cluster` with one worker; returns its JSON line and the whole process tree."""
    proc = subprocess.Popen([sys.executable, "-m", "pyd4j.spark.cluster", "--workers", "1", "--memory", "512m"],
                            stdout=subprocess.PIPE, stderr=open(tmp_path / "cluster.err", "w"), text=True)
    line = proc.stdout.readline()  # blocks until the cluster is up (or the process died)
    assert line, f"the cluster did not start: {(tmp_path / 'cluster.err').read_text()[-3000:]}"
    info = json.loads(line)
    tree = psutil.Process(proc.pid).children(recursive=True)
    java = [p for p in tree if p.name() == "java"]
    assert len(java) >= 2, [p.cmdline()[-3:] for p in tree]  # master and worker
    return proc, info, tree


def _gone(procs: list[psutil.Process], deadline_s: float = 120.0) -> list[psutil.Process]:
    """Processes still alive once they all ended or the (generous) deadline passed."""
    end = time.monotonic() + deadline_s
    alive = procs
    while alive and time.monotonic() < end:
        alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.5)
    return alive


def _loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip)
    return addr.is_loopback or bool(getattr(addr, "ipv4_mapped", None) and addr.ipv4_mapped.is_loopback)


def test_ctrl_c_stops_every_daemon_and_removes_the_cgroups(tmp_path):
    proc, info, tree = _start(tmp_path)
    assert info["master"].startswith("spark://127.0.0.1:")
    # every listening socket (RPC, web UIs) is on loopback; RPC needs the cluster's secret
    listening = [c.laddr.ip for p in tree if p.name() == "java" for c in p.net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN]
    assert len(listening) >= 4 and all(_loopback(ip) for ip in listening), listening  # 2 x (RPC + web UI)
    assert all("spark.authenticate" in " ".join(p.cmdline()) or "--properties-file" in p.cmdline()
               for p in tree if p.name() == "java")
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=180) == 130
    assert _gone(tree) == []
    assert leftover_groups(pid=proc.pid) == []


def test_killing_the_owner_outright_still_stops_the_daemons(tmp_path):
    proc, _, tree = _start(tmp_path)
    proc.kill()  # SIGKILL: no cleanup code runs; the kernel's parent-death signal ends the daemons
    proc.wait(timeout=60)
    assert _gone(tree) == [], [p.cmdline()[-2:] for p in tree if p.is_running()]


def test_daemon_properties_hold_the_secret_for_this_user_only(tmp_path):
    from pyd4j.spark.cluster import LocalCluster  # noqa: PLC0415

    cluster = LocalCluster(workers=1, memory="512m", directory=tmp_path)
    props = cluster._auth_properties()
    assert props["spark.authenticate"] == "true" and len(props["spark.authenticate.secret"]) >= 32
    from pyd4j.spark.install import write_properties  # noqa: PLC0415

    path = write_properties(tmp_path / "p.properties", props)
    assert path.stat().st_mode & 0o077 == 0
    assert f"spark.authenticate.secret {props['spark.authenticate.secret']}" in path.read_text()
