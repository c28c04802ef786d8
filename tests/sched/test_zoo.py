"""Zoo networks: known parameter counts, and every policy's peak against the lower bound."""

from __future__ import annotations

import pytest

from pyd4j.sched import zoo
from pyd4j.sched.bounds import lower_bound
from pyd4j.sched.graph import GraphError, LayerType
from pyd4j.sched.policies import POLICIES, make_plan
from pyd4j.sched.simulator import simulate


@pytest.mark.parametrize("model, params", [
    ("resnet50", 25_557_032), ("resnet101", 44_549_160), ("resnet152", 60_192_808),
    ("vgg16", 138_357_544), ("vgg19", 143_667_240), ("inception_v4", 42_679_816)])
def test_parameter_counts_match_published_models(model: str, params: int) -> None:
    g = zoo.build(model, batch=1, image=224 if model.startswith("vgg") else 227)
    # ResNet/Inception: BN beta+gamma included, conv bias absent, as in torchvision/Keras
    assert g.n_params == params


def test_resnet_n_adds_depth_to_conv4() -> None:
    assert zoo.resnet_stages(152) == (3, 8, 36, 3)
    assert zoo.resnet_stages(2501) == (3, 4, 823, 3)
    g = zoo.resnet(1001, batch=1, image=64)
    main_path = g.count(LayerType.CONV) - 4 + g.count(LayerType.FC)  # 4 projection shortcuts
    assert main_path == 1001
    with pytest.raises(GraphError, match="3\\*blocks\\+2"):
        zoo.resnet_stages(1000)


@pytest.mark.parametrize("model", sorted(zoo.ZOO))
def test_all_policies_within_5_percent_of_the_bound(model: str) -> None:
    g = zoo.build(model, batch=16)
    bound = lower_bound(g).lower_bound_bytes
    peaks = {p: simulate(make_plan(g, p)).peak_bytes for p in POLICIES}
    assert peaks["superneurons"] <= 1.05 * bound
    assert peaks["recompute"] <= 1.05 * bound
    assert bound <= peaks["recompute"] <= peaks["utp"] <= peaks["liveness"] <= peaks["baseline"]
