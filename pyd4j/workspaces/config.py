"""ND4J's WorkspaceConfiguration from Python: every field and enum, checked before ND4J sees them
(ND4J would crash or silently misbehave on some), to and from dict, JSON, YAML and Java."""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import os
from dataclasses import dataclass
from typing import Any, Iterator

import pyd4j.jvm
from pyd4j.units import SizeError, parse_bytes

INT_MAX = 2**31 - 1
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
ENUM_PACKAGE = "org.nd4j.linalg.api.memory.enums"


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
            object.__setattr__(self, name, coerce(name, java_name, kind, value))
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
                value = getattr(jpype.JClass(f"{ENUM_PACKAGE}.{type(value).__name__}"), value.value)
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


def coerce(name: str, java_name: str, kind: Any, value: Any) -> Any:
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
    if value > INT_MAX:
        raise WorkspaceConfigError(f"{name}={value} exceeds a Java int ({INT_MAX}); ND4J's {java_name} is an int",
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


def check_creatable(cfg: WorkspaceConfig) -> None:
    """The file-dependent ND4J rule, checked when a workspace is about to be created."""
    if cfg.policy_location is LocationPolicy.MMAP and cfg.temp_file_path is not None and cfg.initial_size <= 0:
        size = os.path.getsize(cfg.temp_file_path) if os.path.exists(cfg.temp_file_path) else 0
        if size == 0:
            raise WorkspaceConfigError(
                f"temp_file_path={cfg.temp_file_path!r} is missing or empty and initial_size=0: ND4J needs a "
                f"positive length for the memory-mapped file; set initial_size or point at a non-empty file",
                rule="mmap_size", enforced_by="nd4j")

