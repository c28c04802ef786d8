"""Random valid DL4J networks (tests/dl4j/netgen.py: DL4J's own builders, every layer, vertex, updater and
input type the generator knows) through the planner and planned training, on real DL4J: a fixed-seed
sample of networks DL4J's own fit() trains, each planned (or refused naming its layer) and trained
under liveness, the smallest plan and an offloading plan to fit()'s parameters. A failure is shrunk by
hypothesis to a minimal failing network, printed as its spec (rebuild it with tests.dl4j.netbuild).
benchmarks/network_generator.py runs 1,000 of them."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings

from tests.dl4j.netcheck import check
from tests.dl4j.netgraph import network_specs

pytestmark = pytest.mark.jvm

SAMPLE = settings(derandomize=True, database=None, deadline=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])


@settings(SAMPLE, max_examples=40)
@given(spec=network_specs())
def test_generated_networks_plan_and_train_exactly(jvm, spec: dict) -> None:
    outcome = check(spec)
    assume(outcome.status != "dl4j_refused")   # 40 networks DL4J's own fit() trains
    assert outcome.status == "exact", outcome.report(spec)


@settings(SAMPLE, max_examples=6)
@given(spec=network_specs())
def test_the_plan_command_plans_generated_networks_or_names_the_layer(jvm, spec: dict) -> None:
    """`pyd4j plan --model FILE --emit-plan PLAN` on the configuration DL4J wrote: a plan, or one line
    naming the layer and the reason; never a traceback."""
    outcome = check(spec, modes=("liveness",), cli=True)
    assume(outcome.status != "dl4j_refused")
    assert outcome.status in ("exact", "refused"), outcome.report(spec)
