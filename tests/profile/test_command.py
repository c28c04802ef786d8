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
