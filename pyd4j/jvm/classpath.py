"""The one place that finds pyd4j's Java classpath (the helper jar plus ND4J/DL4J from Maven).

`make setup` builds `java/target/pyd4j-java.jar` and copies its runtime classpath to
`java/target/lib/`. `PYD4J_CLASSPATH` (entries separated by os.pathsep, `dir/*` allowed)
replaces it.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
JAVA_TARGET = PROJECT_ROOT / "java" / "target"
HELPER_JAR = JAVA_TARGET / "pyd4j-java.jar"
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
        return entries
    lib = JAVA_TARGET / "lib"
    jars = sorted(str(p) for p in lib.glob("*.jar")) if lib.is_dir() else []
    if not HELPER_JAR.exists() or not any("nd4j-api" in j for j in jars):
        raise ClasspathError(
            f"pyd4j's jars are not built (looked for {HELPER_JAR} and ND4J in {lib}); "
            f"run `make setup` in the pyd4j checkout, or set PYD4J_CLASSPATH to your own ND4J classpath"
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
