"""Network builders: AlexNet, VGG-16/19, ResNet-50/101/152 and ResNet-N, Inception-v4 as the
SuperNeurons release code builds them (linnanwang/superneurons-release, testing/*.cpp), Caffe's
grouped AlexNet (`alexnet_grouped`, for published timings), plus small networks the numpy
executor can run. Any batch size; the input size is the code's (227x227, Inception-v4
299x299) unless given.

Geometry follows the code: cuDNN pooling rounds down and pads only where the code says so
(ResNet grids 56/28/14/7 at 227; VGG's FC6 reads a 7x7 map; AlexNet's 6x6), ResNet blocks put
the stride on their first 1x1 convolution and on the projection shortcut, and Inception-v4's
convolutions are followed by ReLU only (the code comments out their BN; the first one keeps it).
The code's explicit FORK layers copy a tensor once per branch; here branches share one output
and its gradient accumulates in place.

ResNet-N: bottleneck blocks (1x1, 3x3, 1x1 with 4x expansion, each followed by BN; ReLU after BN
and after the residual JOIN), projection shortcuts at the start of each stage, extra depth in
the conv4_x stage: layout `standard` (3, 4, k, 3) as ResNet-50/101/152, or `paper` (6, 32, k, 6)
as the code's deepest network (testing/residual_imagenet_max.cpp, 788 blocks in conv4_x:
ResNet-2498). N counts CONV and FC layers on the main path: N = 3 * blocks + 2.
"""

from __future__ import annotations

from typing import Callable

from pyd4j.inputs import MAX_RESNET_DEPTH
from pyd4j.sched.graph import Graph, GraphError

_RESNET_STAGES = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}
LAYOUTS = {"standard": (3, 4, 3), "paper": (6, 32, 6)}
"""Blocks in conv2_x, conv3_x and conv5_x of a deep ResNet (conv4_x takes the rest)."""

DEFAULT_IMAGE = 227
"""The release code's input size (Inception-v4: 299)."""


def resnet_stages(depth: int, layout: str = "standard") -> tuple[int, int, int, int]:
    """Bottleneck blocks per stage for ResNet-`depth`; depth beyond the table goes to conv4_x."""
    if layout not in LAYOUTS:
        raise GraphError(f"ResNet layout {layout!r} not in {sorted(LAYOUTS)}")
    if layout == "standard" and depth in _RESNET_STAGES:
        return _RESNET_STAGES[depth]
    a, b, d = LAYOUTS[layout]
    least = 3 * (a + b + d + 1) + 2
    if depth < least or (depth - 2) % 3:
        raise GraphError(
            f"ResNet depth {depth} is not 3*blocks+2 with at least {least} (layout {layout}); "
            f"try 50, 101, 152, or any N >= {least} with N % 3 == 2"
        )
    blocks = (depth - 2) // 3
    return (a, b, blocks - a - b - d, d)


def resnet_depth(stages: tuple[int, ...]) -> int:
    """N of a bottleneck ResNet with these stages."""
    return 3 * sum(stages) + 2


def _conv_bn(g: Graph, x: int, ch: int, k: int | tuple[int, int], stride: int = 1,
             pad: int | tuple[int, int] = 0, relu: bool = True, name: str = "",
             bn: bool = True) -> int:
    x = g.conv(x, ch, k, stride, pad, bias=False, name=f"{name}conv" if name else None)
    if bn:
        x = g.bn(x, name=f"{name}bn" if name else None)
    return g.act(x, name=f"{name}relu" if name else None) if relu else x


def resnet(depth: int = 50, batch: int = 32, image: int = DEFAULT_IMAGE, classes: int = 1000,
           dtype: str = "float32", stages: tuple[int, ...] | None = None,
           layout: str = "standard") -> Graph:
    """Bottleneck ResNet-`depth` (or explicit `stages`), as testing/residual_imagenet_*.cpp."""
    stages = tuple(stages) if stages is not None else resnet_stages(depth, layout)
    g = Graph(f"resnet{resnet_depth(stages)}", batch, dtype)
    x = g.data(3, image, image, classes=classes)
    x = _conv_bn(g, x, 64, 7, 2, 3, name="conv1_")
    x = g.pool(x, 3, 2, 0, "max", name="pool1", ceil=False)
    for s, (blocks, width) in enumerate(zip(stages, (64, 128, 256, 512))):
        for b in range(blocks):
            stride = 2 if (b == 0 and s > 0) else 1
            p = f"res{s + 2}_{b}_"
            y = _conv_bn(g, x, width, 1, stride, 0, name=p + "a")
            y = _conv_bn(g, y, width, 3, 1, 1, name=p + "b")
            y = _conv_bn(g, y, 4 * width, 1, 1, 0, relu=False, name=p + "c")
            short = x if b else _conv_bn(g, x, 4 * width, 1, stride, 0, relu=False, name=p + "proj")
            x = g.act(g.join([y, short], name=p + "join"), name=p + "out")
    x = g.global_pool(x, name="pool5")
    x = g.fc(x, classes, name="fc")
    g.softmax(x, name="loss")
    return g


def alexnet(batch: int = 32, image: int = DEFAULT_IMAGE, classes: int = 1000,
            dtype: str = "float32", groups: int = 1) -> Graph:
    """AlexNet as testing/alexnet.cpp builds it: LRN after ReLU, no grouping (62.38 M
    parameters). `groups=2`: Caffe's bvlc_alexnet (`alexnet_grouped`), the same layers with
    conv2, conv4 and conv5 in two groups (60.97 M parameters, 37% fewer convolution FLOPs)."""
    g = Graph("alexnet" if groups == 1 else "alexnet_grouped", batch, dtype)
    x = g.data(3, image, image, classes=classes)
    for i, (ch, k, s, p, lrn, pool) in enumerate(
        [(96, 11, 4, 0, True, True), (256, 5, 1, 2, True, True), (384, 3, 1, 1, False, False),
         (384, 3, 1, 1, False, False), (256, 3, 1, 1, False, True)], start=1):
        grouped = groups if i in (2, 4, 5) else 1
        x = g.act(g.conv(x, ch, k, s, p, name=f"conv{i}", groups=grouped), name=f"relu{i}")
        if lrn:
            x = g.lrn(x, name=f"norm{i}")
        if pool:
            x = g.pool(x, 3, 2, name=f"pool{i}", ceil=False)
    for i in (6, 7):
        x = g.dropout(g.act(g.fc(x, 4096, name=f"fc{i}"), name=f"relu{i}"), name=f"drop{i}")
    g.softmax(g.fc(x, classes, name="fc8"), name="loss")
    return g


def vgg(depth: int = 16, batch: int = 32, image: int = DEFAULT_IMAGE, classes: int = 1000,
        dtype: str = "float32") -> Graph:
    """VGG-16 / VGG-19 as testing/vgg16.cpp: 2x2 pooling rounding down (227 -> 7x7 at FC6)."""
    per_stage = {11: (1, 1, 2, 2, 2), 13: (2, 2, 2, 2, 2), 16: (2, 2, 3, 3, 3),
                 19: (2, 2, 4, 4, 4)}
    if depth not in per_stage:
        raise GraphError(f"VGG depth {depth} not in {sorted(per_stage)}")
    g = Graph(f"vgg{depth}", batch, dtype)
    x = g.data(3, image, image, classes=classes)
    for s, (n, ch) in enumerate(zip(per_stage[depth], (64, 128, 256, 512, 512)), start=1):
        for c in range(1, n + 1):
            x = g.act(g.conv(x, ch, 3, 1, 1, name=f"conv{s}_{c}"), name=f"relu{s}_{c}")
        x = g.pool(x, 2, 2, name=f"pool{s}", ceil=False)
    for i in (6, 7):
        x = g.dropout(g.act(g.fc(x, 4096, name=f"fc{i}"), name=f"relu{i}"), name=f"drop{i}")
    g.softmax(g.fc(x, classes, name="fc8"), name="loss")
    return g


def inception_v4(batch: int = 32, image: int = 299, classes: int = 1000,
                 dtype: str = "float32") -> Graph:
    """Inception-v4 (Szegedy et al. 2016) as testing/inception_v4.cpp: stem, 4xA, reduction-A,
    7xB, reduction-B, 3xC at 299x299; conv + ReLU (BN only after the first convolution)."""
    g = Graph("inception_v4", batch, dtype)
    cr = lambda x, ch, k, s=1, p=0: _conv_bn(g, x, ch, k, s, p, bn=False)  # noqa: E731
    pool = lambda x: g.pool(x, 3, 2, ceil=False)  # noqa: E731
    avg = lambda x: g.pool(x, 3, 1, 1, "avg")  # noqa: E731
    x = g.data(3, image, image, classes=classes)
    x = _conv_bn(g, x, 32, 3, 2)
    x = cr(cr(x, 32, 3), 64, 3, 1, 1)
    x = g.concat([cr(x, 96, 3, 2), pool(x)])  # stem 1
    x = g.concat([cr(cr(x, 64, 1), 96, 3),  # stem 2
                  cr(cr(cr(cr(x, 64, 1), 64, (1, 7), 1, (0, 3)), 64, (7, 1), 1, (3, 0)), 96, 3)])
    x = g.concat([cr(x, 192, 3, 2), pool(x)])  # stem 3
    for _ in range(4):  # Inception-A
        x = g.concat([cr(x, 96, 1), cr(cr(x, 64, 1), 96, 3, 1, 1),
                      cr(cr(cr(x, 64, 1), 96, 3, 1, 1), 96, 3, 1, 1), cr(avg(x), 96, 1)])
    x = g.concat([cr(x, 384, 3, 2),  # Reduction-A
                  cr(cr(cr(x, 192, 1), 224, 3, 1, 1), 256, 3, 2), pool(x)])
    for _ in range(7):  # Inception-B
        x = g.concat([
            cr(x, 384, 1),
            cr(cr(cr(x, 192, 1), 224, (1, 7), 1, (0, 3)), 256, (7, 1), 1, (3, 0)),
            cr(cr(cr(cr(cr(x, 192, 1), 192, (7, 1), 1, (3, 0)), 224, (1, 7), 1, (0, 3)),
                  224, (7, 1), 1, (3, 0)), 256, (1, 7), 1, (0, 3)),
            cr(avg(x), 128, 1)])
    x = g.concat([cr(cr(x, 192, 1), 192, 3, 2),  # Reduction-B
                  cr(cr(cr(cr(x, 256, 1), 256, (1, 7), 1, (0, 3)), 320, (7, 1), 1, (3, 0)),
                     320, 3, 2), pool(x)])
    for _ in range(3):  # Inception-C
        b3 = cr(x, 384, 1)
        b4 = cr(cr(cr(x, 384, 1), 448, (3, 1), 1, (1, 0)), 512, (1, 3), 1, (0, 1))
        x = g.concat([
            cr(x, 256, 1), cr(b3, 256, (1, 3), 1, (0, 1)), cr(b3, 256, (3, 1), 1, (1, 0)),
            cr(b4, 256, (1, 3), 1, (0, 1)), cr(b4, 256, (3, 1), 1, (1, 0)), cr(avg(x), 256, 1)])
    x = g.dropout(g.global_pool(x), 0.2)
    g.softmax(g.fc(x, classes, name="fc"), name="loss")
    return g


def small_cnn(batch: int = 4, image: int = 12, classes: int = 5, dtype: str = "float32",
              groups: int = 1) -> Graph:
    """A small CNN with every linear layer kind (for the numpy executor); `groups` splits
    conv2 (6 -> 8 channels) into 2."""
    g = Graph("small_cnn", batch, dtype)
    x = g.data(3, image, image, classes=classes)
    x = g.act(g.bn(g.conv(x, 6, 3, 1, 1, name="conv1")), name="relu1")
    x = g.pool(g.lrn(x, size=3), 2, 2, name="pool1")
    x = g.act(g.conv(x, 8, 3, 1, 1, name="conv2", groups=groups), name="relu2")
    x = g.pool(x, 2, 2, mode="avg", name="pool2")
    x = g.dropout(g.act(g.fc(x, 16, name="fc1")), 0.25)
    g.softmax(g.fc(x, classes, name="fc2"), name="loss")
    return g


def small_resnet(batch: int = 4, image: int = 8, classes: int = 4, blocks: int = 2,
                 dtype: str = "float32") -> Graph:
    """A small residual network with JOIN, FORK, CONCAT and ELTWISE (for the numpy executor)."""
    g = Graph("small_resnet", batch, dtype)
    x = g.data(3, image, image, classes=classes)
    x = g.act(g.bn(g.conv(x, 8, 3, 1, 1, name="stem")), name="stem_relu")
    for b in range(blocks):
        y = g.act(g.bn(g.conv(x, 4, 1, name=f"b{b}a")))
        y = g.bn(g.conv(y, 8, 3, 1, 1, name=f"b{b}b"))
        x = g.act(g.join([y, x], name=f"b{b}join"))
    f = g.fork(x, name="fork")
    left = g.conv(f, 4, 1, name="left")
    right = g.act(g.conv(f, 4, 3, 1, 1, name="right"))
    x = g.concat([left, right], name="cat")
    x = g.eltwise([x, g.conv(f, 8, 1, name="gate")], op="prod", name="gated")
    x = g.pool(x, 2, 2, name="pool")
    g.softmax(g.fc(x, classes, name="fc"), name="loss")
    return g


def chain(n_layers: int, batch: int = 8, channels: int = 16, image: int = 16) -> Graph:
    """A long conv/bn/relu chain of about `n_layers` layers (for planner speed tests)."""
    g = Graph(f"chain{n_layers}", batch)
    x = g.data(channels, image, image, classes=10)
    while len(g) < n_layers - 3:
        x = g.act(g.bn(g.conv(x, channels, 3, 1, 1, bias=False)))
    g.softmax(g.fc(x, 10))
    return g


ZOO: dict[str, Callable[..., Graph]] = {
    "alexnet": alexnet,
    "alexnet_grouped": lambda **kw: alexnet(groups=2, **kw),
    "vgg16": lambda **kw: vgg(16, **kw),
    "vgg19": lambda **kw: vgg(19, **kw),
    "resnet50": lambda **kw: resnet(50, **kw),
    "resnet101": lambda **kw: resnet(101, **kw),
    "resnet152": lambda **kw: resnet(152, **kw),
    "inception_v4": inception_v4,
}


def build(model: str, batch: int = 32, image: int | None = None, depth: int | None = None,
          layout: str = "standard") -> Graph:
    """Build a zoo network by name; `resnet` with `depth`, or `resnetN` for any N (`layout`:
    see `resnet_stages`). `image`: the input size (default: the release code's)."""
    key = model.lower().replace("-", "").replace("_", "")
    kw = {"batch": batch} if image is None else {"batch": batch, "image": image}
    if key == "resnet" and depth is None:
        raise GraphError("model 'resnet' needs a depth: give one (e.g. depth 50, or the name resnet50)")
    if depth is not None and key != "resnet":
        raise GraphError(f"a depth ({depth}) is for model 'resnet' only; {model!r} fixes its own depth: "
                         f"drop the depth, or give model 'resnet' with it")
    if key == "inceptionv4":
        return inception_v4(**kw)
    if key == "resnet":
        return resnet(depth, layout=layout, **kw)
    if key.startswith("resnet") and key[6:].isdigit():
        if len(key[6:]) > 6 or int(key[6:]) > MAX_RESNET_DEPTH:
            raise GraphError(f"model {model!r}: ResNet depth {key[6:][:12]} is past the {MAX_RESNET_DEPTH} this plans "
                             f"(about {MAX_RESNET_DEPTH * 10 // 3} layers); give a smaller depth")
        return resnet(int(key[6:]), layout=layout, **kw)
    names = {name.replace("_", ""): fn for name, fn in ZOO.items()}
    if key in names:
        return names[key](**kw)
    raise GraphError(f"unknown model {model!r}; known: {sorted(ZOO) + ['resnet<N>']}")
