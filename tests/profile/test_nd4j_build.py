"""pyd4j nd4j-build: which builds it measures, the input it feeds, and (real JVMs) that each
measurement ran the build it names."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pyd4j.jvm.classpath import classpath
from pyd4j.dl4j.input_types import array_shape as input_shape
from pyd4j.profile.nd4j_build import CLASSIFIERS, _NATIVE_JAR, find_jar, javacpp_version, label, needs, nd4j_version


def test_input_shapes_match_dl4j_layouts():
    assert input_shape({"type": "feedForward", "size": 784}, 32) == [32, 784]
    assert input_shape({"type": "convolutionalFlat", "height": 28, "width": 28, "channels": 1}, 16) == [16, 784]
    # DL4J convolutional input is NCHW
    assert input_shape({"type": "convolutional", "height": 32, "width": 24, "channels": 3}, 8) == [8, 3, 32, 24]
    assert input_shape({"type": "recurrent", "size": 10, "timeSeriesLength": 50}, 4) == [4, 10, 50]


def test_builds_need_their_cpu_flags():
    assert needs("linux-x86_64") == set()
    assert needs("linux-x86_64-avx2") == {"avx2", "fma"}
    assert "avx512f" in needs("linux-x86_64-avx512")


def test_javacpp_version_of_a_loaded_blas_and_of_a_class_path_jar():
    cache = "/home/u/.javacpp/cache/openblas-0.3.19-1.5.7-linux-x86_64.jar/org/bytedeco/openblas/linux-x86_64/libopenblas_nolapack.so.0"
    assert javacpp_version(cache) == "1.5.7"
    assert javacpp_version("/r/mkl-2022.2-1.5.8-linux-x86_64-redist.jar/org/bytedeco/mkl/linux-x86_64/libopenblas_nolapack.so.0") == "1.5.8"
    assert javacpp_version("/lib/openblas-0.3.19-1.5.7-linux-x86_64.jar") == "1.5.7"
    assert javacpp_version("/lib/openblas-0.3.19-1.5.7.jar") is None and javacpp_version("/usr/lib/libopenblas.so") is None


def test_old_command_name_still_runs_it_unlisted():
    from click.testing import CliRunner

    from pyd4j.cli import main

    assert main.commands["backend"].callback is main.commands["nd4j-build"].callback
    assert main.commands["backend"].hidden and not main.commands["nd4j-build"].hidden
    listing = CliRunner().invoke(main, ["--help"]).output
    assert "nd4j-build" in listing and " backend " not in listing
    old = CliRunner().invoke(main, ["backend", "--batch", "8"])   # the same options, the same refusals
    assert old.exit_code == 2 and "--model" in old.output


def test_native_jar_names():
    assert _NATIVE_JAR.match("nd4j-native-1.0.0-M2.1-linux-x86_64-avx512.jar").group("classifier") == "linux-x86_64-avx512"
    assert _NATIVE_JAR.match("nd4j-native-1.0.0-M2.1-linux-x86_64.jar").group("classifier") == "linux-x86_64"
    # the Java part and the presets are not builds
    assert _NATIVE_JAR.match("nd4j-native-1.0.0-M2.1.jar") is None
    assert _NATIVE_JAR.match("nd4j-native-api-1.0.0-M2.1.jar") is None
    assert _NATIVE_JAR.match("nd4j-native-preset-1.0.0-M2.1-linux-x86_64.jar") is None


@pytest.mark.jvm
@pytest.mark.slow
def test_nd4j_build_measures_each_available_build_on_lenet():
    cp = classpath()
    available = [c for c in CLASSIFIERS if find_jar(c, nd4j_version(cp), cp)]
    out = subprocess.run([sys.executable, "-m", "pyd4j.cli", "nd4j-build", "--model", "lenet", "--batch", "8",
                          "--seconds", "1", "--rounds", "1", "--json"], capture_output=True, text=True, timeout=600)
    doc = json.loads(out.stdout)
    assert out.returncode == 0, out.stderr
    measured = {r["build"] for r in doc["ranking"]}
    skipped = {s["build"] for s in doc["skipped"]}
    assert not doc["failed"]
    assert {r["classifier"] for r in doc["ranking"]} | skipped == set(CLASSIFIERS)
    # every build whose jar is here and whose CPU flags this machine has was measured, with OpenBLAS and
    # with MKL (make setup fetches MKL's jar; each measurement checked which BLAS ND4J's calls went to)
    assert measured == {label(c, mkl) for c in available if c not in skipped for mkl in (False, True)}, doc["skipped"]
    assert {r["blas"] for r in doc["ranking"] if r["build"].endswith("+mkl")} == {"mkl"}
    assert doc["fastest"] == doc["ranking"][0]["build"]
    best = doc["ranking"][0]
    assert f"<classifier>{best['classifier']}</classifier>" in doc["maven"]
    assert ("-Dorg.bytedeco.openblas.load=mkl_rt" in doc["maven"]) == (best["blas"] == "mkl")
    assert doc["input_shape"] == [8, 784]
    # every measured build is either proved slower than the fastest or in the group it cannot be told from
    assert doc["as_fast"][0] == doc["fastest"]
    assert set(doc["as_fast"]) | set(doc["proved_faster_than"]) == measured
    assert not set(doc["as_fast"]) & set(doc["proved_faster_than"])
