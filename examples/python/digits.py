"""Train the digits MLP or LeNet from numpy through pyd4j (the same networks as the Java
examples org.pyd4j.examples.DigitsMlp / DigitsLeNet), with async prefetch and a chosen
workspace mode, and report test accuracy.

    .venv/bin/python examples/python/digits.py --net mlp --epochs 30 --prefetch 4
    .venv/bin/python examples/python/digits.py --net lenet --workspaces NONE
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[1] / "data" / "digits.csv"
DEFAULT_EPOCHS = {"mlp": 30, "lenet": 30}


def load(path: Path = DATA) -> dict[str, np.ndarray]:
    """Train/test features in [0, 1] (float32) and one-hot labels, as DigitsData.java reads them."""
    rows = np.loadtxt(path, delimiter=",", dtype=np.int64)
    split, label, pixels = rows[:, 0], rows[:, 1], rows[:, 2:].astype(np.float32) / 16.0
    onehot = np.eye(10, dtype=np.float32)[label]
    train, test = split == 0, split == 1
    return {"x_train": np.ascontiguousarray(pixels[train]), "y_train": onehot[train],
            "x_test": np.ascontiguousarray(pixels[test]), "y_test": onehot[test]}


def _dl4j():
    import jpype

    conf = jpype.JPackage("org").deeplearning4j.nn.conf
    return {
        "NNC": jpype.JClass("org.deeplearning4j.nn.conf.NeuralNetConfiguration"),
        "L": conf.layers, "Act": jpype.JClass("org.nd4j.linalg.activations.Activation"),
        "LF": jpype.JClass("org.nd4j.linalg.lossfunctions.LossFunctions$LossFunction"),
        "Adam": jpype.JClass("org.nd4j.linalg.learning.config.Adam"),
        "WI": jpype.JClass("org.deeplearning4j.nn.weights.WeightInit"),
        "CM": jpype.JClass("org.deeplearning4j.nn.conf.ConvolutionMode"),
        "IT": jpype.JClass("org.deeplearning4j.nn.conf.inputs.InputType"),
        "Pool": jpype.JClass("org.deeplearning4j.nn.conf.layers.SubsamplingLayer$PoolingType"),
        "MLN": jpype.JClass("org.deeplearning4j.nn.multilayer.MultiLayerNetwork"),
        "jpype": jpype,
    }


def mlp(seed: int = 42):
    """64 - 256 - 128 - 10, as DigitsMlp.conf()."""
    d = _dl4j()
    L, Act = d["L"], d["Act"]
    conf = (d["NNC"].Builder().seed(seed).updater(d["Adam"](5e-3)).weightInit(d["WI"].XAVIER)
            .list(L.DenseLayer.Builder().nIn(64).nOut(256).activation(Act.RELU).build(),
                  L.DenseLayer.Builder().nIn(256).nOut(128).activation(Act.RELU).build(),
                  L.OutputLayer.Builder(d["LF"].MCXENT).nIn(128).nOut(10).activation(Act.SOFTMAX).build())
            .build())
    net = d["MLN"](conf)
    net.init()
    return net


def lenet(seed: int = 42):
    """conv3x3x20 - pool2 - conv3x3x50 - pool2 - dense128 - softmax10 on 8x8x1, as DigitsLeNet.conf()."""
    d = _dl4j()
    L, Act, jpype = d["L"], d["Act"], d["jpype"]
    ints = jpype.JArray(jpype.JInt)
    builder = (d["NNC"].Builder().seed(seed).updater(d["Adam"](1e-2)).weightInit(d["WI"].XAVIER)
               .convolutionMode(d["CM"].Same))
    conf = (builder.list(
        L.ConvolutionLayer.Builder(ints([3, 3])).nOut(20).activation(Act.RELU).build(),
        L.SubsamplingLayer.Builder(d["Pool"].MAX).kernelSize(ints([2, 2])).stride(ints([2, 2])).build(),
        L.ConvolutionLayer.Builder(ints([3, 3])).nOut(50).activation(Act.RELU).build(),
        L.SubsamplingLayer.Builder(d["Pool"].MAX).kernelSize(ints([2, 2])).stride(ints([2, 2])).build(),
        L.DenseLayer.Builder().nOut(128).activation(Act.RELU).build(),
        L.OutputLayer.Builder(d["LF"].MCXENT).nOut(10).activation(Act.SOFTMAX).build())
        .setInputType(d["IT"].convolutional(8, 8, 1)).build())
    net = d["MLN"](conf)
    net.init()
    return net


NETS = {"mlp": mlp, "lenet": lenet}


def features_for(name: str, x: np.ndarray) -> np.ndarray:
    """LeNet takes NCHW images; the MLP takes flat rows."""
    return np.ascontiguousarray(x.reshape(-1, 1, 8, 8)) if name == "lenet" else x


def train(name: str = "mlp", epochs: int | None = None, prefetch: int = 4, batch_size: int = 64,
          workspaces: str = "ENABLED", seed: int = 42, progress: bool = True) -> dict:
    """Build, train from numpy through pyd4j, evaluate; returns a JSON-able summary."""
    import pyd4j.jvm
    from pyd4j.data import NumpyBatches
    from pyd4j.train import evaluate, fit
    from pyd4j.workspaces import set_workspace_mode

    pyd4j.jvm.info()
    digits = load()
    net = NETS[name](seed)
    set_workspace_mode(net, training=workspaces, inference=workspaces)
    x_train, x_test = features_for(name, digits["x_train"]), features_for(name, digits["x_test"])
    batches = NumpyBatches(x_train, digits["y_train"], batch_size=batch_size, shuffle=True, seed=seed)
    result = fit(net, batches, epochs=epochs or DEFAULT_EPOCHS[name], prefetch=prefetch, progress=progress)
    accuracy = evaluate(net, x_test, digits["y_test"])
    return {"example": f"digits_{name}", "workspace_mode": workspaces, "test_accuracy": accuracy,
            **{k: v for k, v in result.to_dict().items() if k != "epoch_seconds"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--net", choices=sorted(NETS), default="mlp")
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--prefetch", type=int, default=4)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--workspaces", choices=["ENABLED", "NONE"], default="ENABLED")
    parser.add_argument("--json", action="store_true", help="print one JSON document, no progress bar")
    args = parser.parse_args()
    summary = train(args.net, args.epochs, args.prefetch, args.batch, args.workspaces, progress=not args.json)
    if args.json:
        from pyd4j.output import emit_json

        emit_json(summary)
    else:
        print(f"{summary['example']}: test accuracy {summary['test_accuracy']:.3f} "
              f"({summary['samples_per_s']:,.0f} samples/s, workspaces {args.workspaces})")


if __name__ == "__main__":
    main()
