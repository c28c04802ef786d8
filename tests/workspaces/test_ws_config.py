"""WorkspaceConfig: validation, round trips, and agreement with ND4J's own checks."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyd4j.workspaces import (
    AllocationPolicy, LearningPolicy, LocationPolicy, MirroringPolicy, ResetPolicy, SpillPolicy,
    WorkspaceConfig, WorkspaceConfigError,
)

ENUMS = {
    "policy_allocation": AllocationPolicy, "policy_learning": LearningPolicy, "policy_mirroring": MirroringPolicy,
    "policy_spill": SpillPolicy, "policy_reset": ResetPolicy, "policy_location": LocationPolicy,
}


def raw_configs(max_size: int = 2**20):
    """Any field values, valid or not (sizes kept small: ND4J really allocates/maps them)."""
    size = st.integers(min_value=-8, max_value=max_size)
    return st.fixed_dictionaries({
        "initial_size": size, "min_size": size, "max_size": size,
        "overallocation_limit": st.sampled_from([-0.5, 0.0, 0.3, 0.99, 1.0, 1.5, 2.0, 3.0]),
        "cycles_before_initialization": st.integers(min_value=-2, max_value=5),
        "steps_number": st.integers(min_value=-1, max_value=4),
        **{name: st.sampled_from(list(enum)) for name, enum in ENUMS.items()},
    })


def valid_configs():
    def build(d):
        try:
            return WorkspaceConfig(**d)
        except WorkspaceConfigError:
            return None
    return raw_configs().map(build).filter(lambda c: c is not None)


def test_defaults_are_nd4js():
    cfg = WorkspaceConfig()
    assert cfg.policy_allocation is AllocationPolicy.OVERALLOCATE
    assert cfg.policy_spill is SpillPolicy.EXTERNAL
    assert cfg.policy_mirroring is MirroringPolicy.FULL
    assert cfg.policy_learning is LearningPolicy.FIRST_LOOP
    assert cfg.policy_reset is ResetPolicy.BLOCK_LEFT
    assert cfg.policy_location is LocationPolicy.RAM
    assert cfg.overallocation_limit == 0.3


@pytest.mark.parametrize("kwargs, rule, by", [
    (dict(policy_reset="ENDOFBUFFER_REACHED", overallocation_limit=0.5), "circular_overallocation", "nd4j"),
    (dict(policy_location="MMAP", initial_size="1m"), "mmap_learning", "nd4j"),
    (dict(policy_location="MMAP", policy_learning="NONE"), "mmap_size", "nd4j"),
    (dict(initial_size=-1), "non_negative", "pyd4j"),
    (dict(min_size="2m", max_size="1m"), "min_le_max", "pyd4j"),
    (dict(policy_learning="OVER_TIME"), "over_time_cycles", "pyd4j"),
    (dict(cycles_before_initialization=2**31), "java_range", "nd4j"),
    (dict(policy_spill="SOMETIMES"), "types", "pyd4j"),
])
def test_rejections_name_rule_and_fix(kwargs, rule, by):
    with pytest.raises(WorkspaceConfigError) as err:
        WorkspaceConfig(**kwargs)
    assert err.value.rule == rule and err.value.enforced_by == by
    # the message names the offending value
    key, value = next(iter(kwargs.items()))
    assert key in str(err.value) or str(value) in str(err.value)


def test_accepts_circular_with_limit_one_and_sizes_as_strings():
    cfg = WorkspaceConfig(policy_reset=ResetPolicy.ENDOFBUFFER_REACHED, overallocation_limit=1.0, initial_size="16m")
    assert cfg.initial_size == 16 * 2**20
    assert WorkspaceConfig(policy_location="mmap", policy_learning="none", initial_size=4096).policy_location is LocationPolicy.MMAP


@given(valid_configs())
@settings(max_examples=150, deadline=None)
def test_dict_json_yaml_round_trips(cfg):
    assert WorkspaceConfig.from_dict(cfg.to_dict()) == cfg
    assert WorkspaceConfig.from_json(cfg.to_json()) == cfg
    assert WorkspaceConfig.from_yaml(cfg.to_yaml()) == cfg
    json.loads(cfg.to_json())  # plain JSON


def test_from_dict_accepts_nd4j_names_and_rejects_unknown():
    cfg = WorkspaceConfig.from_dict({"initialSize": "1m", "policyLearning": "NONE", "overallocationLimit": 0.5})
    assert cfg == WorkspaceConfig(initial_size=2**20, policy_learning="NONE", overallocation_limit=0.5)
    with pytest.raises(WorkspaceConfigError, match="initalSize"):
        WorkspaceConfig.from_dict({"initalSize": 5})


@pytest.mark.jvm
@given(valid_configs())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_java_round_trip(jvm, cfg):
    java = cfg.to_java()
    assert WorkspaceConfig.from_java(java) == cfg
    assert str(java.getPolicyReset().name()) == cfg.policy_reset.value
    assert int(java.getInitialSize()) == cfg.initial_size


def _java_accepts(cfg_java, name: str) -> bool:
    """Create (then destroy) a real ND4J workspace on this thread: ND4J's own verdict."""
    import jpype

    nd4j = jpype.JClass("org.nd4j.linalg.factory.Nd4j")
    try:
        ws = nd4j.getWorkspaceManager().createNewWorkspace(cfg_java, name)
    except jpype.JException:
        return False
    ws.destroyWorkspace()
    return True


@pytest.mark.jvm
@given(raw_configs(max_size=65536))
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_python_and_nd4j_agree(jvm, raw):
    """Python accepts => ND4J accepts; Python rejects by an ND4J rule => ND4J rejects too.
    Rejections by pyd4j-only rules are configs ND4J takes and then misbehaves on (documented)."""
    import jpype

    try:
        cfg = WorkspaceConfig(**raw)
        python_error = None
    except WorkspaceConfigError as err:
        python_error = err
    if python_error is None:
        assert _java_accepts(cfg.to_java(), "AGREE_OK"), cfg
        return
    if python_error.enforced_by == "pyd4j":
        return
    # build the Java object field by field, bypassing Python validation
    builder = jpype.JClass("org.nd4j.linalg.api.memory.conf.WorkspaceConfiguration").builder()
    builder.initialSize(max(raw["initial_size"], 0)).minSize(max(raw["min_size"], 0)).maxSize(max(raw["max_size"], 0))
    builder.overallocationLimit(raw["overallocation_limit"])
    enums = "org.nd4j.linalg.api.memory.enums."
    for name, java_name in [("policy_allocation", "AllocationPolicy"), ("policy_learning", "LearningPolicy"),
                            ("policy_mirroring", "MirroringPolicy"), ("policy_spill", "SpillPolicy"),
                            ("policy_reset", "ResetPolicy"), ("policy_location", "LocationPolicy")]:
        value = getattr(jpype.JClass(enums + java_name), raw[name].value)
        getattr(builder, "policy" + java_name.replace("Policy", ""))(value)
    assert not _java_accepts(builder.build(), "AGREE_BAD"), (python_error.rule, raw)
