"""The out-of-process JVM over Py4J: transfers both ways checked against numpy, token, loopback,
and no child JVM outliving close() or a killed parent."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

pytestmark = pytest.mark.jvm

psutil = pytest.importorskip("psutil")
from pyd4j.jvm.gateway import ARENA_MAX_BYTES, Gateway, GatewayError  # noqa: E402


def gone(pid: int, within: float) -> bool:
    """Whether process `pid` has exited (a zombie counts as exited) within `within` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


@pytest.fixture(scope="module")
def gw():
    with Gateway(heap_max="512m", javacpp_maxbytes="1g") as gateway:
        yield gateway


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.int32, np.int64, np.uint8, np.float16, np.bool_])
def test_put_and_get_round_trip(gw, dtype):
    a = (np.arange(60) % 5).astype(dtype).reshape(3, 4, 5)
    x = gw.put(a)
    assert [int(d) for d in x.shape()] == [3, 4, 5]
    np.testing.assert_array_equal(gw.get(x), a)


def test_nd4j_computes_on_transferred_arrays_like_numpy(gw):
    rng = np.random.default_rng(1)
    a = rng.random((50, 30))
    b = np.asfortranarray(rng.random((30, 20)))
    x, y = gw.put(a), gw.put(b)
    np.testing.assert_allclose(gw.get(x.mmul(y)), a @ b)
    np.testing.assert_allclose(gw.get(x.transpose()), a.T)            # F-order result comes back right
    np.testing.assert_allclose(gw.get(x.add(1.0).sum(_ints(gw, [0]))), (a + 1).sum(axis=0))
    strided = a[::3, 1::2]                                            # non-contiguous input
    np.testing.assert_array_equal(gw.get(gw.put(strided)), strided)


def _ints(gw, values):
    array = gw._gateway.new_array(gw._gateway.jvm.int, len(values))
    for i, v in enumerate(values):
        array[i] = v
    return array


def test_arrays_larger_than_the_arena_move_in_chunks(gw):
    n = (ARENA_MAX_BYTES * 2 + 12345) // 4
    a = np.random.default_rng(2).random(n, dtype=np.float32)
    x = gw.put(a)
    assert float(x.sumNumber()) == pytest.approx(float(a.sum(dtype=np.float64)), rel=1e-4)
    out = np.empty_like(a)
    assert gw.get(x, out=out) is out
    np.testing.assert_array_equal(out, a)


def test_empty_and_bad_dtype(gw):
    empty = gw.get(gw.put(np.zeros((0, 4), np.float32)))
    assert empty.shape == (0, 4) and empty.dtype == np.float32
    from pyd4j.nd import UnsupportedDtypeError

    with pytest.raises(UnsupportedDtypeError, match="complex"):
        gw.put(np.zeros(3, np.complex64))


def test_describe_reports_nd4j_on_cpu(gw):
    facts = gw.describe()
    assert facts["nd4j.version"] == "1.0.0-M2.1"
    assert facts["nd4j.backend"] == "CPU"
    assert int(facts["jvm.max_heap_bytes"]) <= 512 * 2**20      # the child has its own flags


def test_listens_on_loopback_only(gw):
    listening = [c for c in psutil.Process(gw.pid).net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
    assert listening, "the gateway JVM listens on no socket"
    assert all(c.laddr.ip in ("127.0.0.1", "::ffff:127.0.0.1") for c in listening), listening
    assert gw.port in {c.laddr.port for c in listening}


@pytest.mark.parametrize("token", [None, "wrong-token"])
def test_connections_without_the_token_are_refused(gw, token):
    from py4j.java_gateway import GatewayParameters, JavaGateway
    from py4j.protocol import Py4JError

    intruder = JavaGateway(gateway_parameters=GatewayParameters(port=gw.port, auth_token=token, eager_load=False))
    try:
        with pytest.raises(Py4JError):
            intruder.entry_point.pid()
    finally:
        intruder.close()
    assert int(gw.entry.pid()) == gw.pid                          # the real client is unaffected


def test_raw_socket_without_auth_gets_nothing(gw):
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
        sock.sendall(b"c\nt\npid\ne\n")
        sock.settimeout(10)
        try:
            answer = sock.recv(4096)
        except (ConnectionResetError, socket.timeout):
            answer = b""
    assert b"!y" not in answer                                    # no successful return value


def test_close_stops_the_child_jvm():
    gateway = Gateway(heap_max="256m")
    pid = gateway.pid
    assert gateway.is_alive() and psutil.pid_exists(pid)
    gateway.close()
    assert gone(pid, within=20)
    with pytest.raises(GatewayError, match="closed"):
        gateway.describe()


def test_child_jvm_dies_when_the_parent_is_killed():
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import sys, time
        from pyd4j.jvm.gateway import Gateway
        gw = Gateway(heap_max="256m")
        print(gw.pid, flush=True)
        time.sleep(600)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        jvm_pid = int(parent.stdout.readline())
        assert psutil.Process(jvm_pid).is_running()
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        assert gone(jvm_pid, within=30), "the gateway JVM outlived its killed parent"
    finally:
        if parent.poll() is None:
            parent.kill()


def test_jvm_option_typo_is_a_clear_error():
    from pyd4j.jvm import JvmOptionError

    with pytest.raises(JvmOptionError, match="MaxDirectMemorySise"):
        Gateway(extra=["-XX:MaxDirectMemorySise=1g"])
