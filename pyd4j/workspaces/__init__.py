"""ND4J MemoryWorkspaces from Python: configuration, scopes, stats, debug and GC knobs.

A workspace is a block of off-heap memory that ND4J re-uses loop after loop instead of
allocating and freeing every array; it is DL4J's main lever against allocation cost and GC
pressure. Everything here maps one-to-one onto ND4J's API, so what you learn here reads the
same in Java:

    cfg = WorkspaceConfig(initial_size="16m", policy_learning="NONE")
    with workspace("LOOP", cfg) as ws:
        x = ws.track(some_indarray_op())      # guarded: unusable after the scope closes
        kept = x.leverage()                   # or x.detach(): survives the scope
        print(ws.stats().current_size)

ND4J itself may crash or silently read reused memory when an array from a closed scope is
used; `ScopedArray` and `check_usable()` raise `WorkspaceScopeError` instead.
"""

from pyd4j.jvm.errors import WorkspaceScopeError
from pyd4j.workspaces.arrays import ScopedArray, check_usable, detach, leverage, scope_panic, scope_problem
from pyd4j.workspaces.config import (AllocationPolicy, DebugMode, LearningPolicy, LocationPolicy, MirroringPolicy,
                                     ResetPolicy, SpillPolicy, WorkspaceConfig, WorkspaceConfigError,
                                     WorkspaceConflictError)
from pyd4j.workspaces.knobs import GcSettings, debug_mode, gc_settings, get_debug_mode, get_gc, set_debug_mode, set_gc
from pyd4j.workspaces.modes import WorkspaceMode, get_workspace_mode, set_workspace_mode
from pyd4j.workspaces.scopes import (Workspace, WorkspaceStats, current_workspace, destroy, destroy_all,
                                     forget_collected, held_bytes, outside_workspaces, stats, workspace,
                                     workspace_names)

__all__ = [
    "AllocationPolicy", "DebugMode", "GcSettings", "LearningPolicy", "LocationPolicy", "MirroringPolicy",
    "ResetPolicy", "ScopedArray", "SpillPolicy", "Workspace", "WorkspaceConfig", "WorkspaceConfigError",
    "WorkspaceConflictError", "WorkspaceMode", "WorkspaceScopeError", "WorkspaceStats", "check_usable",
    "current_workspace", "debug_mode", "destroy", "destroy_all", "detach", "forget_collected", "gc_settings", "get_debug_mode",
    "held_bytes",
    "get_gc", "get_workspace_mode", "leverage", "outside_workspaces", "scope_panic", "scope_problem", "set_debug_mode",
    "set_gc", "set_workspace_mode", "stats", "workspace", "workspace_names",
]

