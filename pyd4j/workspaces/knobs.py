"""ND4J's workspace debug mode and its MemoryManager's GC knobs, each settable for a block."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterator

from pyd4j.workspaces.config import ENUM_PACKAGE, INT_MAX, DebugMode, coerce
from pyd4j.workspaces.nd4j import nd4j


def get_debug_mode() -> DebugMode:
    return DebugMode(str(nd4j().getWorkspaceManager().getDebugMode().name()))


def set_debug_mode(mode: DebugMode | str) -> None:
    import jpype  # noqa: PLC0415

    value = coerce("debug_mode", "debugMode", DebugMode, mode)
    java_mode = getattr(jpype.JClass(f"{ENUM_PACKAGE}.DebugMode"), value.value)
    nd4j().getWorkspaceManager().setDebugMode(java_mode)


@contextlib.contextmanager
def debug_mode(mode: DebugMode | str) -> Iterator[None]:
    """Workspace debug mode for the block (SPILL_EVERYTHING, BYPASS_EVERYTHING), then restore."""
    previous = get_debug_mode()
    set_debug_mode(mode)
    try:
        yield
    finally:
        set_debug_mode(previous)


@dataclass(frozen=True)
class GcSettings:
    """ND4J's MemoryManager GC knobs. ND4J calls System.gc() itself to free off-heap arrays whose
    Java wrappers died: every `occasional_gc_frequency` ms when `periodic_gc`, and when a loop
    runs slower than its average over `auto_gc_window` loops allows."""

    periodic_gc: bool
    occasional_gc_frequency_ms: int
    auto_gc_window_ms: int


def get_gc() -> GcSettings:
    mm = nd4j().getMemoryManager()
    return GcSettings(periodic_gc=bool(mm.isPeriodicGcActive()),
                      occasional_gc_frequency_ms=int(mm.getOccasionalGcFrequency()),
                      auto_gc_window_ms=int(mm.getAutoGcWindow()))


def set_gc(periodic_gc: bool | None = None, occasional_gc_frequency_ms: int | None = None,
           auto_gc_window_ms: int | None = None) -> GcSettings:
    """Change the given knobs, keep the others; returns the settings now in force."""
    mm = nd4j().getMemoryManager()
    for name, value in (("occasional_gc_frequency_ms", occasional_gc_frequency_ms),
                        ("auto_gc_window_ms", auto_gc_window_ms)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= INT_MAX):
            raise ValueError(f"{name}={value!r} must be an int of milliseconds in 0..{INT_MAX}")
    if periodic_gc is not None:
        mm.togglePeriodicGc(bool(periodic_gc))
    if occasional_gc_frequency_ms is not None:
        mm.setOccasionalGcFrequency(occasional_gc_frequency_ms)
    if auto_gc_window_ms is not None:
        mm.setAutoGcWindow(auto_gc_window_ms)
    return get_gc()


@contextlib.contextmanager
def gc_settings(**changes: Any) -> Iterator[GcSettings]:
    """set_gc(**changes) for the block, then restore."""
    before = get_gc()
    try:
        yield set_gc(**changes)
    finally:
        set_gc(before.periodic_gc, before.occasional_gc_frequency_ms, before.auto_gc_window_ms)

