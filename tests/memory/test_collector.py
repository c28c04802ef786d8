"""The collector pyd4j's flags pin is the one the JVM picks by itself in the container they size: checked
against the JVM's own ergonomics (-XX:+PrintFlagsFinal) inside real memory cgroups."""

from __future__ import annotations

import re

import pytest

from pyd4j.jvm.java import find_java
from pyd4j.memory.container import run_limited
from pyd4j.memory.estimate import SERVER_CLASS_BYTES, collector

from tests.memory.test_container import needs_cgroup

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
