"""A finding: one thing that went wrong in a profiled run, how sure pyd4j is, the numbers behind it and
the fix. Every check of `pyd4j.profile.diagnose` returns these, so reports and `tune` read one shape."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

MIB = 1 << 20


@dataclass
class Finding:
    """One diagnosis: what, how sure, the numbers behind it, and the fix (flags when there are)."""

    kind: str            # oom-heap, oom-javacpp-maxbytes, oom-javacpp-maxphysicalbytes, oom-direct,
    #                      oom-metaspace, killed (OOM killer), killed-signal (not memory), leak-offheap, leak-heap, gc-pressure, workspace-spill,
    #                      crash, native-crash, native-memory, near-limit, plan-not-applied, prefetch-died,
    #                      malloc-threshold-default
    severity: str        # error | warning | info
    title: str
    evidence: list[str]
    fix: str
    flags: list[str] = field(default_factory=list)
    numbers: dict[str, float | int | None] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def grow_limit(peak: float | None, factor: float = 1.5, floor: int = 64 * MIB) -> int:
    """A limit with headroom over a measured peak, rounded up to whole MiB."""
    value = max(int((peak or 0) * factor), floor)
    return -(-value // MIB) * MIB
