"""The collector pyd4j's flags pin is the one the JVM picks by itself in the container they size: checked
against the JVM's own ergonomics (-XX:+PrintFlagsFinal) inside real memory cgroups."""

from __future__ import annotations

import re

import pytest

from pyd4j.jvm.java import find_java
from pyd4j.memory.container import run_limited
from pyd4j.memory.jvm_overhead import SERVER_CLASS_BYTES, collector

from tests.memory.test_container import needs_cgroup
from tests.memory.test_estimate import NETWORKS

MiB = 1024**2


def jvm_choice(limit: int) -> str:
    out = run_limited([str(find_java().java), "-XX:+PrintFlagsFinal", "-version"], limit, timeout=120)
    chosen = {name for name, value in re.findall(r"\b(Use(?:Serial|Parallel|G1|Z|Shenandoah|Epsilon)GC)\s*=\s*(true|false)", out.stdout) if value == "true"}
    assert len(chosen) == 1, chosen
    return chosen.pop()[3:-2]   # UseSerialGC -> Serial


@needs_cgroup
@pytest.mark.jvm
@pytest.mark.parametrize("limit", [SERVER_CLASS_BYTES - 16 * MiB, SERVER_CLASS_BYTES + 16 * MiB])
def test_the_jvm_picks_what_the_flags_pin_on_either_side_of_the_line(jvm, limit):
    import jpype

    # the processors a JVM here sees (a CPU quota counts), as the child JVM sees them
    cpus = int(jpype.JClass("java.lang.Runtime").getRuntime().availableProcessors())
    assert jvm_choice(limit) == collector(limit, cpus)


@needs_cgroup
@pytest.mark.jvm
def test_the_jit_node_limit_the_flags_pin_reaches_the_jvm():
    # the flags' -XX:MaxNodeLimit is a C2 option the JVM takes from the command line, beside the collector they pin
    from pyd4j.memory.estimate import estimate
    from pyd4j.memory.jvm_overhead import JIT_NODE_LIMIT
    from pyd4j.memory.flags import flags

    fs = flags(estimate(NETWORKS / "mlp.json", 32), total="8g")
    assert f"-XX:MaxNodeLimit={JIT_NODE_LIMIT}" in fs.args()
    out = run_limited([str(find_java().java), *fs.args(), "-XX:+PrintFlagsFinal", "-version"], 2 * fs.container_bytes,
                      timeout=120)
    assert out.exit_code == 0, out.stderr[-400:]
    assert re.search(rf"\bMaxNodeLimit\s*=\s*{JIT_NODE_LIMIT}\s+\{{C2 product\}} \{{command line\}}", out.stdout)
    assert re.search(r"\bUseSerialGC\s*=\s*true", out.stdout)
