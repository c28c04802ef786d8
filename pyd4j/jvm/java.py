"""Find the Java installation pyd4j runs ND4J on: JAVA_HOME first, then `java` on PATH."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

MIN_JAVA = 11  # DL4J/ND4J 1.0.0-M2.1 needs Java 11+


class JavaNotFoundError(RuntimeError):
    """No usable Java installation."""


@dataclass(frozen=True)
class JavaInstall:
    home: Path
    java: Path
    libjvm: Path
    version: str
    major: int


def _libjvm(home: Path) -> Path | None:
    for rel in ("lib/server/libjvm.so", "jre/lib/amd64/server/libjvm.so", "lib/server/libjvm.dylib"):
        candidate = home / rel
        if candidate.exists():
            return candidate
    return None


def _version_of(java: Path) -> str:
    fix = f"point JAVA_HOME at a JDK {MIN_JAVA}+ (or put one first on PATH)"
    try:
        out = subprocess.run([str(java), "-XshowSettings:properties", "-version"],
                             capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise JavaNotFoundError(f"{java} did not answer `-version` within 120 s; {fix}") from None
    except OSError as err:
        raise JavaNotFoundError(f"{java} cannot run ({err.strerror}); {fix}") from None
    # A program that is not a JVM may print anything: read it as text whatever the bytes.
    text = out.stderr.decode("utf-8", errors="replace")
    match = re.search(r"java\.version = (\d[\w.+-]*)", text)
    if not match:
        shown = "".join(c if c.isprintable() else "?" for c in text[-200:].strip()) or "nothing"
        raise JavaNotFoundError(f"{java} did not report a Java version (exit {out.returncode}; it printed {shown!r}); {fix}")
    return match.group(1)


def major_version(version: str) -> int:
    """'1.8.0_292' -> 8, '17.0.15' -> 17."""
    parts = version.split(".")
    if parts[0] == "1" and len(parts) > 1 and parts[1].isdigit():
        return int(parts[1])
    match = re.match(r"\d+", parts[0])
    if not match:
        raise JavaNotFoundError(f"cannot read the Java version {version!r}; point JAVA_HOME at a JDK {MIN_JAVA}+")
    return int(match.group(0))


@lru_cache(maxsize=None)
def find_java() -> JavaInstall:
    """The Java to use; raises JavaNotFoundError saying how to fix it."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        home = Path(java_home)
        java = home / "bin" / "java"
        if not java.exists():
            raise JavaNotFoundError(
                f"JAVA_HOME={java_home} has no bin/java; point JAVA_HOME at a JDK {MIN_JAVA}+ "
                f"(e.g. the folder that holds bin/java) or unset it to use `java` from PATH"
            )
    else:
        found = shutil.which("java")
        if not found:
            raise JavaNotFoundError(
                f"Java not found: set JAVA_HOME to a JDK {MIN_JAVA}+ or put `java` on PATH "
                f"(Debian/Ubuntu: apt-get install openjdk-17-jdk-headless)"
            )
        java = Path(found).resolve()
        home = java.parent.parent
    version = _version_of(java)
    major = major_version(version)
    if major < MIN_JAVA:
        raise JavaNotFoundError(
            f"Java {version} at {java} is too old: DL4J/ND4J 1.0.0-M2.1 needs Java {MIN_JAVA}+; "
            f"install JDK 17 and set JAVA_HOME to it"
        )
    libjvm = _libjvm(home)
    if libjvm is None:
        raise JavaNotFoundError(f"no libjvm under {home}; set JAVA_HOME to a full JDK {MIN_JAVA}+")
    return JavaInstall(home=home, java=java, libjvm=libjvm, version=version, major=major)
