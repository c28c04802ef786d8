"""What `pyd4j tune --speed` changes and what it learns first: one setting changed without touching the
job's code (`Change`), a set of them as one launch (`Setup`), and what the probe run of the job as it
is says about its settings (`Probe`)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

# Every run, both sides: no live-set inspections (full collections) and no allocation sites, which
# cost time the job would not spend without pyd4j.
QUIET_AGENT = ("live=0", "sites=0")


@dataclass(frozen=True)
class Change:
    """One setting changed without touching the job's code: environment, JVM options or an agent
    option (ND4J's memory manager, set at every fit())."""

    setting: str
    before: str
    after: str
    why: str
    env: tuple[tuple[str, str | None], ...] = ()
    jvm: tuple[str, ...] = ()
    agent: tuple[str, ...] = ()
    replaces_memory_flags: bool = False
    paste: str = ""
    maven: str = ""           # the dependency to paste into the job's pom.xml
    build: str = ""           # the nd4j-native build ND4J must load with this change (checked every run)
    blas: str = ""            # the BLAS ND4J must call with this change (checked every run)

    def key(self) -> str:
        return self.setting


@dataclass(frozen=True)
class Setup:
    """A set of changes as one launch: environment, JVM options (agent options as -Dpyd4j.agent)."""

    changes: tuple[Change, ...] = ()

    def plus(self, change: Change) -> "Setup":
        return Setup(self.changes + (change,))

    def env(self) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for c in self.changes:
            out.update(dict(c.env))
        return out

    def jvm_options(self) -> list[str]:
        opts = [o for c in self.changes for o in c.jvm]
        agent = [*QUIET_AGENT, *(o for c in self.changes for o in c.agent if not o.startswith("native_jar="))]
        jars = [o.split("=", 1)[1] for c in self.changes for o in c.agent if o.startswith("native_jar=")]
        if jars:   # one option for every jar the changes add (a build and MKL)
            agent.append("native_jar=" + os.pathsep.join(jars))
        opts.append("-Dpyd4j.agent=" + ",".join(agent))
        return opts

    def build(self) -> str:
        """The nd4j-native build a change of this setup makes ND4J load ("" when none does)."""
        return next((c.build for c in self.changes if c.build), "")

    def blas(self) -> str:
        """The BLAS a change of this setup makes ND4J call ("" when none does)."""
        return next((c.blas for c in self.changes if c.blas), "")

    def drop_memory_flags(self) -> bool:
        return any(c.replaces_memory_flags for c in self.changes)

    def label(self) -> str:
        return " + ".join(f"{c.setting}={c.after}" for c in self.changes) or "the job as it is"


@dataclass
class Probe:
    """What the first run of the job as it is says about its settings."""

    iterations_per_s: float | None
    ok: bool
    why: str
    nd4j: dict = field(default_factory=dict)     # the agent's report at the first fit()
    gc_share: float | None = None                # GC time / training time
    explicit_gc_share: float | None = None       # the share of it in collections the job asked for (System.gc())
    heap_max: int | None = None
    run_dir: str | None = None
    time_split: dict | None = None               # where the training time went (pyd4j.profile.timesplit)
    iterator: dict = field(default_factory=dict)  # the agent's note on the iterator fit() received
