"""Fits the `cpu` cost profile (devices.json) to DL4J layers timed with ND4J on this machine.

Each layer is a real DL4J layer (ConvolutionLayer, DenseLayer, SubsamplingLayer,
BatchNormalization, ActivationLayer) in a one-layer MultiLayerNetwork, run through
`Layer.activate(x, training=true)` and `Layer.backpropGradient(eps)` in the in-process JVM (the
median of a few repeats after warm-up). The same layer built in a pyd4j graph gives the cost
model's FLOPs and bytes; the fit is the cost model's own roofline plus a fixed cost per step
(ND4J's op dispatch), t = overhead + max(FLOPs / FLOP/s, bytes / bandwidth), three parameters
fitted to every forward and backward time by least squares on log times. Reports every layer's
measured vs modelled time.

Timings depend on the machine and its load (the JSON records the load average): the fitted
profile is this machine's, not a CI check. Writes benchmarks/results/cpu_profile.json; with
--write, also the `cpu` entry of pyd4j/sched/devices.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from harness import RESULTS as RESULTS_DIR
from harness import ROOT, Recorder
from pyd4j.sched.costmodel import CostModel, DeviceProfile
from pyd4j.sched.graph import Graph

RESULTS = RESULTS_DIR / "cpu_profile.json"
DEVICES = ROOT / "pyd4j" / "sched" / "devices.json"
BATCH = 8
# (kind, channels/features in, out, spatial size, kernel)
LAYERS = [
    ("CONV", 16, 32, 32, 3), ("CONV", 32, 64, 16, 3), ("CONV", 64, 64, 16, 1),
    ("CONV", 3, 32, 64, 5),
    ("FC", 1024, 1024, 0, 0), ("FC", 4096, 512, 0, 0), ("FC", 512, 256, 0, 0),
    ("POOL", 32, 32, 32, 2), ("POOL", 64, 64, 32, 2),
    ("BN", 32, 32, 32, 0), ("BN", 64, 64, 16, 0),
    ("ACT", 32, 32, 32, 0), ("ACT", 64, 64, 32, 0),
]
COMPUTE = ("CONV", "FC")


def graph_layer(kind: str, cin: int, cout: int, hw: int, k: int) -> tuple[Graph, int]:
    """The measured layer in a pyd4j graph (its FLOPs and bytes are the cost model's inputs)."""
    g = Graph("probe", BATCH)
    x = g.data(cin, hw, hw) if kind != "FC" else g.data(cin)
    if kind == "CONV":
        i = g.conv(x, cout, k, 1, k // 2)
    elif kind == "FC":
        i = g.fc(x, cout)
    elif kind == "POOL":
        i = g.pool(x, k, k)
    elif kind == "BN":
        i = g.bn(x)
    else:
        i = g.act(x)
    return g, i


def dl4j_layer(kind: str, cin: int, cout: int, hw: int, k: int):
    """(DL4J layer object, input array) for the same layer."""
    import jpype

    J = jpype.JClass
    Act = J("org.nd4j.linalg.activations.Activation")
    L = "org.deeplearning4j.nn.conf.layers."
    if kind == "CONV":
        layer = (J(L + "ConvolutionLayer$Builder")(k, k).nIn(cin).nOut(cout).stride(1, 1)
                 .padding(k // 2, k // 2).activation(Act.IDENTITY).build())
    elif kind == "FC":
        layer = J(L + "DenseLayer$Builder")().nIn(cin).nOut(cout).activation(Act.IDENTITY).build()
    elif kind == "POOL":
        pt = J(L + "SubsamplingLayer$PoolingType").MAX
        layer = J(L + "SubsamplingLayer$Builder")(pt).kernelSize(k, k).stride(k, k).build()
    elif kind == "BN":
        layer = J(L + "BatchNormalization$Builder")().nOut(cin).build()
    else:
        layer = J(L + "ActivationLayer$Builder")().activation(Act.RELU).build()
    builder = J("org.deeplearning4j.nn.conf.NeuralNetConfiguration$Builder")().seed(1)
    builder = builder.list(jpype.JArray(J("org.deeplearning4j.nn.conf.layers.Layer"))([layer]))
    InputType = J("org.deeplearning4j.nn.conf.inputs.InputType")
    if kind == "FC":
        builder = builder.setInputType(InputType.feedForward(cin))
        shape = [BATCH, cin]
    else:
        builder = builder.setInputType(InputType.convolutional(hw, hw, cin))
        shape = [BATCH, cin, hw, hw]
    net = J("org.deeplearning4j.nn.multilayer.MultiLayerNetwork")(builder.build())
    net.init()
    net.initGradientsView()  # backpropGradient writes into the flattened gradient views
    x = J("org.nd4j.linalg.factory.Nd4j").rand(jpype.JArray(jpype.JLong)(shape))
    return net.getLayer(0), x


def time_layer(layer, x, repeats: int) -> tuple[float, float]:
    """Median forward and backward seconds of a DL4J layer (after two warm-up runs)."""
    import jpype

    mgr = jpype.JClass("org.deeplearning4j.nn.workspace.LayerWorkspaceMgr").noWorkspaces()
    fwd, bwd = [], []
    for r in range(repeats + 2):
        t0 = time.perf_counter()
        y = layer.activate(x, True, mgr)
        t1 = time.perf_counter()
        layer.backpropGradient(y.dup(), mgr)
        t2 = time.perf_counter()
        if r >= 2:
            fwd.append(t1 - t0)
            bwd.append(t2 - t1)
    return statistics.median(fwd), statistics.median(bwd)


def fit(rows: list[dict]) -> tuple[float, float, float]:
    """(FLOP/s, bytes/s, seconds per step) minimising the squared log error of every step."""
    import numpy as np
    from scipy.optimize import least_squares

    flops = np.array([r[k] for r in rows for k in ("fwd_flops", "bwd_flops")])
    nbytes = np.array([r[k] for r in rows for k in ("fwd_bytes", "bwd_bytes")])
    t = np.array([r[k] for r in rows for k in ("measured_fwd_s", "measured_bwd_s")])

    def residual(p: np.ndarray) -> np.ndarray:
        f, b, c = np.exp(p)
        return np.log(c + np.maximum(flops / f, nbytes / b)) - np.log(t)

    start = np.log([flops.sum() / t.sum(), nbytes.sum() / t.sum(), t.min() / 2])
    f, b, c = np.exp(least_squares(residual, start).x)
    return float(f), float(b), float(c)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--write", action="store_true", help="update the cpu entry of devices.json")
    args = ap.parse_args()
    rec = Recorder("cpu_profile")
    from pyd4j import jvm

    jvm.start()
    rows = []
    for spec in LAYERS:
        g, i = graph_layer(*spec)
        layer = g.layers[i]
        nb = g.deps.nbytes
        touched = sum(nb[5 * j] for j in layer.inputs) + nb[5 * i] + nb[5 * i + 2]
        tf, tb = time_layer(*dl4j_layer(*spec), args.repeats)
        rows.append({"layer": spec[0], "spec": list(spec[1:]), "fwd_flops": layer.fwd_flops,
                     "bwd_flops": layer.bwd_flops, "fwd_bytes": touched, "bwd_bytes": 2 * touched,
                     "measured_fwd_s": tf, "measured_bwd_s": tb})
        print(spec, f"fwd {tf * 1e3:.3f} ms  bwd {tb * 1e3:.3f} ms", flush=True)
    flops_per_s, bytes_per_s, overhead = fit(rows)
    profile = {"name": f"CPU via ND4J ({os.cpu_count()} cores), fitted",
               "memory_bytes": 16 * 2**30, "tflops": float(f"{flops_per_s / 1e12:.4g}"),
               "efficiency": 1.0, "mem_gbps": float(f"{bytes_per_s / 1e9:.4g}"),
               "step_overhead_s": float(f"{overhead:.4g}"),
               "link_gbps": 1000.0, "disk_gbps": 1.0,
               "source": "benchmarks/cpu_profile.py: DL4J layers timed with ND4J (activate / "
                         "backpropGradient, batch 8) on a shared 2-core machine; step time = "
                         "step_overhead_s + max(FLOPs / tflops, bytes / mem_gbps), least squares "
                         "on log times (results/cpu_profile.json)"}
    cost = CostModel.for_device(DeviceProfile.from_json("cpu", profile))
    for r in rows:
        g, i = graph_layer(r["layer"], *r["spec"])
        f, b, _ = cost.layer_times(g)
        r["model_fwd_s"], r["model_bwd_s"] = f[i], b[i]
        r["ratio"] = (f[i] + b[i]) / (r["measured_fwd_s"] + r["measured_bwd_s"])
    ratios = [r["ratio"] for r in rows]
    doc = rec.doc
    doc.update({"batch": BATCH, "repeats": args.repeats, "profile": profile, "layers": rows,
                "model_over_measured": {"median": statistics.median(ratios), "min": min(ratios),
                                        "max": max(ratios)}})
    rec.write(RESULTS)
    print(json.dumps(doc["model_over_measured"]), json.dumps(profile))
    if args.write:
        write_profile(profile)


def write_profile(profile: dict) -> None:
    """Put the `cpu` entry into devices.json as one line, keeping the file's layout."""
    entry = f'    "cpu":       {json.dumps(profile)},'
    lines = DEVICES.read_text().splitlines()
    at = [k for k, line in enumerate(lines) if line.lstrip().startswith('"cpu":')]
    if at:
        lines[at[0]] = entry
    else:
        lines.insert(next(k for k, line in enumerate(lines) if '"devices": {' in line) + 1, entry)
    DEVICES.write_text("\n".join(lines) + "\n")
    json.loads(DEVICES.read_text())  # still valid


if __name__ == "__main__":
    main()
