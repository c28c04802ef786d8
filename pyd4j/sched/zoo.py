"""Network builders: AlexNet, VGG-16/19, ResNet-50/101/152 and ResNet-N, Inception-v4, plus
small networks the numpy executor can run. Any batch size and input size (the paper: 227x227).

ResNet-N follows the SuperNeurons code: bottleneck blocks (1x1, 3x3, 1x1 with 4x expansion,
each followed by BN; ReLU after BN and after the residual JOIN), projection shortcuts at the
start of each stage, and extra depth added to the conv4_x stage. N counts CONV and FC layers on
the main path: N = 3 * blocks + 2.
"""

from __future__ import annotations

from typing import Callable

from pyd4j.sched.graph import Graph, GraphError

_RESNET_STAGES = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}


def resnet_stages(depth: int) -> tuple[int, int, int, int]:
    """Bottleneck blocks per stage for ResNet-`depth`; depth beyond the table goes to conv4_x."""
    if depth in _RESNET_STAGES:
        return _RESNET_STAGES[depth]
    if depth < 35 or (depth - 2) % 3:
        raise GraphError(
            f"ResNet depth {depth} is not 3*blocks+2 with at least 11 blocks "
            "(try 50, 101, 152, or any N >= 35 with N % 3 == 2)"
        )
    blocks = (depth - 2) // 3
    return (3, 4, blocks - 10, 3)


def resnet_depth(stages: tuple[int, ...]) -> int:
    """N of a bottleneck ResNet with these stages."""
    return 3 * sum(stages) + 2


def _conv_bn(g: Graph, x: int, ch: int, k: int | tuple[int, int], stride: int = 1,
             pad: int | tuple[int, int] = 0, relu: bool = True, name: str = "") -> int:
    x = g.conv(x, ch, k, stride, pad, bias=False, name=f"{name}conv" if name else None)
    x = g.bn(x, name=f"{name}bn" if name else None)
    return g.act(x, name=f"{name}relu" if name else None) if relu else x


def resnet(depth: int = 50, batch: int = 32, image: int = 227, classes: int = 1000,
           dtype: str = "float32", stages: tuple[int, ...] | None = None) -> Graph:
    """Bottleneck ResNet-`depth` (or explicit `stages`)."""
    stages = tuple(stages) if stages is not None else resnet_stages(depth)
    g = Graph(f"resnet{resnet_depth(stages)}", batch, dtype)
    x = g.data(3, image, image, classes=classes)
    x = _conv_bn(g, x, 64, 7, 2, 3, name="conv1_")
    x = g.pool(x, 3, 2, 1, "max", name="pool1")
    for s, (blocks, width) in enumerate(zip(stages, (64, 128, 256, 512))):
        for b in range(blocks):
            stride = 2 if (b == 0 and s > 0) else 1
            p = f"res{s + 2}_{b}_"
            y = _conv_bn(g, x, width, 1, 1, 0, name=p + "a")
            y = _conv_bn(g, y, width, 3, stride, 1, name=p + "b")
            y = _conv_bn(g, y, 4 * width, 1, 1, 0, relu=False, name=p + "c")
            short = x if b else _conv_bn(g, x, 4 * width, 1, stride, 0, relu=False, name=p + "proj")
            x = g.act(g.join([y, short], name=p + "join"), name=p + "out")
    x = g.global_pool(x, name="pool5")
    x = g.fc(x, classes, name="fc")
    g.softmax(x, name="loss")
    return g


def alexnet(batch: int = 32, image: int = 227, classes: int = 1000, dtype: str = "float32") -> Graph:
    """AlexNet as in Caffe's bvlc_alexnet (LRN, no grouping)."""
    g = Graph("alexnet", batch, dtype)
    x = g.data(3, image, image, classes=classes)
    for i, (ch, k, s, p, lrn, pool) in enumerate(
        [(96, 11, 4, 0, True, True), (256, 5, 1, 2, True, True), (384, 3, 1, 1, False, False),
         (384, 3, 1, 1, False, False), (256, 3, 1, 1, False, True)], start=1):
        x = g.act(g.conv(x, ch, k, s, p, name=f"conv{i}"), name=f"relu{i}")
        if lrn:
            x = g.lrn(x, name=f"norm{i}")
        if pool:
            x = g.pool(x, 3, 2, name=f"pool{i}")
    for i in (6, 7):
        x = g.dropout(g.act(g.fc(x, 4096, name=f"fc{i}"), name=f"relu{i}"), name=f"drop{i}")
    g.softmax(g.fc(x, classes, name="fc8"), name="loss")
    return g


def vgg(depth: int = 16, batch: int = 32, image: int = 227, classes: int = 1000,
        dtype: str = "float32") -> Graph:
    """VGG-16 / VGG-19."""
    per_stage = {11: (1, 1, 2, 2, 2), 13: (2, 2, 2, 2, 2), 16: (2, 2, 3, 3, 3),
                 19: (2, 2, 4, 4, 4)}
    if depth not in per_stage:
        raise GraphError(f"VGG depth {depth} not in {sorted(per_stage)}")
    g = Graph(f"vgg{depth}", batch, dtype)
    x = g.data(3, image, image, classes=classes)
    for s, (n, ch) in enumerate(zip(per_stage[depth], (64, 128, 256, 512, 512)), start=1):
        for c in range(1, n + 1):
            x = g.act(g.conv(x, ch, 3, 1, 1, name=f"conv{s}_{c}"), name=f"relu{s}_{c}")
        x = g.pool(x, 2, 2, name=f"pool{s}")
    for i in (6, 7):
        x = g.dropout(g.act(g.fc(x, 4096, name=f"fc{i}"), name=f"relu{i}"), name=f"drop{i}")
    g.softmax(g.fc(x, classes, name="fc8"), name="loss")
    return g


def inception_v4(batch: int = 32, image: int = 227, classes: int = 1000,
                 dtype: str = "float32") -> Graph:
    """Inception-v4 (Szegedy et al. 2016): stem, 4xA, reduction-A, 7xB, reduction-B, 3xC."""
    g = Graph("inception_v4", batch, dtype)
    cb = lambda x, ch, k, s=1, p=0: _conv_bn(g, x, ch, k, s, p)  # noqa: E731
    x = g.data(3, image, image, classes=classes)
    x = cb(x, 32, 3, 2)
    x = cb(x, 32, 3)
    x = cb(x, 64, 3, 1, 1)
    x = g.concat([g.pool(x, 3, 2, ceil=False), cb(x, 96, 3, 2)])
    a = cb(cb(x, 64, 1), 96, 3)
    b = cb(cb(cb(cb(x, 64, 1), 64, (7, 1), 1, (3, 0)), 64, (1, 7), 1, (0, 3)), 96, 3)
    x = g.concat([a, b])
    x = g.concat([cb(x, 192, 3, 2), g.pool(x, 3, 2, ceil=False)])
    for _ in range(4):  # Inception-A
        x = g.concat([
            cb(g.pool(x, 3, 1, 1, "avg"), 96, 1), cb(x, 96, 1), cb(cb(x, 64, 1), 96, 3, 1, 1),
            cb(cb(cb(x, 64, 1), 96, 3, 1, 1), 96, 3, 1, 1)])
    x = g.concat([  # Reduction-A
        g.pool(x, 3, 2, ceil=False), cb(x, 384, 3, 2), cb(cb(cb(x, 192, 1), 224, 3, 1, 1), 256, 3, 2)])
    for _ in range(7):  # Inception-B
        x = g.concat([
            cb(g.pool(x, 3, 1, 1, "avg"), 128, 1), cb(x, 384, 1),
            cb(cb(cb(x, 192, 1), 224, (1, 7), 1, (0, 3)), 256, (7, 1), 1, (3, 0)),
            cb(cb(cb(cb(cb(x, 192, 1), 192, (1, 7), 1, (0, 3)), 224, (7, 1), 1, (3, 0)),
                  224, (1, 7), 1, (0, 3)), 256, (7, 1), 1, (3, 0))])
    x = g.concat([  # Reduction-B
        g.pool(x, 3, 2, ceil=False), cb(cb(x, 192, 1), 192, 3, 2),
        cb(cb(cb(cb(x, 256, 1), 256, (1, 7), 1, (0, 3)), 320, (7, 1), 1, (3, 0)), 320, 3, 2)])
    for _ in range(3):  # Inception-C
        b3 = cb(x, 384, 1)
        b4 = cb(cb(cb(x, 384, 1), 448, (1, 3), 1, (0, 1)), 512, (3, 1), 1, (1, 0))
        x = g.concat([
            cb(g.pool(x, 3, 1, 1, "avg"), 256, 1), cb(x, 256, 1),
            cb(b3, 256, (1, 3), 1, (0, 1)), cb(b3, 256, (3, 1), 1, (1, 0)),
            cb(b4, 256, (3, 1), 1, (1, 0)), cb(b4, 256, (1, 3), 1, (0, 1))])
    x = g.dropout(g.global_pool(x), 0.2)
    g.softmax(g.fc(x, classes, name="fc"), name="loss")
    return g


def small_cnn(batch: int = 4, image: int = 12, classes: int = 5, dtype: str = "float32") -> Graph:
    """A small CNN with every linear layer kind (for the numpy executor)."""
    g = Graph("small_cnn", batch, dtype)
    x = g.data(3, image, image, classes=classes)
    x = g.act(g.bn(g.conv(x, 6, 3, 1, 1, name="conv1")), name="relu1")
    x = g.pool(g.lrn(x, size=3), 2, 2, name="pool1")
    x = g.act(g.conv(x, 8, 3, 1, 1, name="conv2"), name="relu2")
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
    "vgg16": lambda **kw: vgg(16, **kw),
    "vgg19": lambda **kw: vgg(19, **kw),
    "resnet50": lambda **kw: resnet(50, **kw),
    "resnet101": lambda **kw: resnet(101, **kw),
    "resnet152": lambda **kw: resnet(152, **kw),
    "inception_v4": inception_v4,
}


def build(model: str, batch: int = 32, image: int = 227, depth: int | None = None) -> Graph:
    """Build a zoo network by name; `resnet` with `depth`, or `resnetN` for any N."""
    key = model.lower().replace("-", "").replace("_", "")
    if key == "inceptionv4":
        return inception_v4(batch=batch, image=image)
    if key == "resnet":
        return resnet(depth or 50, batch=batch, image=image)
    if key.startswith("resnet") and key[6:].isdigit():
        return resnet(int(key[6:]), batch=batch, image=image)
    if key in ZOO:
        return ZOO[key](batch=batch, image=image)
    raise GraphError(f"unknown model {model!r}; known: {sorted(ZOO) + ['resnet<N>']}")
