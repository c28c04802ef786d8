"""Small real DL4J networks for the data/training tests."""

from __future__ import annotations

import numpy as np
import pytest


def mlp(n_in: int = 8, n_hidden: int = 32, n_out: int = 3, seed: int = 7):
    import jpype

    NNC = jpype.JClass("org.deeplearning4j.nn.conf.NeuralNetConfiguration")
    L = jpype.JPackage("org").deeplearning4j.nn.conf.layers
    Act = jpype.JClass("org.nd4j.linalg.activations.Activation")
    LF = jpype.JClass("org.nd4j.linalg.lossfunctions.LossFunctions$LossFunction")
    Adam = jpype.JClass("org.nd4j.linalg.learning.config.Adam")
    conf = (NNC.Builder().seed(seed).updater(Adam(1e-2))
            .list(L.DenseLayer.Builder().nIn(n_in).nOut(n_hidden).activation(Act.RELU).build(),
                  L.OutputLayer.Builder(LF.MCXENT).nIn(n_hidden).nOut(n_out).activation(Act.SOFTMAX).build())
            .build())
    net = jpype.JClass("org.deeplearning4j.nn.multilayer.MultiLayerNetwork")(conf)
    net.init()
    return net


def blobs(n: int = 600, n_in: int = 8, n_out: int = 3, seed: int = 0):
    """Separable Gaussian blobs: a net that trains reaches high accuracy quickly."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=4.0, size=(n_out, n_in))
    idx = rng.integers(0, n_out, n)
    x = (centers[idx] + rng.normal(size=(n, n_in))).astype(np.float32)
    y = np.eye(n_out, dtype=np.float32)[idx]
    return x, y


@pytest.fixture
def net(jvm):
    return mlp()


@pytest.fixture
def xy():
    return blobs()
