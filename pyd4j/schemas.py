"""The files pyd4j writes and reads, as typed, versioned contracts: the plan file, the agent's
timeline records (JSON lines), and the profile and tune documents (`--json`).

Each is a pydantic model that exports JSON Schema (`json_schemas()`) and carries `"schema": N`.
Readers validate what they read with `check()`, which refuses a document of another schema
version naming the version this pyd4j reads. The Java plan reader (org.pyd4j.train.PlanFile)
checks the same rules; tests/test_schemas.py feeds both the same documents.

A leaf module: it imports nothing of pyd4j.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

PLAN_SCHEMA = 2   # 2: nodes may be "sliced" (their steps run in pyd4j's two-pass, batch-sliced form)
OLDEST_PLAN_SCHEMA = 1   # schema 1 is schema 2 without sliced nodes: still read
TIMELINE_SCHEMA = 1
PROFILE_SCHEMA = 1
TUNE_SCHEMA = 1
DEVICES_SCHEMA = 1

JAVA_INT_MAX = 2**31 - 1
JAVA_LONG_MAX = 2**63 - 1

Count = Annotated[int, Field(ge=0, le=JAVA_INT_MAX)]
Bytes = Annotated[int, Field(ge=0, le=JAVA_LONG_MAX)]
OPS = ("ALLOC", "FREE", "OFFLOAD", "PREFETCH", "FORWARD", "BACKWARD", "RECOMPUTE", "MOVE")
COMPUTE = ("FORWARD", "BACKWARD", "RECOMPUTE")
KINDS = 5  # tensors per node: Y, DY, W, DW, M (pyd4j.sched.plan.Kind)


class SchemaError(ValueError):
    """A document that breaks its contract: names the file, what is wrong and the fix."""


class _Strict(BaseModel):
    """Numbers are numbers (no "5" or 5.0 for 5), as the Java reader sees them; other keys are kept."""

    model_config = ConfigDict(strict=True, extra="allow")


# ----------------------------------------------------------------------------- plan file

class PlanNetwork(_Strict):
    kind: Literal["MultiLayerNetwork", "ComputationGraph"]
    batch: Annotated[int, Field(ge=1, le=JAVA_INT_MAX)]
    dtype: str | None = None
    source: str | None = None


class PlanPredicted(_Strict):
    peak_bytes: Bytes | None = None
    device_peak_bytes: Bytes | None = None
    lower_bound_bytes: Bytes | None = None
    time_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] | Annotated[int, Field(ge=0)] | None = None


class PlanNode(_Strict):
    id: Count
    name: str = ""
    type: Annotated[str, Field(min_length=1)]
    dl4j: dict[str, Any]
    inputs: list[Count]
    shape: list[Annotated[int, Field(ge=1, le=JAVA_INT_MAX)]] = []
    y_bytes: Bytes = 0
    sliced: bool = False   # its steps run in pyd4j's batch-sliced form (org.pyd4j.train.SlicedBatchNorm)

    @model_validator(mode="after")
    def _dl4j_indices(self) -> "PlanNode":
        for key in ("layer", "input"):
            v = self.dl4j.get(key)
            if key in self.dl4j and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= JAVA_INT_MAX):
                raise ValueError(f"node {self.id} dl4j.{key} = {v!r} must be a whole number from 0")
        return self


class PlanDocument(_Strict):
    """The plan file DL4J's planned trainer runs (written by pyd4j.dl4j.plan_file.write_plan;
    its docstring explains the records)."""

    format: Literal["pyd4j-plan"]
    version: Annotated[int, Field(ge=1, le=1)]   # the format's own version, from before "schema"
    schema_: Annotated[int, Field(ge=OLDEST_PLAN_SCHEMA, le=PLAN_SCHEMA)] = Field(PLAN_SCHEMA, alias="schema")
    policy: Annotated[str, Field(min_length=1)]
    tensor_cache: bool = False
    budget_bytes: Annotated[int, Field(ge=1, le=JAVA_LONG_MAX)] | None = None
    network: PlanNetwork
    predicted: PlanPredicted | None = None
    nodes: Annotated[list[PlanNode], Field(min_length=1)]
    records: Annotated[list[list[Any]], Field(min_length=1)]

    @model_validator(mode="after")
    def _graph_and_records(self) -> "PlanDocument":
        n = len(self.nodes)
        for pos, node in enumerate(self.nodes):
            if node.sliced and self.schema_ < 2:
                raise ValueError(f"node {node.id} is sliced, which plan schema 2 has and this file's {self.schema_} does not")
            if node.id != pos:
                raise ValueError(f"node ids must be 0, 1, 2, ... in order; got {node.id} at position {pos}")
            for i in node.inputs:
                if i >= node.id:
                    raise ValueError(f"node {node.id} reads node {i}, which is not before it")
        for k, r in enumerate(self.records):
            if not 2 <= len(r) <= 3 or not isinstance(r[0], str):
                raise ValueError(f"record {k} is {r!r}; a record is [op, arg] or [op, arg, extra]")
            op, arg = r[0], r[1]
            if isinstance(arg, bool) or not isinstance(arg, int) or not 0 <= arg <= JAVA_INT_MAX:
                raise ValueError(f"record {k} argument {arg!r} must be a whole number from 0")
            extra = r[2] if len(r) == 3 else None
            if extra is not None and not (isinstance(extra, dict) or (isinstance(extra, int) and not isinstance(extra, bool))):
                raise ValueError(f"record {k} has a third element {extra!r}; a MOVE's source or {{'algo', 'chunks'}}")
            chunks = 1
            if isinstance(extra, dict):
                chunks = extra.get("chunks")
                if isinstance(chunks, bool) or not isinstance(chunks, int) or not 1 <= chunks <= JAVA_INT_MAX:
                    raise ValueError(f"record {k} chunks {chunks!r} must be a whole number from 1")
            if op not in OPS:
                raise ValueError(f"record {k} has operation {op!r}; the trainer runs {list(OPS)}")
            if op == "MOVE":
                chunks = 1
            if chunks > 1 and op not in COMPUTE:
                raise ValueError(f"record {k} ({op} {arg}) has chunks {chunks}; only compute records run in chunks")
            src = extra if op == "MOVE" and isinstance(extra, int) else -1
            limit = n if op in COMPUTE else (KINDS + 1) * n
            if arg >= limit or (op == "MOVE" and not 0 <= src < KINDS * n):
                raise ValueError(f"record {k} ({op} {arg}) names no {'node' if op in COMPUTE else 'tensor'} "
                                 f"of its {n} nodes")
            if op in ("OFFLOAD", "PREFETCH") and arg >= KINDS * n:
                raise ValueError(f"record {k} ({op} {arg}) moves what a layer keeps for its backward step")
        return self


# ----------------------------------------------------------------------------- timeline (JSONL)

Time = Annotated[float, Field(ge=-JAVA_LONG_MAX, le=JAVA_LONG_MAX, allow_inf_nan=False)] | \
    Annotated[int, Field(ge=-JAVA_LONG_MAX, le=JAVA_LONG_MAX)]
Amount = Annotated[float, Field(ge=0, le=JAVA_LONG_MAX, allow_inf_nan=False)] | Bytes


class TimelineStart(_Strict):
    """The agent's first line: who the JVM is and the limits it runs under."""

    type: Literal["start"]
    t: Time
    schema_: Annotated[int, Field(ge=TIMELINE_SCHEMA, le=TIMELINE_SCHEMA)] = Field(TIMELINE_SCHEMA, alias="schema")
    pid: int | None = None
    heap_max: Amount | None = None
    jvm_start: Time | None = None
    jvm_args: list[str] | None = None


class TimelineSample(_Strict):
    """One sample: `t` (ms since the epoch) and the series of pyd4j.profile.timeline.SERIES (bytes
    and counts, never negative, never past a Java long)."""

    type: Literal["sample"]
    t: Time
    rss: Amount | None = None
    heap_used: Amount | None = None
    heap_committed: Amount | None = None
    heap_max: Amount | None = None
    iterations: Amount | None = None


class TimelineGc(_Strict):
    type: Literal["gc"]
    t: Time


class TimelineIter(_Strict):
    type: Literal["iter"]
    t: Time
    n: Amount


class TimelineEpoch(_Strict):
    type: Literal["epoch"]
    t: Time
    epoch: Amount


class TimelineEnd(_Strict):
    type: Literal["end"]
    t: Time


class TimelinePlan(_Strict):
    """The agent's answer to a plan= (pyd4j.profile.diagnose reads `result` and `then`)."""

    type: Literal["plan"]
    t: Time | None = None
    file: str | None = None
    result: "PlanResult | None" = None
    then: Literal["fit", "exit"] | None = None


class PlanResult(_Strict):
    status: str | None = None
    reason: str | None = None


class TimelineNetwork(_Strict):
    """A network the job trained, described by the agent: its configuration (`conf`) and input shapes."""

    type: Literal["network"]
    t: Time | None = None
    network: "DescribedNetwork | None" = None


class DescribedNetwork(_Strict):
    conf: dict[str, Any] | None = None
    kind: str | None = None


class TimelinePlanStats(_Strict):
    type: Literal["plan_stats"]
    t: Time | None = None
    stats: dict[str, Any] | None = None


# the agent's plan records, validated before pyd4j.profile reads them (a line that fails is skipped, counted)
PLAN_RECORDS: dict[str, type[BaseModel]] = {"plan": TimelinePlan, "network": TimelineNetwork,
                                            "plan_stats": TimelinePlanStats}


class RunMeta(_Strict):
    """`run.json`: how `pyd4j profile` started the job and how it ended (the fields reports read)."""

    command: list[str] = []
    launcher: str | None = None
    returncode: int | None = None
    interrupted: bool = False
    stopped_by: str | None = None


class TimelineRecord(BaseModel):
    """Any line of the timeline; kinds other than these (notes, errors, live points) are free-form."""

    record: TimelineStart | TimelineSample | TimelineGc | TimelineIter | TimelineEpoch | TimelineEnd = \
        Field(discriminator="type")


# ----------------------------------------------------------------------------- profile and tune

class ProfileDocument(_Strict):
    """What `pyd4j profile --json` and `pyd4j report --json` print (pyd4j.profile.report.summary)."""

    schema_: Annotated[int, Field(ge=PROFILE_SCHEMA, le=PROFILE_SCHEMA)] = Field(PROFILE_SCHEMA, alias="schema")
    run_dir: str
    job: str
    exit_code: int | None
    samples: Count
    iterations: Amount
    peaks: dict[str, Amount | None]
    findings: list[dict[str, Any]]
    write_errors: list[dict[str, Any]]


class TuneRun(_Strict):
    """One run of a tune (its "before" or "after"), as far as `pyd4j report` reads it."""

    run_dir: str
    exit_code: int | None = None
    iterations: Amount | None = None
    iterations_per_s: Amount | None = None
    limits: dict[str, Amount | None] = {}
    peaks: dict[str, Amount | None] = {}
    findings: list[str] = []
    jvm_memory_flags: list[str] | None = None
    spark: dict[str, Any] | None = None


class TuneDocument(_Strict):
    """What `pyd4j tune --json` prints (pyd4j.profile.tune)."""

    schema_: Annotated[int, Field(ge=TUNE_SCHEMA, le=TUNE_SCHEMA)] = Field(TUNE_SCHEMA, alias="schema")
    exit_code: int | None = None
    recommended: list[str] | None = None
    recommended_environment: dict[str, str] | None = None
    out_dir: str | None = None
    before: TuneRun | None = None
    after: TuneRun | None = None
    notes: list[str] | None = None
    partial: bool | None = None
    verified: bool | None = None


# ----------------------------------------------------------------------------- device profiles

Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)] | Annotated[int, Field(gt=0)]
NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)] | Annotated[int, Field(ge=0)]


class DeviceEntry(_Strict):
    """One device of `pyd4j plan --devices` (pyd4j/sched/devices.json); every field optional, since a
    file may change only some numbers of a known device (a new device needs the required ones, checked
    by the reader). Documentation keys (source, published, calibration) are free-form."""

    model_config = ConfigDict(strict=True, extra="forbid")
    name: str | None = None
    memory_bytes: Annotated[int, Field(ge=1, le=JAVA_LONG_MAX)] | None = None
    tflops: Positive | None = None
    mem_gbps: Positive | None = None
    link_gbps: Positive | None = None
    disk_gbps: Positive | None = None
    efficiency: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] | Annotated[int, Field(ge=1, le=1)] | None = None
    step_overhead_s: NonNegative | None = None
    source: Any = None
    published: Any = None
    calibration: Any = None


class ConvAlgorithm(_Strict):
    model_config = ConfigDict(strict=True, extra="forbid")
    name: Annotated[str, Field(min_length=1)]
    speed: Positive
    workspace_im2col: NonNegative = 0
    workspace_fixed: Annotated[int, Field(ge=0, le=JAVA_LONG_MAX)] = 0
    workspace_index: bool = False
    only_kernel: Annotated[int, Field(ge=1, le=JAVA_INT_MAX)] | None = None
    only_stride: Annotated[int, Field(ge=1, le=JAVA_INT_MAX)] | None = None
    min_kernel: Annotated[int, Field(ge=1, le=JAVA_INT_MAX)] | None = None
    batch_chunks: Annotated[int, Field(ge=0, le=JAVA_INT_MAX)] = 0


class DevicesDocument(_Strict):
    """A device profiles file (`pyd4j plan --devices`), in the format of pyd4j/sched/devices.json."""

    model_config = ConfigDict(strict=True, extra="forbid")
    schema_: Annotated[int, Field(ge=DEVICES_SCHEMA, le=DEVICES_SCHEMA)] = Field(DEVICES_SCHEMA, alias="schema")
    devices: dict[str, DeviceEntry] = {}
    aliases: dict[str, str] = {}
    conv_algorithms: Annotated[list[ConvAlgorithm], Field(min_length=1)] | None = None
    compute_efficiency: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] | None = None
    transfer_latency_s: NonNegative | None = None
    host_memory_bytes: Annotated[int, Field(ge=1, le=JAVA_LONG_MAX)] | None = None
    comment_: Any = Field(None, alias="_comment")


MODELS: dict[str, type[BaseModel]] = {"plan": PlanDocument, "timeline": TimelineRecord,
                                      "profile": ProfileDocument, "tune": TuneDocument, "devices": DevicesDocument}
OLDEST_VERSIONS = {"plan": OLDEST_PLAN_SCHEMA}
VERSIONS = {"plan": PLAN_SCHEMA, "timeline": TIMELINE_SCHEMA, "profile": PROFILE_SCHEMA, "tune": TUNE_SCHEMA,
            "devices": DEVICES_SCHEMA}


def json_schemas() -> dict[str, dict[str, Any]]:
    """The JSON Schema of every contract, by name."""
    return {name: model.model_json_schema(by_alias=True) for name, model in MODELS.items()}


def check_version(kind: str, doc: Any, where: str, fix: str) -> None:
    """Refuses a `kind` document that says it is of another schema version than this pyd4j reads
    (one without "schema" is of the version before it was written, read as the current one)."""
    want = VERSIONS[kind]
    oldest = OLDEST_VERSIONS.get(kind, want)
    if isinstance(doc, dict) and "schema" in doc and (type(doc["schema"]) is not int or not oldest <= doc["schema"] <= want):
        reads = f"{kind} schema {want}" if oldest == want else f"{kind} schemas {oldest} to {want}"
        raise SchemaError(f"{where} has {kind} schema {doc['schema']!r}; this pyd4j reads {reads}: {fix}")


def check(kind: str, doc: Any, where: str, fix: str) -> Any:
    """`doc` validated as a `kind` document ("plan", "timeline", "profile", "tune"); SchemaError
    names `where`, what is wrong and `fix`. A document of another schema version is refused with
    the version this pyd4j reads."""
    check_version(kind, doc, where, fix)
    try:
        if kind == "timeline":
            return TimelineRecord.model_validate({"record": doc}).record
        return MODELS[kind].model_validate(doc)
    except ValidationError as err:
        first = err.errors()[0]
        at = ".".join(str(p) for p in first["loc"] if p != "record" and not _union_tag(p)) or "the document"
        raise SchemaError(f"{where} is not a valid {kind} document: {at}: {first['msg']} "
                          f"(got {_short(first.get('input'))}); {fix}") from None


def _union_tag(part: Any) -> bool:
    """pydantic's name of a union member in an error's location (int, constrained-float, ...), not a field."""
    return isinstance(part, str) and (part in ("int", "float", "str", "bool", "none")
                                      or part.startswith(("constrained-", "function-", "lax-", "strict-")))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


__all__ = ["MODELS", "PlanDocument", "ProfileDocument", "SchemaError", "TimelineRecord", "TuneDocument",
           "check", "check_version", "json_schemas"]
