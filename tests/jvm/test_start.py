"""JVM lifecycle. Start/restart behaviour runs in child Python processes, since a JVM started in
the test process stays for the whole session."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pyd4j.jvm
from pyd4j.jvm import JvmOptionError, JvmOptions
from pyd4j.jvm.errors import (
    DirectBufferOutOfMemoryError,
    JavaCppOutOfMemoryError,
    JavaError,
    JavaIllegalStateError,
    JavaOutOfMemoryError,
    MetaspaceOutOfMemoryError,
    python_class_for,
)
from pyd4j.jvm.java import major_version


def run_python(code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **(env or {})})


def test_options_become_jvm_args():
    options = JvmOptions.of(heap_max="4g", heap_initial="512m", max_direct_memory=1 << 30,
                            javacpp_maxbytes="6GiB", javacpp_maxphysicalbytes="10g",
                            properties={"a.b": "c"}, extra=["-XX:+UseG1GC"])
    assert options.args() == [
        "-Xms512m", "-Xmx4g", "-XX:MaxDirectMemorySize=1g",
        f"-Dorg.bytedeco.javacpp.maxbytes={6 << 30}", f"-Dorg.bytedeco.javacpp.maxphysicalbytes={10 << 30}",
        "-Da.b=c", "-XX:+UseG1GC",
    ]


@pytest.mark.parametrize("bad, words", [
    (dict(heap_max="4gg"), ["heap_max", "'4gg'", "'4g'"]),
    (dict(heap_max="12 parsecs"), ["12 parsecs"]),
    (dict(heap_initial="8g", heap_max="4g"), ["heap_initial 8g", "heap_max", "4g"]),
    (dict(extra=["Xmx4g"]), ["'Xmx4g'", "must start with '-'"]),
    (dict(properties={"bad key": "1"}), ["'bad key'"]),
])
def test_bad_options_are_named(bad, words):
    with pytest.raises(JvmOptionError) as err:
        JvmOptions.of(**bad)
    for word in words:
        assert word in str(err.value)


def test_java_major_versions():
    assert major_version("1.8.0_292") == 8
    assert major_version("17.0.15") == 17
    assert major_version("21") == 21


def test_exception_table_picks_most_specific_class():
    # Hierarchy of a JavaCPP refusal: OutOfMemoryError -> VirtualMachineError -> Error -> Throwable
    chain = ["java.lang.OutOfMemoryError", "java.lang.VirtualMachineError", "java.lang.Error"]
    assert python_class_for(chain, "Cannot allocate new FloatPointer(10): totalBytes = 1, physicalBytes = 2 > maxBytes") is JavaCppOutOfMemoryError
    assert python_class_for(chain, "Java heap space") is JavaOutOfMemoryError
    assert python_class_for(chain, "Direct buffer memory") is DirectBufferOutOfMemoryError
    assert python_class_for(chain, "Metaspace") is MetaspaceOutOfMemoryError
    assert python_class_for(["org.nd4j.linalg.exception.ND4JIllegalStateException", "java.lang.RuntimeException"], "x") is JavaIllegalStateError
    assert python_class_for(["com.example.Unknown", "java.lang.Exception"], "x") is JavaError
    assert issubclass(JavaOutOfMemoryError, MemoryError)


def test_option_typo_is_caught_before_start_in_a_child():
    result = run_python("""
        import pyd4j.jvm as j
        try:
            j.start(extra=["-XX:MaxDirectMemorySise=1g"])
        except j.JvmOptionError as e:
            print("REFUSED", e)
        # the typo did not burn the process's one chance to start a JVM
        print("STARTED", j.start(heap_max="256m").options.args())
    """)
    assert "REFUSED" in result.stdout and "MaxDirectMemorySise" in result.stdout, result.stderr
    assert "STARTED ['-Xmx256m']" in result.stdout, result.stderr


@pytest.mark.jvm
def test_second_start_same_options_is_noop_other_options_raise_in_a_child():
    result = run_python("""
        import pyd4j.jvm as j
        first = j.start(heap_max="256m")
        assert j.start(heap_max="256m") is first
        assert j.start() is first
        try:
            j.start(heap_max="512m")
        except j.JvmRestartError as e:
            print("RESTART", e)
    """)
    assert "RESTART" in result.stdout, result.stderr
    assert "-Xmx256m" in result.stdout and "-Xmx512m" in result.stdout


def test_missing_jars_say_make_setup(tmp_path: Path):
    result = run_python("""
        import pyd4j.jvm as j
        try:
            j.start()
        except j.ClasspathError as e:
            print("NOJARS", e)
    """, env={"PYD4J_CLASSPATH": str(tmp_path / "nothing-here.jar")})
    assert "NOJARS" in result.stdout and "PYD4J_CLASSPATH" in result.stdout, result.stderr


def test_missing_java_says_set_java_home(tmp_path: Path):
    result = run_python("""
        import pyd4j.jvm as j
        try:
            j.find_java()
        except j.JavaNotFoundError as e:
            print("NOJAVA", e)
    """, env={"JAVA_HOME": str(tmp_path)})
    assert "NOJAVA" in result.stdout and "JAVA_HOME" in result.stdout, result.stderr


def test_too_old_java_is_refused(tmp_path: Path):
    fake_home = tmp_path / "jdk8"
    (fake_home / "bin").mkdir(parents=True)
    java = fake_home / "bin" / "java"
    # A fake `java` that isolates our version check: it reports Java 8 the way a real one does.
    java.write_text("#!/bin/sh\necho '    java.version = 1.8.0_292' >&2\n")
    java.chmod(0o755)
    result = run_python("""
        import pyd4j.jvm as j
        try:
            j.find_java()
        except j.JavaNotFoundError as e:
            print("OLD", e)
    """, env={"JAVA_HOME": str(fake_home)})
    assert "OLD" in result.stdout and "1.8.0_292" in result.stdout and "11+" in result.stdout, result.stderr


@pytest.mark.jvm
def test_java_exception_keeps_class_and_stack(jvm):
    import jpype
    from org.nd4j.linalg.factory import Nd4j

    with pytest.raises(JavaIllegalStateError) as err:
        with pyd4j.jvm.java_errors():
            Nd4j.create(jpype.JFloat[:]([1, 2, 3]), jpype.JLong[:]([2, 2]))
    assert err.value.java_class == "org.nd4j.linalg.exception.ND4JIllegalStateException"
    assert "doesn't match data length" in str(err.value)
    assert "at org.nd4j.linalg.factory.Nd4j" in err.value.java_stacktrace
    assert err.value.__suppress_context__  # raised `from None`


def test_javacpp_limit_is_read_from_the_cause_chain():
    # JavaCPP's refusal at maxphysicalbytes: the top message names only the Pointer, the cause the limit.
    physical = JavaCppOutOfMemoryError(
        "Cannot allocate new LongPointer(6): totalBytes = 1K, physicalBytes = 3G",
        java_class="java.lang.OutOfMemoryError",
        java_stacktrace="Caused by: java.lang.OutOfMemoryError: Physical memory usage is too high: "
                        "physicalBytes (3G) > maxPhysicalBytes (3G)")
    assert physical.limit_property == "org.bytedeco.javacpp.maxphysicalbytes"
    total = JavaCppOutOfMemoryError(
        "Cannot allocate new FloatPointer(67108864): totalBytes = 1K, physicalBytes = 300M",
        java_class="java.lang.OutOfMemoryError",
        java_stacktrace="Caused by: java.lang.OutOfMemoryError: Failed to allocate memory within limits: "
                        "totalBytes (1K + 256M) > maxBytes (128M)")
    assert total.limit_property == "org.bytedeco.javacpp.maxbytes"
