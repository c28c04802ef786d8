"""A JVM that crashes in native code: HotSpot's fatal error report is read (the signal, the problematic
frame, the hs_err file and the Java frames in it) and the run is diagnosed as a crash, not as a signal
sent from outside (its exit status, 134, is the JVM's own abort)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyd4j.profile import fatal_error
from pyd4j.profile.diagnose import diagnose
from pyd4j.profile.launch import profile_job

CRASH = Path(__file__).resolve().parents[1] / "fixtures" / "single" / "NativeCrash.java"

# The header HotSpot printed for a crash in ND4J measured in this project (deeplearning4j-examples' ModelXOR,
# DL4J 1.0.0-M2.1, one run in about a hundred); the paths are replaced, the rest is as printed.
ND4J_CRASH_HEADER = """\
===============================================================

#
# A fatal error has been detected by the Java Runtime Environment:
#
#  SIGSEGV (0xb) at pc=0x00007f5c379e5fe0, pid=2373, tid=2374
#
# JRE version: OpenJDK Runtime Environment (17.0.15+6) (build 17.0.15+6-Debian-1deb12u1)
# Problematic frame:
# C  [libnd4jcpu.so+0x19e5fe0]  sd::DataBuffer::primary()+0x0
#
# An error report file with more information is saved as:
# {report}
#
"""
ND4J_REPORT = """\
Current thread (0x00007f5cf401a840):  JavaThread "main" [_thread_in_native, id=2374]
Native frames: (J=compiled Java code, j=interpreted, Vv=VM code, C=native code)
C  [libnd4jcpu.so+0x19e5fe0]  sd::DataBuffer::primary()+0x0
J 1974  org.nd4j.linalg.cpu.nativecpu.bindings.Nd4jCpu.execBroadcast(Lorg/bytedeco/javacpp/PointerPointer;I)V (0 bytes)
J 2770 c1 org.nd4j.linalg.cpu.nativecpu.ops.NativeOpExecutioner.exec(Lorg/nd4j/linalg/api/ops/BroadcastOp;)V (614 bytes)
J 2778 c1 org.nd4j.linalg.api.ndarray.BaseNDArray.applyBroadcastOp(Lorg/nd4j/linalg/api/ndarray/INDArray;C)V (343 bytes)
J 2740 c1 org.nd4j.linalg.api.ndarray.BaseNDArray.doRowWise(Lorg/nd4j/linalg/api/ndarray/INDArray;C)V (1172 bytes)
"""


def test_recorded_nd4j_crash_header_is_read(tmp_path):
    report = tmp_path / "hs_err_pid2373.log"
    report.write_text(ND4J_REPORT)
    (tmp_path / "stdout.log").write_text(ND4J_CRASH_HEADER.format(report=report))
    [found] = fatal_error.find(tmp_path)
    assert (found.kind, found.what, found.pid, found.library) == ("crash", "SIGSEGV", 2373, "libnd4jcpu.so")
    assert found.symbol == "sd::DataBuffer::primary()+0x0" and found.report == str(report)
    assert found.java_frames == ("org.nd4j.linalg.cpu.nativecpu.bindings.Nd4jCpu.execBroadcast",
                                 "org.nd4j.linalg.cpu.nativecpu.ops.NativeOpExecutioner.exec",
                                 "org.nd4j.linalg.api.ndarray.BaseNDArray.applyBroadcastOp")
    assert "ND4J's native library" in found.fix()
    # no report at all: nothing found; native memory the JVM could not get is its own kind
    assert fatal_error.parse("training...\ndone\n") == []
    [oom] = fatal_error.parse("#\n# There is insufficient memory for the Java Runtime Environment to continue.\n"
                              "# Native memory allocation (mmap) failed to map 268435456 bytes for committing reserved memory.\n#\n")
    assert oom.kind == "native-memory" and "mmap" in oom.what and "maxphysicalbytes" in oom.fix()


@pytest.mark.jvm
def test_a_real_jvm_crash_is_diagnosed_as_a_native_crash_not_a_signal_from_outside(tmp_path):
    run = profile_job(["java", f"-XX:ErrorFile={tmp_path}/hs_err_pid%p.log", str(CRASH)], tmp_path / "run", timeout_s=120)
    assert run.returncode == 134 and not run.interrupted     # the JVM's own abort after its report
    findings = diagnose(run.timeline)
    kinds = [f.kind for f in findings]
    assert "native-crash" in kinds and "killed-signal" not in kinds, kinds
    crash = next(f for f in findings if f.kind == "native-crash")
    assert "SIGSEGV" in crash.title and "libjvm.so" in crash.title and "exit status 134" in crash.title
    report = next(line for line in crash.evidence if line.startswith("the JVM's report: "))
    assert Path(report.removeprefix("the JVM's report: ")).parent == tmp_path and Path(report.split(": ", 1)[1]).exists()
    assert "through Unsafe" in crash.fix
