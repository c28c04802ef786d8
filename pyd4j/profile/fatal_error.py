"""The JVM's own fatal error report, read from a run's output: a crash in native code (SIGSEGV in
libnd4jcpu.so, ...) or native memory the JVM could not get.

HotSpot prints a `#`-framed header on the JVM's stdout ("A fatal error has been detected by the Java
Runtime Environment", the signal, the problematic frame, where the hs_err_pid<N>.log file went) and
then aborts: the exit status is 134 (SIGABRT), which says nothing of the cause by itself. The hs_err
file, when it can be read, names the Java frames on top of the crash (the ND4J call that crashed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

_HEADER = "A fatal error has been detected by the Java Runtime Environment"
_NO_MEMORY = "There is insufficient memory for the Java Runtime Environment to continue"
_SIGNAL = re.compile(r"^#\s+(SIG[A-Z]+)\s+\(0x[0-9a-f]+\) at pc=\S+, pid=(\d+)")
_INTERNAL = re.compile(r"^#\s+Internal Error \((.*)\)")
_FRAME = re.compile(r"^#\s+([CJjVv])\s+\[([^\]+]+)(?:\+0x[0-9a-f]+)?\]\s*(.*)$")
TAIL_BYTES = 1 << 20   # the report is among the last lines a JVM prints: a long job's whole log is not read
_JAVA_FRAME = re.compile(r"^[Jj]\s+(?:\d+\s+)?(?:c[12]\s+)?([\w$.]+)\(")


@dataclass(frozen=True)
class FatalError:
    """One JVM's fatal error report."""

    kind: str                  # "crash" (a signal or an internal error in the JVM) or "native-memory"
    what: str                  # "SIGSEGV", "Internal Error (...)", or the allocation that failed
    pid: int | None = None
    library: str | None = None          # the problematic frame's library (libnd4jcpu.so, libjvm.so, ...)
    symbol: str | None = None           # the function in it
    report: str | None = None           # the hs_err file
    java_frames: tuple[str, ...] = field(default=())   # the Java methods on top of the crash (from the report)

    def summary(self) -> str:
        if self.kind == "native-memory":
            return f"the JVM could not get native memory ({self.what})"
        where = f" in {self.library}" + (f" ({self.symbol})" if self.symbol else "") if self.library else ""
        return f"the JVM crashed in native code: {self.what}{where}"

    def evidence(self) -> list[str]:
        out = [self.summary()]
        if self.java_frames:
            out.append("Java frames on top of it: " + " <- ".join(self.java_frames))
        if self.report:
            out.append(f"the JVM's report: {self.report}")
        return out

    def fix(self) -> str:
        if self.kind == "native-memory":
            return ("the JVM ran out of memory outside the heap before any Java error could be thrown: lower -Xmx or "
                    "-Dorg.bytedeco.javacpp.maxphysicalbytes so that heap + off-heap fit the machine or container, or "
                    "give it more memory (pyd4j flags / pyd4j tune size them)")
        lib = self.library or ""
        if "nd4j" in lib:
            return ("a crash inside ND4J's native library: most often an array used after it was closed or freed (an "
                    "array scoped to a workspace used after the workspace closed, an INDArray closed while still in use, "
                    "a buffer freed by the deallocator while a view of it was used), otherwise a libnd4j bug; run again "
                    "to see whether it repeats, and read the Java frames in the JVM's report for the ND4J call")
        if (self.symbol or "").startswith("Unsafe_"):
            return ("Java code read or wrote native memory through Unsafe at an address that is not mapped: a buffer "
                    "used after it was freed, or never allocated; the Java frames in the JVM's report name the call")
        if lib.startswith("libjvm"):
            return "a crash inside the JVM itself: try another JDK build or version, and report it with the JVM's report"
        return (f"a crash in {lib or 'native code'}: the library named in the problematic frame, or memory it was "
                f"given by Java code (a Pointer or buffer used after it was freed); the JVM's report has the stack")


def find(run_dir: Path | str) -> list[FatalError]:
    """The fatal error reports in a run's stdout.log and stderr.log (one per JVM that crashed)."""
    out: list[FatalError] = []
    for name in ("stdout.log", "stderr.log"):
        path = Path(run_dir) / name
        try:
            with path.open("rb") as f:
                f.seek(max(0, path.stat().st_size - TAIL_BYTES))
                text = f.read().decode(errors="replace")
        except OSError:
            continue
        if _HEADER not in text and _NO_MEMORY not in text:
            continue
        out += parse(text)
    return out


def parse(text: str) -> list[FatalError]:
    """Every fatal error header in a JVM's output."""
    out: list[FatalError] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if _HEADER in lines[i] or _NO_MEMORY in lines[i]:
            block = []
            while i < len(lines) and (lines[i].startswith("#") or not lines[i].strip()):
                block.append(lines[i])
                i += 1
                if len(block) > 60:
                    break
            out.append(_one(block))
        i += 1
    return out


def _one(block: list[str]) -> FatalError:
    kind, what, pid, library, symbol, report = "crash", "a fatal error", None, None, None, None
    for n, line in enumerate(block):
        if _NO_MEMORY in line:
            kind = "native-memory"
            detail = next((b.lstrip("# ").strip() for b in block[n + 1:n + 3] if "allocation" in b or "failed" in b), "")
            what = detail or "insufficient memory"
        elif (m := _SIGNAL.match(line)) and kind == "crash":
            what, pid = m.group(1), int(m.group(2))
        elif (m := _INTERNAL.match(line)) and kind == "crash":
            what = f"Internal Error ({m.group(1)})"
        elif line.startswith("# Problematic frame:") and n + 1 < len(block):
            if fm := _FRAME.match(block[n + 1]):
                library, symbol = fm.group(2), fm.group(3).strip() or None
        elif "error report file" in line and n + 1 < len(block):
            report = block[n + 1].lstrip("# ").strip() or None
    return FatalError(kind, what, pid, library, symbol, report, _java_frames(report))


def _java_frames(report: str | None, most: int = 3) -> tuple[str, ...]:
    """The first Java methods of the crashing thread's stack, from the hs_err file (when it can be read)."""
    if not report:
        return ()
    try:
        with open(report, errors="replace") as f:
            head = f.read(200_000)
    except OSError:
        return ()
    frames = []
    for line in head.splitlines():
        if line.startswith("Java frames:") and frames:
            break
        if m := _JAVA_FRAME.match(line):
            name = m.group(1)
            if name not in frames:
                frames.append(name)
            if len(frames) >= most:
                break
    return tuple(frames)
