"""Zoo networks as the SuperNeurons release code builds them: parameter counts against the
published ones, the code's geometry, and every policy's peak against the lower bound."""

from __future__ import annotations

import pytest

from pyd4j.sched import zoo
from pyd4j.sched.bounds import lower_bound
from pyd4j.sched.deps import im2col_bytes
from pyd4j.sched.graph import GraphError, LayerType
from pyd4j.sched.policies import POLICIES, make_plan
from pyd4j.sched.simulator import simulate

PUBLISHED = {  # parameters, as the architectures' papers / reference implementations count them
    "resnet50": 25_557_032, "resnet101": 44_549_160, "resnet152": 60_192_808,
    "vgg16": 138_357_544, "vgg19": 143_667_240, "inception_v4": 42_679_816,
    "alexnet_grouped": 60_965_224,  # Caffe's bvlc_alexnet (conv2/4/5 in two groups)
}
# AlexNet as testing/alexnet.cpp builds it (no grouping), by hand: conv1-5 with bias, fc6-8
ALEXNET = (96 * 3 * 11 * 11 + 96 + 256 * 96 * 25 + 256 + 384 * 256 * 9 + 384 + 384 * 384 * 9
           + 384 + 256 * 384 * 9 + 256 + 9216 * 4096 + 4096 + 4096 * 4096 + 4096
           + 4096 * 1000 + 1000)


@pytest.mark.parametrize("model", sorted(PUBLISHED) + ["alexnet"])
def test_parameter_counts_within_half_a_percent_of_the_published(model: str) -> None:
    g = zoo.build(model, batch=1)  # at the code's input size
    published = PUBLISHED.get(model, ALEXNET)
    assert abs(g.n_params / published - 1) <= 0.005, (g.n_params, published)
    if model != "inception_v4":  # the code drops Inception-v4's BN: 2 x channels fewer
        assert g.n_params == published


def shapes(g, *names):
    by = {layer.name: layer.out_shape for layer in g.layers}
    return [by[n][2] for n in names]


def test_geometry_is_the_codes() -> None:
    r = zoo.resnet(50, batch=1)
    assert shapes(r, "conv1_conv", "pool1", "res3_0_out", "res4_0_out", "res5_0_out") == \
        [114, 56, 28, 14, 7]
    # the stride sits on the block's first 1x1 convolution
    assert shapes(r, "res3_0_aconv", "res3_0_bconv") == [28, 28]
    assert shapes(zoo.vgg(16, batch=1), "pool1", "pool5") == [113, 7]
    assert shapes(zoo.alexnet(batch=1), "pool1", "pool2", "pool5") == [27, 13, 6]
    inc = zoo.inception_v4(batch=1)
    grids = [layer.out_shape[2] for layer in inc.layers if layer.type is LayerType.CONCAT]
    assert grids[:3] == [73, 71, 35] and grids[-1] == 8 and inc.layers[0].out_shape[2] == 299
    assert inc.count(LayerType.BN) == 1


def test_resnet_n_adds_depth_to_conv4() -> None:
    assert zoo.resnet_stages(152) == (3, 8, 36, 3)
    assert zoo.resnet_stages(2501) == (3, 4, 823, 3)
    assert zoo.resnet_stages(2498, "paper") == (6, 32, 788, 6)  # residual_imagenet_max.cpp
    g = zoo.resnet(1001, batch=1, image=64)
    main_path = g.count(LayerType.CONV) - 4 + g.count(LayerType.FC)  # 4 projection shortcuts
    assert main_path == 1001
    with pytest.raises(GraphError, match="3\\*blocks\\+2"):
        zoo.resnet_stages(1000)
    with pytest.raises(GraphError, match="at least 137"):
        zoo.resnet_stages(101, "paper")


@pytest.mark.parametrize("model", sorted(zoo.ZOO))
def test_all_policies_within_5_percent_of_the_bound(model: str) -> None:
    g = zoo.build(model, batch=16)
    bound = lower_bound(g).lower_bound_bytes
    peaks = {p: simulate(make_plan(g, p)).peak_bytes for p in POLICIES}
    assert peaks["superneurons"] <= 1.05 * bound
    assert peaks["recompute"] <= 1.05 * bound
    assert bound <= peaks["recompute"] <= peaks["utp"] <= peaks["liveness"] <= peaks["baseline"]


def test_grouped_convolution_divides_parameters_flops_and_patch_matrix() -> None:
    plain, grouped = zoo.alexnet(batch=2), zoo.build("alexnet_grouped", batch=2)
    by = lambda g: {layer.name: layer for layer in g.layers}  # noqa: E731
    p, q = by(plain), by(grouped)
    for name in ("conv1", "conv3"):
        assert q[name].fwd_flops == p[name].fwd_flops and "groups" not in q[name].attrs
    for name in ("conv2", "conv4", "conv5"):
        assert q[name].fwd_flops == p[name].fwd_flops / 2
        assert q[name].bwd_flops == p[name].bwd_flops / 2
        assert q[name].param_shapes[0][1] == p[name].param_shapes[0][1] // 2
        assert im2col_bytes(grouped, q[name]) == im2col_bytes(plain, p[name]) // 2
    with pytest.raises(GraphError, match="groups do not divide"):
        zoo.small_cnn().conv(0, 4, 3, groups=2)  # 3 input channels
