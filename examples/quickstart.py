"""Quickstart: ND4J from Python on numpy data, without copying the data.

    .venv/bin/python examples/quickstart.py

Least squares on a small, real-looking problem: numpy makes the data, ND4J (in this process,
on its CPU backend) does the linear algebra on the same memory, numpy checks the answer.
"""

from __future__ import annotations

import numpy as np

import pyd4j.jvm
import pyd4j.nd as nd


def main() -> None:
    pyd4j.jvm.start(heap_max="1g", javacpp_maxbytes="2g")
    import jpype  # noqa: PLC0415  (after start: Java classes are importable)

    Nd4j = jpype.JClass("org.nd4j.linalg.factory.Nd4j")
    InvertMatrix = jpype.JClass("org.nd4j.linalg.inverse.InvertMatrix")

    rng = np.random.default_rng(42)
    features = rng.normal(size=(10_000, 8))                     # float64, C order
    true_w = np.arange(1.0, 9.0)
    target = features @ true_w + rng.normal(scale=0.01, size=10_000)

    reference = np.linalg.lstsq(features, target, rcond=None)[0]   # numpy's answer, for the check

    X = nd.from_numpy(features)                                 # no copy: ND4J reads numpy's memory
    y = nd.from_numpy(target.reshape(-1, 1))
    print(f"ND4J {X.dataType()} array {list(X.shape())} shares numpy's memory: {nd.is_shared(features, X)}")

    with pyd4j.jvm.java_errors():                               # Java exceptions -> Python ones
        xtx = X.transpose().mmul(X)                             # 8x8 Gram matrix on ND4J's BLAS
        xty = X.transpose().mmul(y)
        w = InvertMatrix.invert(xtx, False).mmul(xty)           # normal equations
        mean = X.mean(jpype.JArray(jpype.JInt)([0]))            # column means
        X.subiRowVector(mean)                                   # in place: numpy sees centred data

    w_np = nd.to_numpy(w).ravel()                               # numpy view of ND4J's result
    print("weights (ND4J):", np.round(w_np, 3))
    assert np.allclose(w_np, reference, atol=1e-6), (w_np, reference)
    centred = bool(np.allclose(features.mean(axis=0), 0, atol=1e-12))
    assert centred, "ND4J's in-place centring should be visible in numpy"
    print("matches numpy's lstsq; ND4J's in-place centring is visible in numpy:", centred)
    print(f"Nd4j backend: {Nd4j.getBackend().getClass().getSimpleName()}")


if __name__ == "__main__":
    main()
