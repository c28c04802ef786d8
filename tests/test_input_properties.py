"""Property tests of the pure parts that take user input: whatever they are given, they return a
result that keeps its invariants or raise their own clean error, never anything else.

Sizes, flags from any estimate, the batch search, WorkspaceConfig from dict/JSON/YAML, the DL4J
JSON readers (planner and estimate), JSON nesting and timeline lines. No JVM.
"""

from __future__ import annotations

import copy
import json
import math
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from pyd4j.inputs import JAVA_INT_MAX, JAVA_LONG_MAX, InputError, json_depth, parse_json
from pyd4j.dl4j.config import ConfigurationError, check_document
from pyd4j.dl4j.input_types import check_input_spec, derive_inputs, parse_input_spec, read_sidecar
from pyd4j.memory.estimate import HEAP_MIN_BYTES, Estimate, EstimateError, Term
from pyd4j.memory.flags import JVM_FILE_PAGES, BudgetError, flags, largest_batch
from pyd4j.profile.timeline import SERIES, Timeline
from pyd4j.dl4j.graph import graph_from_dl4j_json
from pyd4j.sched.graph import GraphError
from pyd4j.units import SizeError, jvm_size, parse_bytes
from pyd4j.workspaces import WorkspaceConfig, WorkspaceConfigError

ROOT = Path(__file__).resolve().parents[1]
NETWORKS = sorted((ROOT / "examples" / "networks").glob("*.json"))
CONFIGS = {p.stem: json.loads(p.read_text()) for p in NETWORKS if not p.name.endswith(".input.json")}
SIDECARS = {p.name[: -len(".input.json")]: json.loads(p.read_text()) for p in NETWORKS if p.name.endswith(".input.json")}

MANY = settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
SOME = settings(max_examples=120, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                         st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                                 st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                           max_leaves=12)


# ----------------------------------------------------------------------------- sizes

@MANY
@given(st.one_of(st.text(max_size=40), st.integers(min_value=-(2**80), max_value=2**80),
                 st.floats(allow_nan=True, allow_infinity=True), st.booleans()))
def test_parse_bytes_gives_a_java_long_or_a_size_error(value):
    try:
        n = parse_bytes(value)
    except SizeError as err:
        assert str(err)
        return
    assert isinstance(n, int) and 0 <= n <= JAVA_LONG_MAX


@MANY
@given(st.decimals(min_value=0, max_value=10**25, places=3, allow_nan=False, allow_infinity=False),
       st.sampled_from(["", "b", "k", "KiB", "m", "MB", "g", "GiB", "t", "TB"]))
def test_parse_bytes_matches_exact_arithmetic(number, unit):
    scale = {"": 1, "b": 1, "k": 2**10, "kib": 2**10, "m": 2**20, "mb": 2**20, "g": 2**30, "gib": 2**30,
             "t": 2**40, "tb": 2**40}[unit.lower()]
    expected = int(Decimal(number) * scale)
    text = f"{number:f}{unit}"
    if expected > JAVA_LONG_MAX:
        with pytest.raises(SizeError, match="Java long"):
            parse_bytes(text)
    else:
        assert parse_bytes(text) == expected


@MANY
@given(st.integers(min_value=0, max_value=JAVA_LONG_MAX))
def test_jvm_size_round_trips(n):
    assert parse_bytes(jvm_size(n)) == n


# ----------------------------------------------------------------------------- flags from any estimate

terms = st.lists(st.builds(Term, name=st.sampled_from(["a", "b", "c", "java_heap", "jvm_native"]),
                           region=st.sampled_from(["offheap", "heap", "native"]),
                           source=st.sampled_from(["dl4j-report", "measured", "estimate"]),
                           fixed_bytes=st.integers(min_value=-(2**40), max_value=2**62),
                           per_sample_bytes=st.integers(min_value=-(2**20), max_value=2**40),
                           why=st.just("generated")), min_size=0, max_size=6)


@st.composite
def estimates(draw) -> Estimate:
    return Estimate(model="generated", model_kind="MultiLayerNetwork", batch=draw(st.integers(1, JAVA_INT_MAX)),
                    dtype="float32", mode="train", inputs=(), parameter_count=0, layer_count=1,
                    terms=tuple(draw(terms)), workspace_overallocation=0.3, prefetch_queue=2)


budgets = st.one_of(st.integers(min_value=1, max_value=JAVA_LONG_MAX), st.sampled_from(["1k", "512m", "8g", "1t"]))
headrooms = st.one_of(st.floats(min_value=0, max_value=4), st.floats(allow_nan=True, allow_infinity=True))


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(estimates(), budgets, headrooms)
def test_flags_from_any_estimate_are_sound_or_refused(est, total, headroom):
    try:
        fs = flags(est, total=total, headroom=headroom)
    except BudgetError as err:
        assert err.needed_bytes > err.budget_bytes > 0
        return
    except EstimateError as err:
        assert str(err)
        return
    assert 0 <= headroom <= 4
    assert all(t.bytes_at(est.batch) >= 0 for t in est.terms)  # a negative term is always refused
    assert all(f.bytes > 0 for f in fs.flags)
    assert fs.heap_bytes >= HEAP_MIN_BYTES
    # maxphysicalbytes holds the heap, direct memory and the whole estimate off the heap (without headroom), less
    # the JVM's file-backed pages, part of its native memory, which JavaCPP does not count; and sits under the
    # container limit
    file_pages = min(JVM_FILE_PAGES, est.native_bytes)
    assert fs.heap_bytes + fs.max_direct_bytes + est.offheap_bytes + est.native_bytes - file_pages <= fs.maxphysicalbytes \
        < fs.container_bytes
    assert fs.container_bytes <= min(JAVA_LONG_MAX, parse_bytes(total))
    args = fs.args()
    assert args[0] == f"-Xms{jvm_size(fs.heap_bytes)}" and args[1] == f"-Xmx{jvm_size(fs.heap_bytes)}"
    for arg in args:  # every value is a positive number the JVM reads
        value = arg.split("=", 1)[1] if "=" in arg else arg[4:]
        assert parse_bytes(value) > 0, arg


@SOME
@given(estimates(), st.integers(min_value=2**26, max_value=2**44), st.floats(min_value=0, max_value=1))
def test_batch_search_finds_the_largest_batch_that_fits(est, total, headroom):
    assume(est.terms)
    est = Estimate(**{**est.__dict__, "batch": 1,
                      "terms": tuple(Term(t.name, t.region, t.source, abs(t.fixed_bytes) % 2**36,
                                          abs(t.per_sample_bytes) % 2**24, t.why) for t in est.terms)})
    best = largest_batch(est, total=total, headroom=headroom)

    def fits(b: int) -> bool:
        try:
            flags(est.at_batch(b), total=total, headroom=headroom)
            return True
        except BudgetError:
            return False

    assert best >= 0
    if best:
        assert fits(best)
    if best < 1 << 24:
        assert not fits(best + 1)


# ----------------------------------------------------------------------------- WorkspaceConfig

field_names = st.sampled_from(["initial_size", "min_size", "max_size", "overallocation_limit",
                               "cycles_before_initialization", "steps_number", "temp_file_path", "policy_allocation",
                               "policy_learning", "policy_mirroring", "policy_spill", "policy_reset", "policy_location",
                               "initialSize", "policyLearning", "nonsense"])
field_values = st.one_of(json_scalars, st.sampled_from(["16m", "1g", "NONE", "strict", "OVERALLOCATE", "MMAP",
                                                        "ENDOFBUFFER_REACHED", "over_time", "-1", "1e400"]))


def _config_or_clean_error(make) -> WorkspaceConfig | None:
    try:
        return make()
    except WorkspaceConfigError as err:
        assert err.rule and err.enforced_by in ("nd4j", "pyd4j") and str(err)
        return None


def _invariants(cfg: WorkspaceConfig) -> None:
    assert 0 <= cfg.initial_size <= JAVA_LONG_MAX and 0 <= cfg.min_size and 0 <= cfg.max_size <= JAVA_LONG_MAX
    assert cfg.max_size == 0 or cfg.min_size <= cfg.max_size
    assert math.isfinite(cfg.overallocation_limit) and cfg.overallocation_limit >= 0
    assert 0 <= cfg.cycles_before_initialization <= JAVA_INT_MAX and 0 <= cfg.steps_number <= JAVA_INT_MAX
    assert WorkspaceConfig.from_json(cfg.to_json()) == cfg
    assert WorkspaceConfig.from_yaml(cfg.to_yaml()) == cfg


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(field_names, field_values, max_size=6))
def test_workspace_config_from_any_dict(data):
    cfg = _config_or_clean_error(lambda: WorkspaceConfig.from_dict(data))
    if cfg is not None:
        _invariants(cfg)


@MANY
@given(st.one_of(st.text(max_size=60), json_values.map(json.dumps),
                 st.dictionaries(field_names, field_values, max_size=5).map(json.dumps)))
def test_workspace_config_from_any_json_text(text):
    cfg = _config_or_clean_error(lambda: WorkspaceConfig.from_json(text))
    if cfg is not None:
        _invariants(cfg)


@MANY
@given(st.one_of(st.text(max_size=60), st.dictionaries(field_names, field_values, max_size=5).map(
    lambda d: "\n".join(f"{k}: {json.dumps(v)}" for k, v in d.items()))))
@example('temp_file_path: "\\ud800\\udc00"')   # found by hypothesis: a lone-surrogate path
def test_workspace_config_from_any_yaml_text(text):
    cfg = _config_or_clean_error(lambda: WorkspaceConfig.from_yaml(text))
    if cfg is not None:
        _invariants(cfg)


# ----------------------------------------------------------------------------- DL4J JSON readers

def _paths(doc, prefix=()):
    """Every path to a value inside a parsed JSON document."""
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, (*prefix, i))


@st.composite
def mutated_configs(draw):
    """A real example configuration with a few values replaced by anything JSON can hold
    (negative and zero sizes, wrong types, deep nesting) or deleted."""
    name = draw(st.sampled_from(sorted(CONFIGS)))
    doc = copy.deepcopy(CONFIGS[name])
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(doc) if p]
        path = draw(st.sampled_from(paths))
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        if draw(st.booleans()) and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(st.one_of(json_values, st.integers(-5, 0),
                                              st.sampled_from([-(2**40), 2**40, 2**31])))
    return name, doc


def _input_shape(name: str):
    spec = SIDECARS[name]["inputs"][0]
    return (spec["channels"], spec["height"], spec["width"]) if "channels" in spec else (spec["size"],)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_configs(), st.integers(min_value=1, max_value=4096))
def test_planner_reader_builds_a_valid_graph_or_raises_graph_error(named, batch):
    name, doc = named
    try:
        g = graph_from_dl4j_json(doc, batch=batch, input_shape=_input_shape(name))
    except GraphError as err:
        assert str(err)
        return
    g.validate()
    assert all(t.nbytes > 0 for t in g.tensors())
    assert all(d > 0 for layer in g for p in layer.param_shapes for d in p)


@MANY
@given(st.one_of(st.text(max_size=80), json_values.map(json.dumps)))
def test_planner_reader_on_any_text(text):
    try:
        graph_from_dl4j_json(text, batch=4, input_shape=(3, 8, 8))
    except GraphError:
        pass


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_configs())
def test_configuration_reader_checks_layers_and_inputs_or_raises_configuration_error(named):
    _, doc = named
    try:
        kind = check_document(doc, "generated")
        inputs = derive_inputs(doc, kind)
    except ConfigurationError as err:
        assert str(err)
        return
    for spec in inputs or ():
        assert all(0 < v <= JAVA_INT_MAX for k, v in spec.items() if k != "type")
    layers = [c["layer"] for c in doc["confs"]] if kind == "MultiLayerNetwork" else \
        [v["layerConf"]["layer"] for v in doc["vertices"].values() if isinstance(v, dict) and "layerConf" in v]
    for layer in layers:
        for key in ("nin", "nout", "nIn", "nOut"):
            if layer.get(key) is not None:   # 0: a size DL4J infers (a dropout vertex's nIn); the model refuses it where it matters
                assert 0 <= layer[key] <= JAVA_INT_MAX


@MANY
@given(st.text(max_size=40))
def test_input_spec_text_parses_or_raises_configuration_error(spec):
    try:
        parsed = parse_input_spec(spec)
    except ConfigurationError:
        return
    assert all(0 < v <= JAVA_INT_MAX for k, v in parsed.items() if k != "type")


@MANY
@given(st.one_of(json_values, st.fixed_dictionaries({"inputs": st.lists(st.fixed_dictionaries(
    {"type": st.sampled_from(["feedForward", "convolutional", "recurrent", "x"]), "size": json_scalars,
     "height": json_scalars, "width": json_scalars, "channels": json_scalars}), max_size=2)})))
def test_sidecar_reads_or_raises_configuration_error(tmp_path_factory, doc):
    path = tmp_path_factory.mktemp("side") / "net.input.json"
    path.write_text(json.dumps(doc))
    try:
        specs = read_sidecar(path)
    except ConfigurationError:
        return
    assert specs and all(check_input_spec(s, "again") == s for s in specs)


# ----------------------------------------------------------------------------- JSON and timelines

@MANY
@given(st.one_of(st.text(max_size=80), json_values.map(json.dumps),
                 st.integers(1, 5000).map(lambda n: "[" * n + "]" * n),
                 st.integers(1, 5000).map(lambda n: '{"a":' * n + "1" + "}" * n)))
def test_parse_json_bounds_nesting(text):
    try:
        value = parse_json(text, "generated", max_depth=64)
    except InputError:
        return
    assert json_depth(value) <= 64


timeline_lines = st.one_of(
    st.text(max_size=40),
    json_values.map(json.dumps),
    st.fixed_dictionaries({"type": st.just("sample"), "t": st.integers(0, 10**13)},
                          optional={k: st.one_of(json_scalars, st.integers(0, 2**40)) for k in SERIES}).map(json.dumps),
    st.fixed_dictionaries({"type": st.sampled_from(["sample", "gc", "iter", "start", "end", "ws", 3])},
                          optional={"t": json_scalars, "n": json_scalars, "gc": json_values, "ws": json_values,
                                    **{k: json_scalars for k in SERIES}}).map(json.dumps),
)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(timeline_lines, max_size=12))
def test_timeline_reads_any_lines_and_counts_what_it_skips(tmp_path_factory, lines):
    run = tmp_path_factory.mktemp("run")
    path = run / "timeline.jsonl"
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8", "surrogatepass"))  # any bytes, even invalid UTF-8
    t = Timeline.load(run)
    with path.open(encoding="utf-8", errors="replace") as fh:
        nonblank = sum(1 for line in fh if line.strip())
    kept = len(t.samples) + len(t.gc_events) + len(t.iter_events) + len(t.epoch_events) + len(t.errors)
    assert kept + t.torn_lines <= nonblank
    for s in t.samples:
        assert math.isfinite(s["t"])
        assert all(s.get(k) is None or (isinstance(s[k], (int, float)) and math.isfinite(s[k])) for k in SERIES)
    t.peaks(), t.limits(), t.iterations(), t.iterations_per_second(), t.duration_s(), t.gc_totals(), t.workspace_series()
