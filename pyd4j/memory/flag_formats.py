"""The flags of a `FlagSet` written for where a user puts them: a java command line, the environment,
Maven, Gradle, Kubernetes. (Spark's settings depend on the cluster shape: pyd4j.memory.spark_jvm.)"""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyd4j.memory.flag_sizing import FlagSet

MiB = 1024**2
FORMATS = ("args", "env", "maven", "gradle", "spark", "k8s")


def _render_args(fs: FlagSet) -> str:
    return " ".join(fs.args())


def _render_env(fs: FlagSet) -> str:
    return "\n".join([*(f"export {a}" for a in fs.environment_assignments()),
                      f"export JAVA_TOOL_OPTIONS={shlex.quote(' '.join(fs.args()))}"])


def _render_maven(fs: FlagSet) -> str:
    args = " ".join(fs.args())
    exec_args = "\n".join(f"      <argument>{a}</argument>" for a in fs.args())
    env = "".join(f"\n      <{k}>{v}</{k}>" for k, v in fs.environment.items())
    env_block = f"\n    <environmentVariables>{env}\n    </environmentVariables>" if env else ""
    exports = "".join(f"export {a}; " for a in fs.environment_assignments())
    return f"""<!-- surefire / failsafe: tests run in a forked JVM with these flags -->
<plugin>
  <groupId>org.apache.maven.plugins</groupId>
  <artifactId>maven-surefire-plugin</artifactId>
  <configuration>
    <argLine>{args}</argLine>{env_block}
  </configuration>
</plugin>
<!-- exec-maven-plugin, goal exec:exec: a child JVM with these flags -->
<plugin>
  <groupId>org.codehaus.mojo</groupId>
  <artifactId>exec-maven-plugin</artifactId>
  <configuration>
    <executable>java</executable>
    <arguments>
{exec_args}
      <argument>-classpath</argument>
      <classpath/>
      <argument>your.main.Class</argument>
    </arguments>{env_block}
  </configuration>
</plugin>
<!-- exec:java runs in Maven's own JVM: {exports}export MAVEN_OPTS="{args}" -->"""


def _render_gradle(fs: FlagSet) -> str:
    items = ", ".join(f"'{a}'" for a in fs.args())
    env = ", ".join(f"'{k}': '{v}'" for k, v in fs.environment.items())
    with_env = "; environment nd4jEnvironment" if env else ""
    return f"""// build.gradle
def nd4jJvmArgs = [{items}]
{f"def nd4jEnvironment = [{env}]" if env else "// no environment variables needed"}
tasks.withType(Test).configureEach {{ jvmArgs nd4jJvmArgs{with_env} }}
tasks.withType(JavaExec).configureEach {{ jvmArgs nd4jJvmArgs{with_env} }}
// with the application plugin: application {{ applicationDefaultJvmArgs = nd4jJvmArgs }}"""


def _render_k8s(fs: FlagSet) -> str:
    mib = math.ceil(fs.container_bytes / MiB - 1e-9)   # whole MiB up, ignoring float noise
    env = "".join(f'\n  - name: {k}\n    value: "{v}"' for k, v in fs.environment.items())
    return f"""# container spec: request = limit, so the pod is never squeezed below what ND4J was sized for
resources:
  requests:
    memory: "{mib}Mi"
  limits:
    memory: "{mib}Mi"
env:{env}
  - name: JAVA_TOOL_OPTIONS
    value: "{' '.join(fs.args())}\""""


_RENDERERS: dict[str, Callable[[FlagSet], str]] = {
    "args": _render_args, "env": _render_env, "maven": _render_maven, "gradle": _render_gradle, "k8s": _render_k8s}


def render(fs: FlagSet, fmt: str = "args") -> str:
    """`fs` in one of FORMATS."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if fmt == "spark":
        raise ValueError("Spark settings depend on the cluster shape (executors, cores, worker memory): use "
                         "spark_flags(estimate, SparkShape(...)).render(), or `pyd4j flags --format spark`")
    return _RENDERERS[fmt](fs)
