"""Which nd4j-native build trains this network fastest on this machine: the generic, avx2 and
avx512 builds (Maven classifiers of org.nd4j:nd4j-native), each with OpenBLAS (ND4J's own) and, where
MKL's jar for ND4J's JavaCPP is in the local Maven repository, with MKL in its place (JavaCPP's
loading property org.bytedeco.openblas.load=mkl_rt), measured in child JVMs, each JVM with only that
build's jar on its class path (JavaCPP would otherwise load the most specific one it finds), rounds
alternated so that a machine getting busier slows every build alike. Each measurement says which
native library ND4J really loaded and which BLAS its calls went to; one that ran another build or
BLAS is an error, never counted.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from pyd4j.jvm.classpath import JAVA_TARGET, classpath
from pyd4j.profile import ab

GROUP, ARTIFACT = "org.nd4j", "nd4j-native"
CLASSIFIERS = ("linux-x86_64", "linux-x86_64-avx2", "linux-x86_64-avx512")
_NATIVE_JAR = re.compile(r"^nd4j-native-(?P<version>\d[^-]*-M[\d.]+|\d[\d.]*(?:-beta\d+)?)-(?P<classifier>linux-x86_64(?:-avx2|-avx512)?)\.jar$")


class Nd4jBuildError(RuntimeError):
    """A build could not be measured (missing jar, failed JVM, another build loaded)."""


def needs(classifier: str) -> set[str]:
    """CPU flags a build needs."""
    if classifier.endswith("avx512"):
        return {"avx512f", "avx512bw", "avx512vl", "avx512dq"}
    if classifier.endswith("avx2"):
        return {"avx2", "fma"}
    return set()


def build_of(library: str) -> tuple[str | None, str] | None:
    """(nd4j version or None, classifier) of the nd4j-native build a loaded library file comes from:
    JavaCPP extracts it under a directory named after its jar, in a directory named after the platform."""
    parts = Path(library).parts
    for part in parts:
        m = _NATIVE_JAR.match(part)
        if m:
            return m.group("version"), m.group("classifier")
    for part in reversed(parts[:-1]):
        if part in CLASSIFIERS:
            return None, part
    return None


MKL_OPTION = "-Dorg.bytedeco.openblas.load=mkl_rt"
# The MKL release JavaCPP's presets built for each JavaCPP version (checked to resolve from Maven Central).
MKL_FOR_JAVACPP = {"1.5.7": "2022.0-1.5.7", "1.5.8": "2022.2-1.5.8"}


def javacpp_version(blas_library: str) -> str | None:
    """The JavaCPP version of the OpenBLAS preset a loaded BLAS file comes from (its cache directory is
    named after the jar: openblas-0.3.19-1.5.7-linux-x86_64.jar)."""
    for part in Path(blas_library).parts:
        m = re.match(r"^(?:openblas|mkl)-[\d.]+-(?P<javacpp>\d+\.\d+\.\d+)-linux-x86_64(?:-redist)?\.jar$", part)
        if m:
            return m.group("javacpp")
    return None


def mkl_artifact(javacpp: str) -> str:
    """The Maven coordinates of MKL's libraries for a JavaCPP version (the linux-x86_64-redist jar)."""
    return f"org.bytedeco:mkl:{MKL_FOR_JAVACPP.get(javacpp, '<MKL release>-' + javacpp)}:jar:linux-x86_64-redist"


def find_mkl(javacpp: str) -> Path | None:
    """MKL's redist jar built for this JavaCPP version, in the local Maven repository (the newest there)."""
    found = sorted((maven_repository() / "org" / "bytedeco" / "mkl").glob(f"*-{javacpp}/mkl-*-{javacpp}-linux-x86_64-redist.jar"))
    return found[-1] if found else None


def mkl_snippet(jar: Path) -> str:
    version = jar.parent.name
    return (f"<dependency>\n  <groupId>org.bytedeco</groupId>\n  <artifactId>mkl</artifactId>\n"
            f"  <version>{version}</version>\n  <classifier>linux-x86_64-redist</classifier>\n</dependency>\n"
            f"<!-- and the JVM option {MKL_OPTION}: ND4J's BLAS calls then go to MKL -->")


def maven_repository() -> Path:
    """The local Maven repository: -Dmaven.repo.local in MAVEN_OPTS, else ~/.m2/repository."""
    match = re.search(r"-Dmaven\.repo\.local=(\S+)", os.environ.get("MAVEN_OPTS", ""))
    return Path(match.group(1)) if match else Path.home() / ".m2" / "repository"


def nd4j_version(cp: list[str]) -> str:
    for entry in cp:
        m = re.match(r"nd4j-api-(.+)\.jar$", Path(entry).name)
        if m:
            return m.group(1)
    raise Nd4jBuildError("no nd4j-api jar on the class path: run `make setup`")


def find_jar(classifier: str, version: str, cp: list[str]) -> Path | None:
    """The build's jar on the class path, next to it in java/target/lib, or in the local Maven repository."""
    name = f"{ARTIFACT}-{version}-{classifier}.jar"
    for entry in cp:
        if Path(entry).name == name:
            return Path(entry)
    for place in (JAVA_TARGET / "lib" / name,
                  maven_repository() / GROUP.replace(".", "/") / ARTIFACT / version / name):
        if place.exists():
            return place
    return None


def maven_snippet(classifier: str, version: str) -> str:
    return (f"<dependency>\n  <groupId>{GROUP}</groupId>\n  <artifactId>{ARTIFACT}</artifactId>\n"
            f"  <version>{version}</version>\n  <classifier>{classifier}</classifier>\n</dependency>")


def without_builds(cp: list[str], keep: str | None = None) -> list[str]:
    """The class path without nd4j-native build jars, but those of the `keep` classifier."""
    return [e for e in cp if not ((m := _NATIVE_JAR.match(Path(e).name)) and m.group("classifier") != keep)]


def classpath_javacpp(cp: list[str]) -> str | None:
    """The JavaCPP version of the OpenBLAS preset jar on a class path."""
    return next((v for v in map(javacpp_version, cp) if v), None)


def label(classifier: str, mkl: bool) -> str:
    """A build's name in the ranking: the classifier, with "+mkl" where MKL takes OpenBLAS's place."""
    return classifier + ("+mkl" if mkl else "")


def measure_once(model: Path, kind: str, shape: list[int], jar: Path, classifier: str, seconds: float,
                 timeout_s: float = 600, mkl_jar: Path | None = None) -> dict:
    """One child JVM: the network trained for `seconds` on this build only (with MKL for its BLAS
    calls where `mkl_jar` is given)."""
    cp = [*without_builds(classpath()), str(jar)]
    if mkl_jar is not None:
        cp.append(str(mkl_jar))
    name = label(classifier, mkl_jar is not None)
    argv = ["java", *([MKL_OPTION] if mkl_jar is not None else []), "-cp", os.pathsep.join(cp), "org.pyd4j.BackendBench",
            str(model), kind, str(seconds), ",".join(map(str, shape))]
    with tempfile.TemporaryFile() as err:
        try:
            out = subprocess.run(argv, stdout=subprocess.PIPE, stderr=err, text=True, timeout=timeout_s,
                                 stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise Nd4jBuildError(f"{name}: the measuring JVM ran past {timeout_s:.0f} s and was ended") from None
        err.seek(0)
        tail = err.read().decode(errors="replace").strip().splitlines()[-3:]
    line = next((ln for ln in reversed(out.stdout.splitlines()) if ln.startswith("{")), None)
    if out.returncode != 0 or line is None:
        raise Nd4jBuildError(f"{name}: the measuring JVM failed (exit code {out.returncode}): {' | '.join(tail)}")
    result = json.loads(line)
    loaded = result.get("library", "")
    if f"/{classifier}/" not in loaded:
        raise Nd4jBuildError(f"{name}: ND4J loaded {loaded or 'an unknown library'}, not this build")
    blas = "mkl" if mkl_jar is not None else "openblas"
    if result.get("blas") != blas:
        raise Nd4jBuildError(f"{name}: ND4J's BLAS calls went to {result.get('blas') or 'an unknown BLAS'}, not {blas}")
    return result


def compare_builds(model: Path, kind: str, shape: list[int], seconds: float = 5.0, rounds: int = ab.MIN_RUNS,
                   features: tuple[str, ...] | None = None, on_result=None) -> dict:
    """Every build this CPU can run and this machine has, measured `rounds` times each, alternated
    (the order rotates each round). The fastest by median, compared with the runner-up by the
    A/B's interval."""
    from pyd4j.memory.machine import cpu_features  # noqa: PLC0415

    features = cpu_features() if features is None else features
    cp = classpath()
    version = nd4j_version(cp)
    javacpp = classpath_javacpp(cp)
    mkl_jar = find_mkl(javacpp) if javacpp else None
    builds: dict[str, tuple[str, Path, Path | None]] = {}
    skipped = []
    for c in CLASSIFIERS:
        missing = needs(c) - set(features)
        jar = find_jar(c, version, cp)
        if missing:
            skipped.append({"build": c, "why": f"this CPU lacks {', '.join(sorted(missing))}"})
        elif jar is None:
            skipped.append({"build": c, "why": f"{ARTIFACT}-{version}-{c}.jar is not in java/target/lib or the local "
                                               f"Maven repository; fetch it with `mvn dependency:get "
                                               f"-Dartifact={GROUP}:{ARTIFACT}:{version}:jar:{c}` and run again"})
        else:
            builds[label(c, False)] = (c, jar, None)
            if mkl_jar is not None:
                builds[label(c, True)] = (c, jar, mkl_jar)
    if mkl_jar is None and builds:
        skipped.append({"build": "+mkl", "why": "MKL for ND4J's JavaCPP " + (
            f"{javacpp} is not in the local Maven repository; fetch it with `mvn dependency:get "
            f"-Dartifact={mkl_artifact(javacpp)}` and run again" if javacpp else
            "version: no OpenBLAS preset jar on the class path to tell it by")})
    speeds: dict[str, list[float]] = {c: [] for c in builds}
    failures: dict[str, str] = {}
    order = list(builds)
    for r in range(rounds):
        for c in order[r % len(order):] + order[:r % len(order)] if order else []:
            if c in failures:
                continue
            classifier, jar, mkl = builds[c]
            try:
                result = measure_once(model, kind, shape, jar, classifier, seconds, mkl_jar=mkl)
            except Nd4jBuildError as err:
                failures[c] = str(err)
                continue
            speeds[c].append(result["iterations_per_s"])
            if on_result:
                on_result(c, result)
    ranking = sorted(((c, v) for c, v in speeds.items() if v and c not in failures),
                     key=lambda cv: -float(np.median(cv[1])))
    rows = [{"build": c, "classifier": builds[c][0], "blas": "mkl" if builds[c][2] else "openblas",
             "median_iterations_per_s": round(float(np.median(v)), 4),
             "min": round(min(v), 4), "max": round(max(v), 4),
             "spread": round((max(v) - min(v)) / float(np.median(v)), 4), "runs": len(v),
             "iterations_per_s": [round(x, 4) for x in v]} for c, v in ranking]
    doc = {"model": str(model), "kind": kind, "input_shape": shape, "seconds": seconds, "rounds": rounds,
           "nd4j_version": version, "ranking": rows, "skipped": skipped, "failed": failures}
    if rows:
        best = rows[0]["build"]
        doc["fastest"] = best
        classifier, _, mkl = builds[best]
        doc["maven"] = maven_snippet(classifier, version) + ("\n" + mkl_snippet(mkl) if mkl else "")
        if len(rows) > 1:
            # against every other build: the BLAS can be proved where the builds around it are not
            doc["versus"] = [{"build": r["build"], **ab.judge(speeds[r["build"]], speeds[best]).to_dict()} for r in rows[1:]]
            doc["versus_next"] = doc["versus"][0]
            doc["proved"] = doc["versus_next"]["verdict"] == "faster"
            doc["proved_faster_than"] = [v["build"] for v in doc["versus"] if v["verdict"] == "faster"]
        else:
            doc["proved"] = False
            doc["versus"], doc["proved_faster_than"] = [], []
        doc["as_fast"] = as_fast(doc)
    return doc


def as_fast(doc: dict) -> list[str]:
    """The builds a measurement (compare_builds' document) cannot tell apart from its fastest: the fastest
    and every build no A/B proved slower. Any of them is as good a choice."""
    return [doc["fastest"]] + [v["build"] for v in doc.get("versus", []) if v["verdict"] != "faster"]
