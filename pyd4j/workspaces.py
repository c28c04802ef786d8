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

from __future__ import annotations

import contextlib
import dataclasses
import enum
import json
import math
import os
from dataclasses import dataclass
from typing import Any, Iterator

import pyd4j.jvm
from pyd4j.jvm.errors import WorkspaceScopeError, java_errors
from pyd4j.units import SizeError, parse_bytes

_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1


class AllocationPolicy(str, enum.Enum):
    """How a learned workspace is sized: exactly (STRICT) or with `overallocation_limit` headroom."""
    STRICT = "STRICT"
    OVERALLOCATE = "OVERALLOCATE"


class LearningPolicy(str, enum.Enum):
    """When ND4J sizes the workspace from what a loop used: after the first loop, after
    `cycles_before_initialization` loops (OVER_TIME), or never (NONE: `initial_size` only)."""
    FIRST_LOOP = "FIRST_LOOP"
    OVER_TIME = "OVER_TIME"
    NONE = "NONE"


class MirroringPolicy(str, enum.Enum):
    """CUDA only: keep a host mirror of device memory (FULL) or host memory only (HOST_ONLY)."""
    FULL = "FULL"
    HOST_ONLY = "HOST_ONLY"


class SpillPolicy(str, enum.Enum):
    """What happens when a loop needs more than the workspace holds: allocate outside
    (EXTERNAL), outside and grow next time (REALLOCATE), or throw (FAIL)."""
    EXTERNAL = "EXTERNAL"
    REALLOCATE = "REALLOCATE"
    FAIL = "FAIL"


class ResetPolicy(str, enum.Enum):
    """Rewind at every scope exit (BLOCK_LEFT) or only when the buffer end is reached
    (ENDOFBUFFER_REACHED: a circular workspace, as AsyncDataSetIterator uses)."""
    BLOCK_LEFT = "BLOCK_LEFT"
    ENDOFBUFFER_REACHED = "ENDOFBUFFER_REACHED"


class LocationPolicy(str, enum.Enum):
    """Workspace memory in RAM, or in a memory-mapped file (MMAP) for arrays larger than RAM."""
    RAM = "RAM"
    MMAP = "MMAP"


class DebugMode(str, enum.Enum):
    """Workspace manager debug modes: SPILL_EVERYTHING allocates every array outside the
    workspace (finds out-of-scope use), BYPASS_EVERYTHING ignores workspaces altogether."""
    DISABLED = "DISABLED"
    SPILL_EVERYTHING = "SPILL_EVERYTHING"
    BYPASS_EVERYTHING = "BYPASS_EVERYTHING"


class WorkspaceConfigError(ValueError):
    """A WorkspaceConfig that ND4J would refuse (`enforced_by == "nd4j"`) or that pyd4j refuses
    because ND4J would misbehave silently (`enforced_by == "pyd4j"`). `rule` names the check."""

    def __init__(self, message: str, rule: str, enforced_by: str) -> None:
        super().__init__(message)
        self.rule = rule
        self.enforced_by = enforced_by


class WorkspaceConflictError(RuntimeError):
    """A workspace of that name exists on this thread with another configuration."""


# Python field -> (Java name, kind). The order is ND4J's builder order.
_FIELDS: dict[str, tuple[str, Any]] = {
    "initial_size": ("initialSize", "size"),
    "min_size": ("minSize", "size"),
    "max_size": ("maxSize", "size"),
    "overallocation_limit": ("overallocationLimit", float),
    "cycles_before_initialization": ("cyclesBeforeInitialization", int),
    "steps_number": ("stepsNumber", int),
    "temp_file_path": ("tempFilePath", str),
    "policy_allocation": ("policyAllocation", AllocationPolicy),
    "policy_learning": ("policyLearning", LearningPolicy),
    "policy_mirroring": ("policyMirroring", MirroringPolicy),
    "policy_spill": ("policySpill", SpillPolicy),
    "policy_reset": ("policyReset", ResetPolicy),
    "policy_location": ("policyLocation", LocationPolicy),
}
_JAVA_TO_PY = {java: py for py, (java, _) in _FIELDS.items()}
_ENUM_PACKAGE = "org.nd4j.linalg.api.memory.enums"


@dataclass(frozen=True)
class WorkspaceConfig:
    """Every field of ND4J's `WorkspaceConfiguration`, with ND4J's defaults, validated on creation.

    Sizes are bytes and accept '16m'-style strings. Enum fields accept the enum or its name.
    Checks ND4J makes when the workspace is created (`enforced_by="nd4j"`):
      - circular (ResetPolicy ENDOFBUFFER_REACHED) + OVERALLOCATE needs overallocation_limit >= 1
      - MMAP needs LearningPolicy NONE
      - MMAP needs temp_file_path or initial_size > 0 (an existing non-empty file also does)
      - int fields fit a Java int, sizes a Java long
    Checks pyd4j adds (`enforced_by="pyd4j"`; ND4J accepts these and then misbehaves):
      - sizes, overallocation_limit and counts are >= 0 (negative sizes corrupt offsets)
      - min_size <= max_size when max_size > 0 (ND4J would apply min after max, breaking max)
      - OVER_TIME needs cycles_before_initialization >= 1 (with 0 the workspace never learns)
    """

    initial_size: int = 0
    min_size: int = 0
    max_size: int = 0
    overallocation_limit: float = 0.3
    cycles_before_initialization: int = 0
    steps_number: int = 2
    temp_file_path: str | None = None
    policy_allocation: AllocationPolicy = AllocationPolicy.OVERALLOCATE
    policy_learning: LearningPolicy = LearningPolicy.FIRST_LOOP
    policy_mirroring: MirroringPolicy = MirroringPolicy.FULL
    policy_spill: SpillPolicy = SpillPolicy.EXTERNAL
    policy_reset: ResetPolicy = ResetPolicy.BLOCK_LEFT
    policy_location: LocationPolicy = LocationPolicy.RAM

    def __post_init__(self) -> None:
        for name, (java_name, kind) in _FIELDS.items():
            value = getattr(self, name)
            object.__setattr__(self, name, _coerce(name, java_name, kind, value))
        for rule, enforced_by, message in _violations(self):
            raise WorkspaceConfigError(message, rule, enforced_by)

    # ---- round trips -------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Plain types only (enum names as strings), snake_case keys."""
        out: dict[str, Any] = {}
        for name in _FIELDS:
            value = getattr(self, name)
            out[name] = value.value if isinstance(value, enum.Enum) else value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "WorkspaceConfig":
        """Accepts our snake_case keys or ND4J's camelCase names (initialSize, policyLearning...)."""
        if not isinstance(data, dict):
            raise WorkspaceConfigError(f"a WorkspaceConfig is read from a mapping of fields, not a {type(data).__name__}",
                                       rule="known_fields", enforced_by="pyd4j")
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            name = key if key in _FIELDS else _JAVA_TO_PY.get(key)
            if name is None:
                known = ", ".join(_FIELDS)
                raise WorkspaceConfigError(
                    f"unknown WorkspaceConfig field {key!r}; known fields: {known} "
                    f"(or their ND4J names, e.g. initialSize)", rule="known_fields", enforced_by="pyd4j")
            if name in kwargs:
                raise WorkspaceConfigError(f"field {name!r} given twice (as {key!r} too); keep one",
                                           rule="known_fields", enforced_by="pyd4j")
            kwargs[name] = value
        return cls(**kwargs)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=False)

    @classmethod
    def from_json(cls, text: str) -> "WorkspaceConfig":
        from pyd4j.inputs import InputError, parse_json  # noqa: PLC0415

        try:
            return cls.from_dict(parse_json(text, "WorkspaceConfig JSON"))
        except InputError as err:
            raise WorkspaceConfigError(str(err), rule="types", enforced_by="pyd4j") from None

    def to_yaml(self) -> str:
        import yaml  # noqa: PLC0415

        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    @classmethod
    def from_yaml(cls, text: str) -> "WorkspaceConfig":
        import yaml  # noqa: PLC0415

        try:
            data = yaml.safe_load(text)
        except (yaml.YAMLError, RecursionError, TypeError) as err:
            raise WorkspaceConfigError(f"WorkspaceConfig YAML cannot be read: {err}", rule="types",
                                       enforced_by="pyd4j") from None
        if not isinstance(data, dict):
            raise WorkspaceConfigError(f"YAML must hold a mapping of fields, got {type(data).__name__}",
                                       rule="known_fields", enforced_by="pyd4j")
        return cls.from_dict(data)

    def replace(self, **changes: Any) -> "WorkspaceConfig":
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_java(self):
        """ND4J's WorkspaceConfiguration (needs the JVM: pyd4j.jvm.start())."""
        import jpype  # noqa: PLC0415

        pyd4j.jvm.info()
        builder = jpype.JClass("org.nd4j.linalg.api.memory.conf.WorkspaceConfiguration").builder()
        for name, (java_name, kind) in _FIELDS.items():
            value = getattr(self, name)
            if isinstance(value, enum.Enum):
                value = getattr(jpype.JClass(f"{_ENUM_PACKAGE}.{type(value).__name__}"), value.value)
            elif kind == "size":
                value = jpype.JLong(value)
            elif kind is int:
                value = jpype.JInt(value)
            elif kind is float:
                value = jpype.JDouble(value)
            getattr(builder, java_name)(value)
        return builder.build()

    @classmethod
    def from_java(cls, conf) -> "WorkspaceConfig":
        """From an ND4J WorkspaceConfiguration (e.g. one a DL4J network built)."""
        kwargs: dict[str, Any] = {}
        for name, (java_name, kind) in _FIELDS.items():
            value = getattr(conf, "get" + java_name[0].upper() + java_name[1:])()
            if value is None:
                kwargs[name] = None
            elif isinstance(kind, type) and issubclass(kind, enum.Enum):
                kwargs[name] = kind(str(value.name()))
            elif kind is float:
                kwargs[name] = float(value)
            elif kind is str:
                kwargs[name] = str(value)
            else:
                kwargs[name] = int(value)
        return cls(**kwargs)


def _coerce(name: str, java_name: str, kind: Any, value: Any) -> Any:
    if kind == "size":
        if isinstance(value, float) and not value.is_integer():
            raise WorkspaceConfigError(f"{name}={value!r} is not a whole number of bytes; give an int or '16m'",
                                       rule="types", enforced_by="pyd4j")
        if isinstance(value, int) and not isinstance(value, bool) and value < 0:
            raise WorkspaceConfigError(
                f"{name}={value} is negative; ND4J accepts it but then computes negative offsets. "
                f"Use 0 (= no limit / learn it) or a positive size", rule="non_negative", enforced_by="pyd4j")
        try:
            size = parse_bytes(value, what=name)
        except SizeError as err:
            raise WorkspaceConfigError(str(err), rule="types", enforced_by="pyd4j") from None
        if size > _LONG_MAX:
            raise WorkspaceConfigError(f"{name}={size} exceeds a Java long ({_LONG_MAX}); ND4J's {java_name} is a long",
                                       rule="java_range", enforced_by="nd4j")
        return size
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        if isinstance(value, kind):
            return value
        try:
            return kind(str(value.value if isinstance(value, enum.Enum) else value).upper())
        except ValueError:
            names = ", ".join(m.value for m in kind)
            raise WorkspaceConfigError(f"{name}={value!r} is not a {kind.__name__}; use one of {names}",
                                       rule="types", enforced_by="pyd4j") from None
    if kind is str:
        if value is not None and not isinstance(value, (str, os.PathLike)):
            raise WorkspaceConfigError(f"{name}={value!r} must be a file path or None", rule="types", enforced_by="pyd4j")
        path = None if value is None else os.fspath(value)
        if isinstance(path, str):
            try:
                path.encode("utf-8")
            except UnicodeEncodeError:
                raise WorkspaceConfigError(f"{name}={path!r} holds characters no file name can (lone UTF-16 surrogates); "
                                           f"give the path as text of real characters", rule="types",
                                           enforced_by="pyd4j") from None
        return path
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise WorkspaceConfigError(f"{name}={value!r} must be a finite number, e.g. 0.3", rule="types",
                                       enforced_by="pyd4j")
        return float(value)
    # Java int
    if isinstance(value, bool) or not isinstance(value, int):
        raise WorkspaceConfigError(f"{name}={value!r} must be an int", rule="types", enforced_by="pyd4j")
    if value > _INT_MAX:
        raise WorkspaceConfigError(f"{name}={value} exceeds a Java int ({_INT_MAX}); ND4J's {java_name} is an int",
                                   rule="java_range", enforced_by="nd4j")
    return value


def _violations(cfg: WorkspaceConfig) -> Iterator[tuple[str, str, str]]:
    """(rule, enforced_by, message) for each broken rule, ND4J's first."""
    if (cfg.policy_reset is ResetPolicy.ENDOFBUFFER_REACHED
            and cfg.policy_allocation is AllocationPolicy.OVERALLOCATE and cfg.overallocation_limit < 1.0):
        yield ("circular_overallocation", "nd4j",
               f"overallocation_limit={cfg.overallocation_limit} is below 1.0, and a circular workspace "
               f"(policy_reset=ENDOFBUFFER_REACHED) with policy_allocation=OVERALLOCATE needs >= 1.0 "
               f"(ND4J: 'For cyclic workspace overallocation should be positive integral value'); "
               f"set overallocation_limit to 1.0 or more, or policy_allocation=STRICT")
    if cfg.policy_location is LocationPolicy.MMAP and cfg.policy_learning is not LearningPolicy.NONE:
        yield ("mmap_learning", "nd4j",
               f"policy_learning={cfg.policy_learning.value} with policy_location=MMAP: a memory-mapped "
               f"workspace has a fixed size, ND4J requires policy_learning=NONE; set it, or use RAM")
    if cfg.policy_location is LocationPolicy.MMAP and cfg.temp_file_path is None and cfg.initial_size <= 0:
        yield ("mmap_size", "nd4j",
               "policy_location=MMAP with initial_size=0 and no temp_file_path: ND4J needs a file or a "
               "size for the mapping; set initial_size (e.g. '1g') or temp_file_path")
    if cfg.overallocation_limit < 0:
        yield ("non_negative", "pyd4j",
               f"overallocation_limit={cfg.overallocation_limit} is negative; use 0 (none) or more, e.g. 0.3")
    for name in ("cycles_before_initialization", "steps_number"):
        if getattr(cfg, name) < 0:
            yield ("non_negative", "pyd4j", f"{name}={getattr(cfg, name)} is negative; use 0 or more")
    if cfg.max_size > 0 and cfg.min_size > cfg.max_size:
        yield ("min_le_max", "pyd4j",
               f"min_size={cfg.min_size} is larger than max_size={cfg.max_size}; ND4J would apply min_size "
               f"after max_size and exceed max_size. Lower min_size or raise max_size (0 = no maximum)")
    if cfg.policy_learning is LearningPolicy.OVER_TIME and cfg.cycles_before_initialization < 1:
        yield ("over_time_cycles", "pyd4j",
               "policy_learning=OVER_TIME with cycles_before_initialization=0: ND4J counts cycles from 1, "
               "so the workspace would never be sized; set cycles_before_initialization >= 1")


def _check_creatable(cfg: WorkspaceConfig) -> None:
    """The file-dependent ND4J rule, checked when a workspace is about to be created."""
    if cfg.policy_location is LocationPolicy.MMAP and cfg.temp_file_path is not None and cfg.initial_size <= 0:
        size = os.path.getsize(cfg.temp_file_path) if os.path.exists(cfg.temp_file_path) else 0
        if size == 0:
            raise WorkspaceConfigError(
                f"temp_file_path={cfg.temp_file_path!r} is missing or empty and initial_size=0: ND4J needs a "
                f"positive length for the memory-mapped file; set initial_size or point at a non-empty file",
                rule="mmap_size", enforced_by="nd4j")


# ---- scopes ----------------------------------------------------------------------------------


def _nd4j():
    import jpype  # noqa: PLC0415

    pyd4j.jvm.info()
    return jpype.JClass("org.nd4j.linalg.factory.Nd4j")


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
    nd4j = _nd4j()
    manager = nd4j.getWorkspaceManager()
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
            _check_creatable(cfg)
        java_ws = manager.getAndActivateWorkspace(cfg.to_java(), name)
    scope = Workspace(name, cfg, java_ws)
    try:
        yield scope
    finally:
        with java_errors():
            java_ws.close()


def current_workspace() -> str | None:
    """Name of the workspace whose scope is open on this thread, or None."""
    ws = _nd4j().getMemoryManager().getCurrentWorkspace()
    return None if ws is None else str(ws.getId())


def workspace_names() -> list[str]:
    """Names of this thread's workspaces (open or not)."""
    return [str(n) for n in _nd4j().getWorkspaceManager().getAllWorkspacesIdsForCurrentThread()]


def destroy(name: str) -> None:
    """Free this thread's workspace `name` (its arrays become unusable)."""
    manager = _nd4j().getWorkspaceManager()
    if manager.checkIfWorkspaceExists(name):
        manager.destroyWorkspace(manager.getWorkspaceForCurrentThread(name))
    forget_collected()


def destroy_all() -> None:
    """Free every workspace of this thread, one by one: ND4J's destroyAllWorkspacesForCurrentThread()
    adds a System.gc() (a full collection, 0.2-0.4 s) that freeing them does not need."""
    manager = _nd4j().getWorkspaceManager()
    for ws in list(manager.getAllWorkspacesForCurrentThread()):
        manager.destroyWorkspace(ws)
    forget_collected()


def held_bytes() -> int:
    """Bytes this thread's workspaces hold now (their current sizes)."""
    return sum(int(ws.getCurrentSize()) for ws in _nd4j().getWorkspaceManager().getAllWorkspacesForCurrentThread())


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
    entries = _REFERENCE_MAP.get(_nd4j().getDeallocatorService()).entrySet().iterator()
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
    scope = _nd4j().getWorkspaceManager().scopeOutOfWorkspaces()
    try:
        yield
    finally:
        scope.close()


# ---- arrays and their scopes -----------------------------------------------------------------


def scope_problem(array) -> str | None:
    """Why `array` (an INDArray) must not be used now, or None if it is safe.

    An attached array is safe while the workspace that holds it is open in the same generation
    (ND4J bumps the generation every time the scope is entered and re-uses the memory).
    """
    if array is None:
        return "array is None"
    if not bool(array.isAttached()):
        return None
    buffer = array.data()
    if bool(buffer.wasClosed()):
        return "its buffer was closed"
    ws = buffer.getParentWorkspace()
    if ws is None:
        return None
    name = str(ws.getId())
    if not bool(ws.isScopeActive()):
        return f"workspace {name!r} was closed (generation {int(buffer.getGenerationId())})"
    if int(ws.getGenerationId()) != int(buffer.getGenerationId()):
        return (f"workspace {name!r} was closed and re-opened since the array was made "
                f"(array generation {int(buffer.getGenerationId())}, workspace now {int(ws.getGenerationId())}); "
                f"its memory now holds other arrays")
    return None


def check_usable(array) -> None:
    """Raise WorkspaceScopeError if `array` lives in a workspace scope that has closed."""
    problem = scope_problem(array)
    if problem is not None:
        raise WorkspaceScopeError(
            f"this INDArray cannot be used: {problem}. Keep it with .leverage() (to the parent "
            f"workspace) or .detach() (out of workspaces) before the scope closes")


def _unwrap(array):
    return array.java if isinstance(array, ScopedArray) else array


def leverage(array) -> "ScopedArray":
    """Move an array to the enclosing (parent) workspace, or out of workspaces if none."""
    raw = _unwrap(array)
    check_usable(raw)
    return ScopedArray(raw.leverage())


def detach(array) -> "ScopedArray":
    """Copy an array out of all workspaces: it lives until Java's GC frees it."""
    raw = _unwrap(array)
    check_usable(raw)
    return ScopedArray(raw.detach())


class ScopedArray:
    """An INDArray guarded against use after its workspace scope closed.

    Attribute access forwards to the INDArray (`x.sumNumber()`, `x.shape()`) after the check;
    `.java` gives the checked INDArray to pass to Java.
    """

    __slots__ = ("_array",)

    def __init__(self, array) -> None:
        self._array = _unwrap(array)

    @property
    def java(self):
        check_usable(self._array)
        return self._array

    @property
    def usable(self) -> bool:
        return scope_problem(self._array) is None

    @property
    def attached(self) -> bool:
        return bool(self._array.isAttached())

    @property
    def workspace_name(self) -> str | None:
        ws = self._array.data().getParentWorkspace() if self._array.isAttached() else None
        return None if ws is None else str(ws.getId())

    def leverage(self) -> "ScopedArray":
        return leverage(self._array)

    def detach(self) -> "ScopedArray":
        return detach(self._array)

    def to_numpy(self):
        """A numpy view (pyd4j.nd); valid only while the array is usable, so prefer detach() first."""
        from pyd4j.nd import to_numpy  # noqa: PLC0415

        return to_numpy(self.java)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.java, name)

    def __repr__(self) -> str:
        problem = scope_problem(self._array)
        if problem:
            return f"ScopedArray(<unusable: {problem}>)"
        return f"ScopedArray(shape={list(self._array.shape())}, workspace={self.workspace_name!r})"


@contextlib.contextmanager
def scope_panic() -> Iterator[None]:
    """ND4J's SCOPE_PANIC profiling mode for the block: any op reading an array from a closed
    workspace scope raises WorkspaceScopeError, for raw INDArrays too (not only ScopedArray).

    ND4J 1.0.0-M2.1 starts in SCOPE_PANIC; code that switched profiling to another mode (e.g.
    OPERATIONS) loses the check, and then a stale array reads re-used memory silently. This
    block makes sure the check is on (pyd4j.jvm.java_errors turns ND4J's complaint into
    WorkspaceScopeError); the previous mode is restored after."""
    import jpype  # noqa: PLC0415

    executioner = _nd4j().getExecutioner()
    modes = jpype.JClass("org.nd4j.linalg.api.ops.executioner.OpExecutioner$ProfilingMode")
    previous = executioner.getProfilingMode()
    executioner.setProfilingMode(modes.SCOPE_PANIC)
    try:
        with java_errors():
            yield
    finally:
        executioner.setProfilingMode(previous)


# ---- debug and GC knobs ----------------------------------------------------------------------


def get_debug_mode() -> DebugMode:
    return DebugMode(str(_nd4j().getWorkspaceManager().getDebugMode().name()))


def set_debug_mode(mode: DebugMode | str) -> None:
    import jpype  # noqa: PLC0415

    value = _coerce("debug_mode", "debugMode", DebugMode, mode)
    java_mode = getattr(jpype.JClass(f"{_ENUM_PACKAGE}.DebugMode"), value.value)
    _nd4j().getWorkspaceManager().setDebugMode(java_mode)


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
    mm = _nd4j().getMemoryManager()
    return GcSettings(periodic_gc=bool(mm.isPeriodicGcActive()),
                      occasional_gc_frequency_ms=int(mm.getOccasionalGcFrequency()),
                      auto_gc_window_ms=int(mm.getAutoGcWindow()))


def set_gc(periodic_gc: bool | None = None, occasional_gc_frequency_ms: int | None = None,
           auto_gc_window_ms: int | None = None) -> GcSettings:
    """Change the given knobs, keep the others; returns the settings now in force."""
    mm = _nd4j().getMemoryManager()
    for name, value in (("occasional_gc_frequency_ms", occasional_gc_frequency_ms),
                        ("auto_gc_window_ms", auto_gc_window_ms)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _INT_MAX):
            raise ValueError(f"{name}={value!r} must be an int of milliseconds in 0..{_INT_MAX}")
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


# ---- network workspace modes -----------------------------------------------------------------


class WorkspaceMode(str, enum.Enum):
    """DL4J's per-network workspace mode: ENABLED (workspaces for activations and gradients)
    or NONE (every array allocated and freed by GC)."""
    ENABLED = "ENABLED"
    NONE = "NONE"


def _net_conf(net):
    if hasattr(net, "getLayerWiseConfigurations"):
        return net.getLayerWiseConfigurations()
    if hasattr(net, "getConfiguration"):
        return net.getConfiguration()
    raise TypeError(f"{type(net).__name__} is not a DL4J MultiLayerNetwork or ComputationGraph")


def set_workspace_mode(net, training: WorkspaceMode | str | None = None,
                       inference: WorkspaceMode | str | None = None) -> None:
    """Set a MultiLayerNetwork's or ComputationGraph's training/inference workspace mode.

    Set before fit(); DL4J reads the mode at each fit/output call.
    """
    import jpype  # noqa: PLC0415

    conf = _net_conf(net)
    java_enum = jpype.JClass("org.deeplearning4j.nn.conf.WorkspaceMode")
    if training is not None:
        mode = _coerce("training", "trainingWorkspaceMode", WorkspaceMode, training)
        conf.setTrainingWorkspaceMode(getattr(java_enum, mode.value))
    if inference is not None:
        mode = _coerce("inference", "inferenceWorkspaceMode", WorkspaceMode, inference)
        conf.setInferenceWorkspaceMode(getattr(java_enum, mode.value))


def get_workspace_mode(net) -> dict[str, WorkspaceMode]:
    conf = _net_conf(net)
    return {"training": WorkspaceMode(str(conf.getTrainingWorkspaceMode().name())),
            "inference": WorkspaceMode(str(conf.getInferenceWorkspaceMode().name()))}


__all__ = [
    "AllocationPolicy", "DebugMode", "GcSettings", "LearningPolicy", "LocationPolicy", "MirroringPolicy",
    "ResetPolicy", "ScopedArray", "SpillPolicy", "Workspace", "WorkspaceConfig", "WorkspaceConfigError",
    "WorkspaceConflictError", "WorkspaceMode", "WorkspaceScopeError", "WorkspaceStats", "check_usable",
    "current_workspace", "debug_mode", "destroy", "destroy_all", "detach", "forget_collected", "gc_settings", "get_debug_mode",
    "held_bytes",
    "get_gc", "get_workspace_mode", "leverage", "outside_workspaces", "scope_panic", "scope_problem", "set_debug_mode",
    "set_gc", "set_workspace_mode", "stats", "workspace", "workspace_names",
]
