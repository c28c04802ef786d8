"""SIGTERM to a process running the in-process JVM: Python handles it (the JVM's own handler would call
System.exit(143) on a Java thread while Python threads are inside Java calls, and JPype then aborts the
process). Child processes: the session's JVM must keep its handlers."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.jvm

BUSY = textwrap.dedent("""
    import signal, sys, threading, time
    import jpype
    import pyd4j.jvm
    pyd4j.jvm.start()
    print("handler", signal.getsignal(signal.SIGTERM).__name__, flush=True)
    stop = threading.Event()

    def busy():   # ND4J calls on another thread all the time, as serve's model workers make
        from pyd4j.jvm.core import attach, detach
        attach()
        Nd4j = jpype.JClass("org.nd4j.linalg.factory.Nd4j")
        FLOAT = jpype.JClass("org.nd4j.linalg.api.buffer.DataType").FLOAT
        a = Nd4j.linspace(1, 65536, 65536, FLOAT)
        a.mul(a).sumNumber()
        print("busy", flush=True)
        while not stop.is_set():
            a.mul(a).sumNumber()
        detach()

    worker = threading.Thread(target=busy)
    worker.start()
    try:
        print("ready", flush=True)
        while True:
            time.sleep(0.05)
    finally:   # runs only when Python, not the JVM, handles the signal
        stop.set()
        worker.join()
        print("cleaned up", flush=True)
""")


def test_sigterm_unwinds_python_and_stops_the_threads_that_use_java_first():
    p = subprocess.Popen([sys.executable, "-c", BUSY], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in p.stdout:   # the JVM is up and the worker has made its first ND4J call and goes on making them
        lines.append(line.strip())
        if {"ready", "busy"} <= set(lines):
            break
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=120)
    lines += out.split()
    assert "Exception" not in err, err[-2000:]   # the worker was busy in ND4J until the end
    assert "handler _exit_on_sigterm" in lines, lines
    assert p.returncode == 143, (p.returncode, err[-2000:])
    assert "cleaned" in lines, (lines, err[-2000:])
    assert "Fatal error" not in err and "SIGSEGV" not in err, err[-2000:]


def test_a_handler_python_had_before_the_jvm_is_kept():
    code = textwrap.dedent("""
        import signal, pyd4j.jvm
        ran = []
        def mine(signum, frame):
            ran.append(signum)
        signal.signal(signal.SIGTERM, mine)
        pyd4j.jvm.start()   # the JVM takes SIGTERM underneath: pyd4j gives it back to `mine`
        print(signal.getsignal(signal.SIGTERM).__name__)
        signal.raise_signal(signal.SIGTERM)   # raise() runs the handler in place: `mine`, not the JVM's
        print("ran" if ran else "not-run")
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.split() == ["mine", "ran"], (p.returncode, p.stdout, p.stderr[-2000:])
