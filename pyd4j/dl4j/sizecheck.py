"""Refuse a network whose parameters cannot be held, before DL4J allocates them.

`net.init()` allocates every parameter at once; asked for more than the machine has, libnd4j
aborts the whole process (a configuration needing 133 GB ended its JVM with exit -6, and with it
every other model a server held). The parameter count is DL4J's own, read from the configuration
object without allocating anything (each layer's `ParamInitializer.numParams`, each graph vertex's
`numParams`), so it is exact for every layer type, the ones pyd4j's planner has no rule for too.

The limit is the smaller of the caller's budget (if any) and this machine's memory as the JVM sees
it (the container's limit where one is set). `pyd4j.dl4j.config.network_of` runs the check before
every `init()` pyd4j does (serve, plan's probe, tune's prefetch search); `pyd4j.train.fit` and
`pyd4j nd4j-build` run it on the network they are given before training it.
"""

from __future__ import annotations

from typing import Any

from pyd4j.inputs import InputError

class TooLargeError(InputError):
    """A network whose parameters alone are more than the budget or the machine holds."""

    def __init__(self, message: str, needed: int, limit: int) -> None:
        super().__init__(message)
        self.needed, self.limit = needed, limit


def parameter_count(conf: Any) -> int:
    """The parameters DL4J will allocate for a MultiLayerConfiguration or ComputationGraphConfiguration,
    counted without allocating."""
    if hasattr(conf, "getConfs"):
        return sum(int(c.getLayer().initializer().numParams(c)) for c in conf.getConfs())
    return sum(int(v.numParams(True)) for v in conf.getVertices().values())


def parameter_bytes(conf: Any) -> int:
    """Bytes of the flattened parameter array: the count times the configuration's data type's width."""
    return parameter_count(conf) * int(conf.getDataType().width())


def machine_bytes() -> int:
    """This machine's memory as the in-process JVM sees it: physical RAM, or the container's memory
    limit where one is set (the JVM's container support reads the cgroup)."""
    import jpype  # noqa: PLC0415

    mx = jpype.JClass("java.lang.management.ManagementFactory").getOperatingSystemMXBean()
    return int(jpype.JObject(mx, jpype.JClass("com.sun.management.OperatingSystemMXBean")).getTotalMemorySize())


def check_parameters_fit(conf: Any, where: str, budget: int | None = None,
                         budget_name: str = "the budget") -> int:
    """The parameter bytes of `conf`, or TooLargeError when they pass `budget` or the machine's
    memory: naming the network, both figures and the fix. Nothing is allocated either way."""
    needed = parameter_bytes(conf)
    machine = machine_bytes()
    if budget is not None and needed > budget and budget <= machine:
        raise TooLargeError(f"{where}: its parameters alone take {needed} bytes ({_gib(needed)}), more than "
                            f"{budget_name} of {budget} bytes ({_gib(budget)}); refused before DL4J allocates them: "
                            f"raise the budget, or make the network smaller (fewer or narrower layers)",
                            needed, budget)
    if needed > machine:
        raise TooLargeError(f"{where}: its parameters alone take {needed} bytes ({_gib(needed)}), more than this "
                            f"machine's {machine} bytes of memory ({_gib(machine)}, the container's limit where one "
                            f"is set); refused before DL4J allocates them (it would end the process): make the network "
                            f"smaller (fewer or narrower layers), or run it on a machine with more memory",
                            needed, machine)
    return needed


def _gib(n: int) -> str:
    return f"{n / 1024**3:.1f} GiB" if n >= 1024**3 else f"{n / 1024**2:.1f} MiB"
