"""The one place that finds pyd4j's Java classpath (the helper jar plus ND4J/DL4J from Maven).

In a checkout, `make setup` builds `java/target/pyd4j-java.jar` and copies its runtime classpath
to `java/target/lib/`. An installed wheel carries the helper jar (which is also the profiling
agent, ASM relocated inside it) in `pyd4j/jvm/java/`, but not ND4J: profiling and tuning
a job use the job's own classpath, and in-process ND4J uses `PYD4J_CLASSPATH` (entries separated
by os.pathsep, `dir/*` allowed; the job's classpath will do), which replaces the Maven build and
gets the helper jar in front when it lacks one.
"""

from __future__ import annotations

import glob
import os
import zipfile
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
JAVA_TARGET = PROJECT_ROOT / "java" / "target"
PACKAGED_JAR = Path(__file__).resolve().parent / "java" / "pyd4j-java.jar"  # in a wheel (ASM relocated inside)
# The checkout's Maven build when there is one (always the freshest), else the jar a wheel carries.
HELPER_JAR = JAVA_TARGET / "pyd4j-java.jar" if (JAVA_TARGET / "pyd4j-java.jar").exists() or not PACKAGED_JAR.exists() \
    else PACKAGED_JAR
EXAMPLES_JAR = PROJECT_ROOT / "examples" / "target" / "pyd4j-examples.jar"
SPARK_EXAMPLES_JAR = PROJECT_ROOT / "examples" / "spark" / "target" / "pyd4j-spark-examples.jar"


class ClasspathError(RuntimeError):
    """The jars pyd4j needs are not built or not where they were said to be."""


def classpath() -> list[str]:
    """Absolute jar paths, helper jar first. Raises ClasspathError with the fix."""
    override = os.environ.get("PYD4J_CLASSPATH")
    if override:
        entries: list[str] = []
        for entry in override.split(os.pathsep):
            if not entry:
                continue
            matches = sorted(glob.glob(entry)) if "*" in entry else ([entry] if Path(entry).exists() else [])
            if not matches:
                raise ClasspathError(f"PYD4J_CLASSPATH entry {entry!r} matches no file; fix or unset PYD4J_CLASSPATH")
            entries.extend(str(Path(m).resolve()) for m in matches)
        for jar in (e for e in entries if e.endswith(".jar")):
            if not zipfile.is_zipfile(jar):  # a truncated copy loads until the JVM reaches a class it lost
                raise ClasspathError(f"PYD4J_CLASSPATH jar {jar!r} is not a readable jar (truncated or not a zip: "
                                     "no zip directory at its end); copy it again or rebuild it, or unset "
                                     "PYD4J_CLASSPATH")
        if not any(e.endswith(".jar") for e in entries):
            raise ClasspathError(f"PYD4J_CLASSPATH={override!r} holds no jar; give ND4J's jars (your job's classpath, "
                                 f"e.g. PYD4J_CLASSPATH='target/lib/*'), or unset it to use the Maven build")
        if HELPER_JAR.exists() and not any(Path(e).name.startswith("pyd4j-java") for e in entries):
            entries.insert(0, str(HELPER_JAR))
        return entries
    lib = JAVA_TARGET / "lib"
    jars = sorted(str(p) for p in lib.glob("*.jar")) if lib.is_dir() else []
    if not HELPER_JAR.exists() or not any("nd4j-api" in j for j in jars):
        raise ClasspathError(
            f"pyd4j's jars are not built (looked for {HELPER_JAR} and ND4J in {lib}); "
            f"run `make setup` in the pyd4j checkout, or set PYD4J_CLASSPATH to your job's ND4J classpath "
            f"(e.g. PYD4J_CLASSPATH='target/lib/*')"
        )
    return [str(HELPER_JAR)] + jars


def examples_jar() -> str:
    """The Maven-built example jobs jar."""
    if not EXAMPLES_JAR.exists():
        raise ClasspathError(f"{EXAMPLES_JAR} is not built; run `make setup`")
    return str(EXAMPLES_JAR)


def spark_examples_classpath() -> list[str]:
    """The DL4J-on-Spark example jobs jar and its DL4J/ND4J classpath (`dir/*`; Spark itself is the cluster's)."""
    lib = SPARK_EXAMPLES_JAR.parent / "lib"
    if not SPARK_EXAMPLES_JAR.exists() or not lib.is_dir():
        raise ClasspathError(f"{SPARK_EXAMPLES_JAR} is not built; run `make setup`")
    return [str(SPARK_EXAMPLES_JAR), str(lib / "*")]
