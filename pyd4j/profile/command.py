"""Reading and rewriting the command that starts a user's job.

`JavaCommand`: a `java ...` command line, where the JVM options end and the main class (or -jar /
-m) begins, and which memory flags it already sets. `JobCommand`: any command that starts the
job (`java` itself, a shell command, `mvn exec:java`, Gradle, `spark-submit`, a script), and how
pyd4j's agent and JVM options reach every JVM it starts.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from pyd4j.jvm import find_java
from pyd4j.profile.jvm_options import MEMORY_FLAG_PREFIXES, JobCommandError  # noqa: F401 (named here for callers)

# JVM options that take their value as the next argument.
_WITH_VALUE = {"-cp", "-classpath", "--class-path", "-p", "--module-path", "--upgrade-module-path",
               "--add-modules", "--add-opens", "--add-exports", "--add-reads", "--limit-modules",
               "--patch-module", "--enable-native-access"}
# Options that choose the garbage collector: a JVM refuses two, so generated flags that pin one replace the user's.
COLLECTOR_OPTIONS = ("-XX:+UseSerialGC", "-XX:+UseParallelGC", "-XX:+UseG1GC", "-XX:+UseZGC", "-XX:+UseShenandoahGC",
                     "-XX:+UseEpsilonGC", "-XX:+UseConcMarkSweepGC")


@dataclass(frozen=True)
class JavaCommand:
    java: str
    jvm_options: tuple[str, ...]
    main: tuple[str, ...]  # main class (or -jar X / -m mod) and the job's own arguments

    @classmethod
    def parse(cls, argv: list[str] | tuple[str, ...]) -> "JavaCommand":
        """Split `java [options] Main args...`; raises JobCommandError naming what is missing."""
        if not argv:
            raise JobCommandError("no job command: write it after `--`, e.g. `-- java -cp job.jar com.acme.Train`")
        java = argv[0]
        if not java.endswith("java"):
            raise JobCommandError(
                f"the job command must start with `java` (got {java!r}); "
                f"write e.g. `-- java -Xmx2g -cp job.jar com.acme.Train`"
            )
        command = cls.split(argv)
        if java == "java":
            command = cls(str(find_java().java), command.jvm_options, command.main)  # JAVA_HOME first, as for every JVM pyd4j starts
        return command

    @classmethod
    def split(cls, argv: list[str] | tuple[str, ...]) -> "JavaCommand":
        """Split `java [options] Main args...` as written (no look-up of the java binary)."""
        java = argv[0]
        options: list[str] = []
        i = 1
        while i < len(argv):
            arg = argv[i]
            if arg in ("-jar", "-m", "--module"):
                return cls(java, tuple(options), tuple(argv[i:]))
            if not arg.startswith("-"):
                return cls(java, tuple(options), tuple(argv[i:]))
            options.append(arg)
            if arg in _WITH_VALUE and i + 1 < len(argv):
                options.append(argv[i + 1])
                i += 1
            i += 1
        raise JobCommandError(
            f"no main class in {' '.join(argv)!r}: add the class to run (or -jar job.jar) after the JVM options"
        )

    def argv(self, extra_options: list[str] | tuple[str, ...] = (), drop_memory_flags: bool = False) -> list[str]:
        """The command line, with extra JVM options placed before the user's own (so the user's
        win) unless drop_memory_flags removes the user's memory flags first (and the user's collector, where
        the extra options choose one)."""
        pinned = any(o in COLLECTOR_OPTIONS for o in extra_options)
        own = [o for o in self.jvm_options if not (drop_memory_flags and (o.startswith(MEMORY_FLAG_PREFIXES)
                                                                          or (pinned and o in COLLECTOR_OPTIONS)))]
        return [self.java, *extra_options, *own, *self.main]

    def memory_flags(self) -> list[str]:
        """The memory flags the user's command sets."""
        return [o for o in self.jvm_options if o.startswith(MEMORY_FLAG_PREFIXES)]

    @property
    def title(self) -> str:
        """Main class or jar: how the job is named in reports."""
        if self.main and self.main[0] in ("-jar", "-m", "--module") and len(self.main) > 1:
            return self.main[1]
        return self.main[0] if self.main else "job"


# Launchers by program name; anything else is started as is, its JVMs reached through the
# environment.
_KINDS = {"java": "java", "mvn": "maven", "mvnw": "maven", "mvnDebug": "maven", "gradle": "gradle",
          "gradlew": "gradle", "spark-submit": "spark-submit", "sh": "shell", "bash": "shell",
          "dash": "shell", "zsh": "shell", "ksh": "shell"}
# Where a launcher names the class it runs (for the run's name before any JVM has started).
_MAIN_ON_COMMAND_LINE = re.compile(r"(?:-Dexec\.mainClass=|--class[ =]|-PmainClass=)(\S+)")
TOOL_OPTIONS = "JAVA_TOOL_OPTIONS"


def tool_options_word(option: str) -> str:
    """One option as the JVM reads it from JAVA_TOOL_OPTIONS (split at white space; quotes group)."""
    if not re.search(r"[\s'\"]", option):
        return option
    if '"' not in option:
        return f'"{option}"'
    if "'" not in option:
        return f"'{option}'"
    raise JobCommandError(f"the JVM option {option!r} holds both quote kinds and spaces, which JAVA_TOOL_OPTIONS "
                          f"cannot carry; use a path without quotes")


def with_tool_options(env: dict[str, str], options: list[str] | tuple[str, ...]) -> dict[str, str]:
    """`env` with `options` appended to JAVA_TOOL_OPTIONS, after the user's own value (kept as is;
    for the same flag the later one wins, so pyd4j's memory flags win over the user's there)."""
    words = [tool_options_word(o) for o in options]
    own = env.get(TOOL_OPTIONS, "").strip()
    return {**env, TOOL_OPTIONS: " ".join([own, *words] if own else words)}


@dataclass(frozen=True)
class JobCommand:
    """The command that starts the job: `java ...` (parsed in `java`) or any launcher."""

    argv: tuple[str, ...]
    kind: str                   # java, maven, gradle, spark-submit, shell or other
    java: JavaCommand | None    # for kind == "java"
    title: str                  # the job's class (or jar, or program) for naming its run

    @classmethod
    def parse(cls, argv: list[str] | tuple[str, ...]) -> "JobCommand":
        """Check the command can start: `java` commands fully (main class present), others by their
        program existing. Raises JobCommandError naming what is wrong and what to write."""
        if not argv:
            raise JobCommandError("no job command: write it after `--`, e.g. `-- java -cp job.jar com.acme.Train`, "
                                  "`-- mvn -q exec:java -Dexec.mainClass=com.acme.Train` or `-- bash -c \"java ...\"`")
        program = str(argv[0])
        name = Path(program).name
        kind = _KINDS.get(name, "java" if name.endswith("java") else "other")
        if kind == "java":
            java = JavaCommand.parse(argv)
            return cls((java.java, *argv[1:]), kind, java, java.title)
        if shutil.which(program) is None:
            where = "is not an executable file" if os.sep in program else "is not on PATH"
            raise JobCommandError(f"the job command {program!r} {where}; write the command that starts your job "
                                  f"after `--` (java, mvn, gradle, spark-submit, a shell command or a script)")
        return cls(tuple(argv), kind, None, _title(kind, [str(a) for a in argv]))

    def launch(self, agent: str, extra_jvm_options: list[str] | tuple[str, ...] = (), drop_memory_flags: bool = False,
               env: dict[str, str] | None = None,
               spark_conf: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
        """The argv and environment that start the job with `agent` in every JVM it starts.

        The agent always travels in JAVA_TOOL_OPTIONS, appended to the user's own value, so child
        JVMs (Maven's, a shell's, Gradle's, spark-submit's) get it too. `extra_jvm_options`
        (pyd4j tune's flags) go on the command line of a `java` command, where `drop_memory_flags`
        replaces the user's own; for launchers they follow the agent in JAVA_TOOL_OPTIONS (see
        `tool_options`), where a JVM's own command-line flags still win (tune checks what each JVM
        really got).

        spark-submit's executors are started by the cluster, not by this command, so the agent reaches
        them through `spark.executor.extraJavaOptions` (pyd4j.profile.spark_submit), where `spark_conf`
        (pyd4j tune's Spark settings) goes too."""
        env = dict(os.environ if env is None else env)
        if self.kind == "spark-submit":
            from pyd4j.profile.spark_submit import SparkSubmit  # noqa: PLC0415

            submit = SparkSubmit.parse(self.argv)
            conf = dict(spark_conf or {})
            keys = ["spark.executor.extraJavaOptions"]
            if submit.settings().get("spark.submit.deployMode") == "cluster":
                keys.append("spark.driver.extraJavaOptions")   # the driver, too, is started by the cluster
            for key in keys:
                conf[key] = " ".join(w for w in (conf.get(key, ""), shlex.quote(agent)) if w)
            argv = submit.with_settings(conf, drop_memory_flags=drop_memory_flags)
            return argv, with_tool_options(env, [agent, *self.tool_options(extra_jvm_options)])
        if spark_conf:
            raise JobCommandError("Spark settings can only be given to a spark-submit command")
        if self.java is not None:
            return self.java.argv(extra_jvm_options, drop_memory_flags=drop_memory_flags), with_tool_options(env, [agent])
        return list(self.argv), with_tool_options(env, [agent, *self.tool_options(extra_jvm_options)])

    def tool_options(self, options: list[str] | tuple[str, ...]) -> list[str]:
        """The JVM options a launcher's JVMs get through JAVA_TOOL_OPTIONS: all but -Xms, since a
        JVM whose own command line sets a smaller -Xmx would refuse to start ("Initial heap size
        set to a larger value than the maximum heap size"); -Xms only saves heap growth."""
        return [o for o in options if self.java is not None or not o.startswith("-Xms")]


def _title(kind: str, argv: list[str]) -> str:
    """The job's class named on a launcher's command line, else the program's name."""
    text = " ".join(argv[1:])
    if kind == "shell":
        for word in _shell_words(argv):
            if Path(word[0]).name == "java":
                try:
                    return JavaCommand.split(word).title
                except JobCommandError:
                    break
    match = _MAIN_ON_COMMAND_LINE.search(text)
    return match.group(1) if match else Path(argv[0]).name


def _shell_words(argv: list[str]) -> list[list[str]]:
    """The simple commands of a `sh -c "..."` script (split at ; & | and newlines), best effort."""
    try:
        script = argv[argv.index("-c") + 1]
    except (ValueError, IndexError):
        return []
    try:
        words = shlex.split(script, posix=True)
    except ValueError:
        return []
    commands, current = [], []
    for w in words:
        if w in (";", "&", "&&", "|", "||") or w.endswith((";", "&")):
            stripped = w.rstrip(";&")
            if stripped:
                current.append(stripped)
            if current:
                commands.append(current)
            current = []
        elif w == "exec":
            continue
        else:
            current.append(w)
    if current:
        commands.append(current)
    return commands
