"""Python-fed training with async prefetch vs an in-JVM ListDataSetIterator, and depth 1..16.

    .venv/bin/python benchmarks/prefetch.py [--net lenet] [--threads 1] [--out benchmarks/results/prefetch.json]

In one process and one run, the same digits network (examples/python/digits.py) is trained on
the same batches (digits training split, batch 64, no shuffling on either side):

(a) from Python: NumpyBatches -> pyd4j.train.fit with AsyncDataSetIterator of depth `--depth`,
    the numpy arrays wrapped once without copies and sliced into batches on the Java side
    (pyd4j's default for NumpyBatches); and (a') the same with every batch produced by Python
    and handed over through the Python callback (slice_in_java=False: the path of any Python
    iterable or generator);
(b) from the JVM: the batches copied into ND4J once, one list element per minibatch, in a
    ListDataSetIterator, through DL4J's own fit(iterator) (which wraps it in AsyncDataSetIterator,
    depth 2) — the usual Java job, with no per-batch work left at all.

After `--warmup` rounds of both, runs of (a) and (b) alternate, `--repeats` times, each `--epochs`
epochs; figures are medians (best runs also kept), and the target is (a)/(b) >= 0.9. After each
switch between the paths one settling run is discarded: switching makes the JIT recompile
shared call sites (measured: C2 compiler threads took up to a quarter of a core after a switch). Then samples/s for prefetch depths 1..16 (interleaved, median).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from harness import RESULTS, ROOT, Recorder, order


def _digits_example():
    spec = importlib.util.spec_from_file_location("digits_example", ROOT / "examples" / "python" / "digits.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--net", choices=["mlp", "lenet"], default="lenet")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--depth", type=int, default=4, help="prefetch depth of the Python-fed runs (a)")
    ap.add_argument("--epochs", type=int, default=None,
                    help="epochs per timed run (default: lenet 2, mlp 20, so each run lasts about a second; "
                         "shorter runs measure fit()'s fixed start-up, not throughput)")
    ap.add_argument("--warmup", type=int, default=5, help="warm-up rounds of both paths")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--curve-repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1,
                    help="OMP_NUM_THREADS for ND4J (1 on small shared machines; 0 = ND4J's default)")
    ap.add_argument("--out", default=str(RESULTS / "prefetch.json"))
    return ap


class Paths:
    """The three ways of feeding the same batches to the same network: (a) Python-fed, sliced in the JVM;
    (a') Python-fed, one callback a batch; (b) DL4J's own fit() on a ListDataSetIterator."""

    def __init__(self, args: argparse.Namespace) -> None:
        import jpype

        from pyd4j.data import NumpyBatches
        from pyd4j.nd import from_numpy

        self.args = args
        digits = _digits_example()
        d = digits.load()
        x = digits.features_for(args.net, d["x_train"])
        y = d["y_train"]
        self.net = digits.NETS[args.net](42)
        self.batches = NumpyBatches(x, y, batch_size=args.batch, shuffle=False)
        self.py_batches = NumpyBatches(x, y, batch_size=args.batch, shuffle=False, slice_in_java=False)
        data_set = jpype.JClass("org.nd4j.linalg.dataset.DataSet")
        java_list = jpype.JClass("java.util.ArrayList")()
        for f, l in self.batches:
            java_list.add(data_set(from_numpy(f, copy=True), from_numpy(l, copy=True)))
        # one list element per minibatch, so one element per next(): ListDataSetIterator's second
        # argument counts list elements, not examples
        self.list_iter = jpype.JClass("org.deeplearning4j.datasets.iterator.utilty.ListDataSetIterator")(java_list, 1)
        self.n = len(x)
        self.waits: list[float] = []

    def python(self) -> float:
        from pyd4j.train import fit

        result = fit(self.net, self.batches, epochs=self.args.epochs, prefetch=self.args.depth, progress=False)
        self.waits.append(result.wait_seconds / result.seconds)
        return result.samples_per_s

    def callback(self) -> float:
        from pyd4j.train import fit

        return fit(self.net, self.py_batches, epochs=self.args.epochs, prefetch=self.args.depth,
                   progress=False).samples_per_s

    def jvm(self) -> float:
        t = time.perf_counter()
        for _ in range(self.args.epochs):
            self.list_iter.reset()
            self.net.fit(self.list_iter)
        return self.n * self.args.epochs / (time.perf_counter() - t)


def measure(p: Paths, warmup: int, repeats: int) -> dict[str, list[float]]:
    """Warm-up rounds of every path, then `repeats` rounds in rotated order, each after a settling run."""
    runners: dict[str, Callable[[], float]] = {"python": p.python, "callback": p.callback, "jvm": p.jvm}
    for _ in range(warmup):  # JIT (all paths), workspace sizes
        p.python(), p.callback(), p.jvm()
    runs: dict[str, list[float]] = {k: [] for k in runners}
    for i in range(repeats):
        for side in order(list(runners), i, rotate=True):
            runners[side]()  # settling run after the switch (JIT re-profiles shared call sites), not counted
            runs[side].append(runners[side]())
    return runs


def main() -> None:
    args = parser().parse_args()
    if args.epochs is None:
        args.epochs = {"lenet": 2, "mlp": 20}[args.net]
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # read when ND4J's native library loads
    import pyd4j.jvm
    from pyd4j.prefetch_tuning import tune_prefetch

    rec = Recorder("prefetch")
    pyd4j.jvm.start(heap_max="2g")
    p = Paths(args)
    runs = measure(p, args.warmup, args.repeats)
    python_runs, callback_runs, jvm_runs = runs["python"], runs["callback"], runs["jvm"]
    a, b = statistics.median(python_runs), statistics.median(jvm_runs)
    a_cb = statistics.median(callback_runs)
    report = tune_prefetch(p.net, p.py_batches, depths=range(1, 17), epochs=1, repeats=args.curve_repeats,
                           warmup_epochs=0)
    doc: dict[str, Any] = rec.doc
    doc.update({
        "network": f"digits_{args.net}", "params": int(p.net.numParams()), "batch": args.batch, "samples": p.n,
        "epochs_per_run": args.epochs, "repeats": args.repeats,
        "python_fed": {"prefetch": args.depth, "samples_per_s": a, "runs": python_runs,
                       "fit_waited_for_data_fraction": statistics.median(p.waits)},
        "python_callback_per_batch": {"prefetch": args.depth, "samples_per_s": a_cb, "runs": callback_runs,
                                      "ratio_over_jvm": a_cb / b},
        "jvm_list_iterator": {"prefetch": 2, "samples_per_s": b, "runs": jvm_runs},
        "ratio_python_over_jvm": a / b, "target_ratio": 0.9, "meets_target": a / b >= 0.9,
        "ratio_best_runs": max(python_runs) / max(jvm_runs),
        "depth_curve": [{"depth": r.depth, "samples_per_s": r.samples_per_s, "runs": r.runs}
                        for r in report.results],
        "recommended_depth": report.recommended, "best_depth": report.best, "omp_threads": args.threads or None,
    })
    rec.write(args.out, indent=2)
    print(json.dumps({k: doc[k] for k in ("network", "ratio_python_over_jvm", "recommended_depth")}))
    print(f"(a) python-fed {a:,.0f} samples/s  (a') per-batch callback {a_cb:,.0f}  "
          f"(b) ListDataSetIterator {b:,.0f} samples/s  ratio {a / b:.2f} / {a_cb / b:.2f}")
    print("depth curve: " + ", ".join(f"{r.depth}:{r.samples_per_s:,.0f}" for r in report.results))


if __name__ == "__main__":
    main()
