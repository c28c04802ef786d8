"""Parsing users' java command lines (no JVM needed)."""

from __future__ import annotations

import pytest

from pyd4j.profile.command import JavaCommand, JobCommandError


def test_split_options_main_and_args():
    c = JavaCommand.parse(["/usr/bin/java", "-Xmx2g", "-cp", "a.jar:b.jar", "-Dx=1", "com.acme.Train", "-Xmx9g", "--epochs", "3"])
    assert c.jvm_options == ("-Xmx2g", "-cp", "a.jar:b.jar", "-Dx=1")
    assert c.main == ("com.acme.Train", "-Xmx9g", "--epochs", "3")  # the job's own args are untouched
    assert c.memory_flags() == ["-Xmx2g"]
    assert c.argv(["-Xmx4g"], drop_memory_flags=True) == ["/usr/bin/java", "-Xmx4g", "-cp", "a.jar:b.jar", "-Dx=1",
                                                          "com.acme.Train", "-Xmx9g", "--epochs", "3"]
    assert JavaCommand.parse(["/j/bin/java", "-jar", "job.jar", "x"]).title == "job.jar"


def test_a_pinned_collector_replaces_the_users_and_only_then():
    # a JVM refuses two collectors: generated flags that pin one drop the user's; flags that pin none keep it
    c = JavaCommand.parse(["/usr/bin/java", "-XX:+UseParallelGC", "-Xmx2g", "-XX:+UseStringDeduplication", "Main"])
    assert c.argv(["-Xmx1g", "-XX:+UseSerialGC"], drop_memory_flags=True) == \
        ["/usr/bin/java", "-Xmx1g", "-XX:+UseSerialGC", "-XX:+UseStringDeduplication", "Main"]
    assert c.argv(["-Xmx1g"], drop_memory_flags=True) == ["/usr/bin/java", "-Xmx1g", "-XX:+UseParallelGC", "-XX:+UseStringDeduplication", "Main"]


def test_the_pinned_jit_node_limit_replaces_the_users():
    # the user's own node limit comes after the generated options and would win: --verify drops it
    c = JavaCommand.parse(["/usr/bin/java", "-XX:MaxNodeLimit=90000", "-Xss2m", "Main", "-XX:MaxNodeLimit=1"])
    assert c.argv(["-XX:MaxNodeLimit=20000"], drop_memory_flags=True) == \
        ["/usr/bin/java", "-XX:MaxNodeLimit=20000", "-Xss2m", "Main", "-XX:MaxNodeLimit=1"]


@pytest.mark.parametrize("argv, words", [
    ([], ["after `--`"]),
    (["python", "x.py"], ["'python'", "java"]),
    (["/usr/bin/java", "-Xmx1g", "-cp", "a.jar"], ["no main class", "-jar"]),
])
def test_bad_commands_say_what_to_write(argv, words):
    with pytest.raises(JobCommandError) as err:
        JavaCommand.parse(argv)
    for w in words:
        assert w in str(err.value)
