"""A user's `spark-submit` command: the Spark settings it gives, and the same command with pyd4j's added.

`pyd4j profile/tune -- spark-submit ...` reach the driver (and spark-submit's launcher JVM) through
JAVA_TOOL_OPTIONS, but executors are started by the cluster (a standalone worker, YARN, Kubernetes)
with their own environment: the agent reaches them through `spark.executor.extraJavaOptions`, and
pyd4j tune's recommended settings through `--conf`. Settings are merged, never lost: a user's
extraJavaOptions keep their own options (less the memory flags tune owns, on its re-run) with pyd4j's
appended; every other setting pyd4j gives replaces the user's one for the same key (a `--conf`, a
shorthand like `--executor-memory`, or a line of `--properties-file`).

The agent's jar and the run directory are given by their paths on this machine: executors must see
them there (a cluster on this machine, or a shared file system), since each writes its own timeline.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from pyd4j.profile.jvm_options import MEMORY_FLAG_PREFIXES, JobCommandError

# spark-submit options that take a value, and the setting each shorthand stands for.
_SHORTHANDS = {
    "--master": "spark.master", "--deploy-mode": "spark.submit.deployMode", "--name": "spark.app.name",
    "--driver-memory": "spark.driver.memory", "--driver-java-options": "spark.driver.extraJavaOptions",
    "--driver-class-path": "spark.driver.extraClassPath", "--driver-cores": "spark.driver.cores",
    "--executor-memory": "spark.executor.memory", "--executor-cores": "spark.executor.cores",
    "--total-executor-cores": "spark.cores.max", "--num-executors": "spark.executor.instances",
}
_WITH_VALUE = {*_SHORTHANDS, "--class", "--jars", "--packages", "--exclude-packages", "--repositories",
               "--py-files", "--files", "--archives", "--conf", "-c", "--properties-file", "--driver-library-path",
               "--proxy-user", "--principal", "--keytab", "--queue", "--kill", "--status"}
# Settings whose value is a list of JVM options: pyd4j's options are appended to the user's.
JAVA_OPTIONS_KEYS = ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions")
EXECUTOR_MAINS = ("org.apache.spark.executor.CoarseGrainedExecutorBackend",
                  "org.apache.spark.executor.YarnCoarseGrainedExecutorBackend",
                  "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend")
_LOCAL = re.compile(r"local(?:-cluster)?\[(\*|\d+)(?:,\s*\d+)?\]|^local$")


@dataclass(frozen=True)
class SparkSubmit:
    """`spark-submit [options] <app jar> [app arguments]`, split where spark-submit splits it."""

    program: str
    options: tuple[str, ...]
    app: tuple[str, ...]          # the application jar and its own arguments

    @classmethod
    def parse(cls, argv: list[str] | tuple[str, ...]) -> "SparkSubmit":
        argv = [str(a) for a in argv]
        options: list[str] = []
        i = 1
        while i < len(argv):
            arg = argv[i]
            if not arg.startswith("-"):
                return cls(argv[0], tuple(options), tuple(argv[i:]))
            options.append(arg)
            if arg in _WITH_VALUE:
                if i + 1 >= len(argv):
                    raise JobCommandError(f"spark-submit option {arg} has no value; write e.g. `{arg} <value>`")
                options.append(argv[i + 1])
                i += 1
            i += 1
        return cls(argv[0], tuple(options), ())

    def _pairs(self) -> list[tuple[str, str]]:
        """(option, value) for each option with a value, in order."""
        out, i = [], 0
        while i < len(self.options):
            opt = self.options[i].split("=", 1)[0]
            if "=" in self.options[i] and opt in _WITH_VALUE:
                out.append((opt, self.options[i].split("=", 1)[1]))
            elif self.options[i] in _WITH_VALUE and i + 1 < len(self.options):
                out.append((self.options[i], self.options[i + 1]))
                i += 1
            i += 1
        return out

    def settings(self) -> dict[str, str]:
        """The spark.* settings the command gives: its properties file, then --conf and shorthands (which win)."""
        props: dict[str, str] = {}
        given: dict[str, str] = {}
        for opt, value in self._pairs():
            if opt == "--properties-file":
                props.update(read_properties(value))
            elif opt in ("--conf", "-c"):
                key, _, val = value.partition("=")
                given[key.strip()] = val
            elif opt in _SHORTHANDS:
                given[_SHORTHANDS[opt]] = value
        return {**props, **given}

    def with_settings(self, settings: dict[str, str], drop_memory_flags: bool = False) -> list[str]:
        """The command with `settings` as --conf options. For JAVA_OPTIONS_KEYS the user's options (their
        --conf, shorthand or properties file) are kept in front of pyd4j's, less their memory flags when
        `drop_memory_flags`; any other key replaces the user's value. The app and its arguments are untouched."""
        own = self.settings()
        merged = dict(settings)
        for key in JAVA_OPTIONS_KEYS:
            if key in settings and own.get(key):
                words = [w for w in shlex.split(own[key])
                         if not (drop_memory_flags and w.startswith(MEMORY_FLAG_PREFIXES))]
                merged[key] = " ".join([shlex.join(words), settings[key]]).strip()
        kept: list[str] = []
        i = 0
        while i < len(self.options):
            word = self.options[i]
            name = word.split("=", 1)[0]
            has_value = name in _WITH_VALUE
            value = (word.split("=", 1)[1] if "=" in word else (self.options[i + 1] if i + 1 < len(self.options) else ""))\
                if has_value else None
            step = 1 if not has_value or "=" in word else 2
            key = (value.partition("=")[0].strip() if name in ("--conf", "-c") else _SHORTHANDS.get(name))
            if key is None or key not in merged:
                kept.extend(self.options[i:i + step])
            i += step
        conf = [w for key, value in merged.items() for w in ("--conf", f"{key}={value}")]
        return [self.program, *kept, *conf, *self.app]

    @property
    def master(self) -> str:
        return self.settings().get("spark.master", "local[*]")

    def local_threads(self) -> int | None:
        """N of `local[N]` (the driver runs N tasks at once); None when the master is a cluster."""
        match = _LOCAL.search(self.master)
        if not match:
            return None
        if match.group(0) == "local":
            return 1
        if match.group(1) == "*":
            return os.cpu_count() or 1
        return int(match.group(1))


def read_properties(path: str | Path) -> dict[str, str]:
    """A spark-submit properties file (`key value` or `key=value` lines, # comments)."""
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise JobCommandError(f"spark-submit --properties-file {path}: {err.strerror or err}") from None
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        match = re.match(r"([^\s=:]+)\s*[=:\s]\s*(.*)$", line)
        key, value = (match.group(1), match.group(2).strip()) if match else (line, "")
        out[key] = value
    return out

