"""Any launcher, no JVM needed: how a job command is read, how the agent and tune's flags reach
its JVMs (JAVA_TOOL_OPTIONS, the user's own value kept), and who is who among a run's JVMs."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from pyd4j.profile.command import JobCommand, JobCommandError, tool_options_word, with_tool_options
from pyd4j.profile.jvms import identify, main_class, short_name
from pyd4j.profile.timeline import Timeline

AGENT = "-javaagent:/opt/p y/agent.jar=interval=100,out=/runs/a b/jvm-%p.jsonl"


def test_java_command_gets_the_agent_in_the_environment_and_flags_on_its_command_line():
    job = JobCommand.parse(["/usr/bin/java", "-Xmx1g", "-cp", "a.jar", "com.acme.Train", "--epochs", "2"])
    argv, env = job.launch(AGENT, ["-Xmx3g"], drop_memory_flags=True, env={"JAVA_TOOL_OPTIONS": "-Dmine=1"})
    assert job.kind == "java" and job.title == "com.acme.Train"
    assert argv == ["/usr/bin/java", "-Xmx3g", "-cp", "a.jar", "com.acme.Train", "--epochs", "2"]
    assert env["JAVA_TOOL_OPTIONS"] == f'-Dmine=1 "{AGENT}"'   # the user's value first, kept as it was


@pytest.mark.parametrize("argv, kind, title", [
    (["mvn", "-q", "exec:java", "-Dexec.mainClass=com.acme.Train", "-Dexec.args=--epochs 2"], "maven", "com.acme.Train"),
    (["bash", "-c", "cd /tmp && exec java -Xmx2g -cp 'lib/*' com.acme.Train --fast"], "shell", "com.acme.Train"),
    (["bash", "-c", "echo start; java -jar job.jar & wait"], "shell", "job.jar"),
    (["sh", "-c", "exit 3"], "shell", "sh"),
])
def test_launchers_are_recognised_and_named_after_the_class_they_run(argv, kind, title):
    job = JobCommand.parse(argv)
    assert (job.kind, job.title) == (kind, title)
    out, env = job.launch(AGENT, ["-Xmx3g", "-Dorg.bytedeco.javacpp.maxbytes=2g"], drop_memory_flags=True, env={})
    assert out == argv                                   # a launcher's command is never rewritten
    assert env["JAVA_TOOL_OPTIONS"] == f'"{AGENT}" -Xmx3g -Dorg.bytedeco.javacpp.maxbytes=2g'


def test_tool_options_are_quoted_as_the_jvm_splits_them():
    assert tool_options_word("-Xmx1g") == "-Xmx1g"
    assert tool_options_word("-Dp=a b") == '"-Dp=a b"'
    assert tool_options_word('-Dp="x" y') == "'-Dp=\"x\" y'"
    with pytest.raises(JobCommandError, match="both quote kinds"):
        tool_options_word("-Dp=\"it's\" here")
    env = with_tool_options({"JAVA_TOOL_OPTIONS": "  -Dkeep=me -Xss2m "}, ["-Dx=1"])
    assert env["JAVA_TOOL_OPTIONS"] == "-Dkeep=me -Xss2m -Dx=1"
    assert with_tool_options({}, ["-Dx=1"])["JAVA_TOOL_OPTIONS"] == "-Dx=1"


@pytest.mark.parametrize("argv, words", [
    ([], ["after `--`", "mvn", "bash -c"]),
    (["no-such-launcher-here", "x"], ["'no-such-launcher-here'", "not on PATH"]),
    (["./not/there.sh"], ["not an executable file"]),
    (["/usr/bin/java", "-Xmx1g", "-cp", "a.jar"], ["no main class", "-jar"]),
])
def test_commands_that_cannot_start_say_what_to_write(argv, words):
    with pytest.raises(JobCommandError) as err:
        JobCommand.parse(argv)
    for w in words:
        assert w in str(err.value)


def _lane(tmp_path: Path, name: str, start: dict, samples: list[dict] | None = None) -> Timeline:
    import json

    path = tmp_path / f"jvm-{start['pid']}.jsonl"
    lines = [{"type": "start", **start}] + [{"type": "sample", **s} for s in samples or []]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_maven_launching_a_child_jvm_is_the_launcher_and_the_child_the_job(tmp_path):
    maven = "org.codehaus.plexus.classworlds.launcher.Launcher -q exec:exec -Dexec.executable=java"
    _lane(tmp_path, "mvn", {"pid": 100, "ancestors": [90, 1], "jvm_start": 1000, "command": maven},
          [{"t": 1000 + i * 100, "rss": 50 << 20, "iterations": 0} for i in range(5)])
    _lane(tmp_path, "job", {"pid": 120, "ancestors": [110, 100, 90, 1], "jvm_start": 2000,
                            "command": "com.acme.Train --epochs 2"},
          [{"t": 2000 + i * 100, "rss": 80 << 20, "iterations": i, "javacpp_total": 1} for i in range(5)])
    lanes = Timeline.load_lanes(tmp_path)
    by_pid = {t.jvm.pid: t.jvm for t in lanes}
    assert by_pid[100].role == "launcher" and by_pid[100].launcher == "maven" and not by_pid[100].primary
    assert by_pid[120].role == "job" and by_pid[120].primary
    assert by_pid[120].parent_jvm == 100          # through the shell (110) in between
    assert Timeline.load(tmp_path).start["pid"] == 120   # the job's timeline, not Maven's
    assert "(maven)" in by_pid[100].label and "Train" in by_pid[120].label


def test_maven_running_the_job_in_its_own_jvm_is_named_after_the_job(tmp_path):
    command = ("org.codehaus.plexus.classworlds.launcher.Launcher -q exec:java "
               "-Dexec.mainClass=org.deeplearning4j.examples.quickstart.modeling.feedforward.classification.LinearClassifier")
    start = {"pid": 7, "ancestors": [6], "jvm_start": 0, "command": command}
    _lane(tmp_path, "mvn", start, [{"t": i, "iterations": i, "javacpp_total": 10} for i in range(3)])
    (t,) = Timeline.load_lanes(tmp_path)
    assert t.jvm.role == "job" and t.jvm.launcher == "maven" and t.jvm.primary
    assert t.name == main_class(start) == "org.deeplearning4j.examples.quickstart.modeling.feedforward.classification.LinearClassifier"
    assert short_name(t.name) == "LinearClassifier"


def test_identify_without_any_lane_is_empty():
    assert identify([]) == []


def test_a_shell_string_is_never_executed_to_name_it(tmp_path):
    marker = tmp_path / "ran"
    job = JobCommand.parse(["bash", "-c", f"touch {shlex.quote(str(marker))}; java -cp x com.acme.Job"])
    assert job.title == "com.acme.Job" and not marker.exists()
