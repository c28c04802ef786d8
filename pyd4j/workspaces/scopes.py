"""Workspace scopes: open one for a `with` block, their stats, destroying them, allocating outside them."""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Any, Iterator

from pyd4j.jvm.errors import java_errors
from pyd4j.workspaces.arrays import ScopedArray
from pyd4j.workspaces.config import WorkspaceConfig, WorkspaceConflictError, check_creatable
from pyd4j.workspaces.nd4j import nd4j


@dataclass(frozen=True)
class WorkspaceStats:
    """A snapshot of one workspace (bytes unless named otherwise)."""

    name: str
    current_size: int            # memory ND4J holds for the workspace now
    current_offset: int          # bytes handed out in this cycle from the main block
    this_cycle_allocations: int
    last_cycle_allocations: int
    max_cycle_allocations: int
    spilled_bytes: int           # allocated outside the block (spill policy EXTERNAL/REALLOCATE)
    pinned_bytes: int            # circular-mode allocations held for two more steps
    spilled_count: int
    pinned_count: int
    cycles: int                  # scopes closed so far
    generation: int              # scopes opened so far
    scope_active: bool
    type: str                    # SCOPED or CIRCULAR

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def stats(java_workspace) -> WorkspaceStats:
    """Stats of any ND4J workspace object (ours, DL4J's, AsyncDataSetIterator's)."""
    ws = java_workspace

    def opt(method: str) -> int:
        return int(getattr(ws, method)()) if hasattr(ws, method) else 0

    return WorkspaceStats(
        name=str(ws.getId()), current_size=int(ws.getCurrentSize()), current_offset=int(ws.getCurrentOffset()),
        this_cycle_allocations=int(ws.getThisCycleAllocations()),
        last_cycle_allocations=int(ws.getLastCycleAllocations()),
        max_cycle_allocations=int(ws.getMaxCycleAllocations()),
        spilled_bytes=opt("getSpilledSize"), pinned_bytes=opt("getPinnedSize"),
        spilled_count=opt("getNumberOfExternalAllocations"), pinned_count=opt("getNumberOfPinnedAllocations"),
        cycles=opt("getCyclesCount"), generation=int(ws.getGenerationId()),
        scope_active=bool(ws.isScopeActive()), type=str(ws.getWorkspaceType().name()),
    )


class Workspace:
    """An open workspace scope (what `with workspace(...) as ws` gives)."""

    def __init__(self, name: str, config: WorkspaceConfig, java_workspace) -> None:
        self.name = name
        self.config = config
        self.java = java_workspace
        self.generation = int(java_workspace.getGenerationId())

    @property
    def is_open(self) -> bool:
        return bool(self.java.isScopeActive()) and int(self.java.getGenerationId()) == self.generation

    def stats(self) -> WorkspaceStats:
        return stats(self.java)

    def track(self, array) -> "ScopedArray":
        """Guard an INDArray made in this scope: using it after the scope closed raises."""
        return ScopedArray(array)

    def __repr__(self) -> str:
        return f"Workspace({self.name!r}, open={self.is_open})"


@contextlib.contextmanager
def workspace(name: str, config: WorkspaceConfig | None = None) -> Iterator[Workspace]:
    """Open (creating on first use) this thread's workspace `name` for the `with` block.

    ND4J keeps one workspace per name per thread and re-uses its memory scope after scope;
    nesting scopes of different names gives parent/child workspaces (see `leverage`).
    """

    cfg = config or WorkspaceConfig()
    manager = nd4j().getWorkspaceManager()
    with java_errors():
        if manager.checkIfWorkspaceExists(name):
            existing = WorkspaceConfig.from_java(manager.getWorkspaceForCurrentThread(name).getWorkspaceConfiguration())
            if existing != cfg and config is not None:
                have, want = existing.to_dict(), cfg.to_dict()
                diff = {k: {"existing": have[k], "asked": want[k]} for k in have if have[k] != want[k]}
                raise WorkspaceConflictError(
                    f"workspace {name!r} already exists on this thread with another configuration "
                    f"({diff}); ND4J would silently keep the existing one. "
                    f"Use another name, or pyd4j.workspaces.destroy({name!r}) first")
            cfg = existing
        else:
            check_creatable(cfg)
        java_ws = manager.getAndActivateWorkspace(cfg.to_java(), name)
    scope = Workspace(name, cfg, java_ws)
    try:
        yield scope
    finally:
        with java_errors():
            java_ws.close()


def current_workspace() -> str | None:
    """Name of the workspace whose scope is open on this thread, or None."""
    ws = nd4j().getMemoryManager().getCurrentWorkspace()
    return None if ws is None else str(ws.getId())


def workspace_names() -> list[str]:
    """Names of this thread's workspaces (open or not)."""
    return [str(n) for n in nd4j().getWorkspaceManager().getAllWorkspacesIdsForCurrentThread()]


def destroy(name: str) -> None:
    """Free this thread's workspace `name` (its arrays become unusable)."""
    manager = nd4j().getWorkspaceManager()
    if manager.checkIfWorkspaceExists(name):
        manager.destroyWorkspace(manager.getWorkspaceForCurrentThread(name))
    forget_collected()


def destroy_all() -> None:
    """Free every workspace of this thread, one by one: ND4J's destroyAllWorkspacesForCurrentThread()
    adds a System.gc() (a full collection, 0.2-0.4 s) that freeing them does not need."""
    manager = nd4j().getWorkspaceManager()
    for ws in list(manager.getAllWorkspacesForCurrentThread()):
        manager.destroyWorkspace(ws)
    forget_collected()


def held_bytes() -> int:
    """Bytes this thread's workspaces hold now (their current sizes)."""
    return sum(int(ws.getCurrentSize()) for ws in nd4j().getWorkspaceManager().getAllWorkspacesForCurrentThread())


def forget_collected() -> int:
    """Drop ND4J's bookkeeping of workspaces Java has already collected; returns how many entries went.

    ND4J (1.0.0-M2.1) files every CPU workspace in its DeallocatorService's map under one
    `getUniqueId()` and gives the reference another (each call draws a fresh number), so the
    removal after the workspace is collected misses: the entry (reference, deallocator, pointer
    pair, id; about 630 bytes of heap) stays for the life of the JVM. A process that destroys and
    makes workspaces again and again (a server evicting and restoring models: 3 per restore of a
    small network) grows by that much each time. An entry whose workspace is collected can go:
    its deallocator has run, or the reference queue holds the reference until it runs.
    """
    import jpype  # noqa: PLC0415

    global _REFERENCE_MAP
    if _REFERENCE_MAP is None:
        service = jpype.JClass("org.nd4j.linalg.api.memory.deallocation.DeallocatorService")
        try:
            field = service.class_.getDeclaredField("referenceMap")
            field.setAccessible(True)
            _REFERENCE_MAP = field
        except Exception:  # noqa: BLE001  (another ND4J without the map: nothing to forget)
            _REFERENCE_MAP = False
    if _REFERENCE_MAP is False:
        return 0
    entries = _REFERENCE_MAP.get(nd4j().getDeallocatorService()).entrySet().iterator()
    dropped = 0
    while entries.hasNext():
        e = entries.next()
        if str(e.getKey()).startswith("Workspace_") and e.getValue().get() is None:
            entries.remove()
            dropped += 1
    return dropped


_REFERENCE_MAP: Any = None


@contextlib.contextmanager
def outside_workspaces() -> Iterator[None]:
    """Allocate outside any workspace inside the block (ND4J's scopeOutOfWorkspaces)."""
    scope = nd4j().getWorkspaceManager().scopeOutOfWorkspaces()
    try:
        yield
    finally:
        scope.close()

