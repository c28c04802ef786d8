"""Python-fed DL4J training: real networks, real AsyncDataSetIterator threads."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import pyd4j.jvm

from pyd4j import data
from pyd4j.train import evaluate, fit

pytestmark = pytest.mark.jvm


def threads_back_to(names: list[str], within_s: float = 60.0) -> bool:
    """Wait until the prefetch threads are those in `names` (threads end asynchronously)."""
    deadline = time.monotonic() + within_s
    while data.prefetch_thread_names() != names and time.monotonic() < deadline:
        time.sleep(0.05)
    return data.prefetch_thread_names() == names


def run_with_deadline(fn, seconds: float = 300.0):
    """Run fn in a thread; fail (instead of hanging the suite) if it does not finish in time."""
    box: dict = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001
            box["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"did not finish within {seconds}s (hang or deadlock)"
    return box


def test_fit_from_numpy_learns(net, xy):
    x, y = xy
    before = evaluate(net, x, y)
    result = fit(net, data.NumpyBatches(x, y, batch_size=32), epochs=3, prefetch=4, progress=False)
    assert result.samples == 3 * len(x) and result.batches == 3 * 19
    assert result.samples_per_s > 0 and result.peak_offheap > 0
    assert before < 0.9 and evaluate(net, x, y) >= 0.95


def jpype_long(i: int):
    import jpype

    return jpype.JLong(i)


def test_batches_reach_nd4j_without_copy(jvm, xy):
    from pyd4j.nd import to_numpy

    x, y = xy
    ds = data.to_dataset((x[:16], y[:16]))
    x[0, 0] = 123.0  # numpy write is seen by ND4J: same memory
    assert float(ds.getFeatures().getDouble(jpype_long(0))) == 123.0
    assert np.array_equal(to_numpy(ds.getLabels(), copy=True), y[:16])


def test_python_exception_reaches_caller_as_itself(net, xy):
    x, y = xy
    boom = ValueError("bad record 7")
    batches = data.NumpyBatches(x, y, batch_size=32, shuffle=False)

    def source():
        for i, b in enumerate(batches):
            if i == 7:
                raise boom
            yield b

    before = data.prefetch_thread_names()
    it = data.iterator(source, prefetch=3)
    box = run_with_deadline(lambda: fit(net, it, epochs=1, progress=False))
    assert box.get("error") is boom  # the very object, not a Java wrapper
    assert it.batches_consumed == 7  # everything before the failure was trained on
    it.shutdown()
    assert threads_back_to(before)  # no leaked prefetch thread


@pytest.mark.parametrize("prefetch", [1, 8])
def test_exception_on_first_batch_and_in_factory(net, xy, prefetch):
    def first():
        raise KeyError("no such shard")
        yield  # noqa: unreachable  (makes this a generator function)

    box = run_with_deadline(lambda: fit(net, first, prefetch=prefetch, progress=False))
    assert isinstance(box.get("error"), KeyError) and "no such shard" in str(box["error"])
    box = run_with_deadline(lambda: fit(net, lambda: 42, prefetch=prefetch, progress=False))
    assert isinstance(box.get("error"), TypeError) and "int" in str(box["error"])
    box = run_with_deadline(lambda: fit(net, [("not", "arrays", 1, 2, 3)], progress=False))
    assert isinstance(box.get("error"), TypeError) and "length 5" in str(box["error"])


def test_net_fit_directly_also_gets_original_exception(net, xy):
    x, y = xy

    def source():
        yield (x[:8], y[:8])
        raise ZeroDivisionError("division in my pipeline")

    with data.iterator(source, prefetch=2) as it:
        with pytest.raises(ZeroDivisionError, match="my pipeline"):
            with pyd4j.jvm.java_errors():
                net.fit(it.java)


def test_reset_reads_source_again_each_epoch(net, xy):
    x, y = xy
    calls = []

    def factory():
        calls.append(1)
        return data.NumpyBatches(x[:100], y[:100], batch_size=25, shuffle=False)

    it = data.iterator(factory, prefetch=2)
    result = fit(net, it, epochs=4, progress=False)
    it.shutdown()
    assert len(calls) == 4 and result.samples == 400 and result.batches == 16
    it2 = data.iterator([(x[:10], y[:10])] * 3, prefetch=2)
    seen = []
    for _ in range(2):
        it2.reset()
        while it2.java.hasNext():
            seen.append(int(it2.java.next().numExamples()))
    it2.shutdown()
    assert seen == [10] * 6


def test_one_shot_generator_refuses_several_epochs(net, xy):
    x, y = xy
    gen = (b for b in data.NumpyBatches(x, y, 50))
    with pytest.raises(ValueError, match="one-shot"):
        fit(net, gen, epochs=2, progress=False)
    assert fit(net, (b for b in data.NumpyBatches(x, y, 50)), epochs=1, progress=False).samples == len(x)


def test_preprocessor_runs_on_copies(jvm, xy):
    import jpype

    x, y = xy
    x = x.copy()
    original = x.copy()
    scaler = jpype.JClass("org.nd4j.linalg.dataset.api.preprocessor.NormalizerMinMaxScaler")()
    scaler.fit(data.to_dataset((x, y)))
    with data.iterator(data.NumpyBatches(x, y, 100, shuffle=False), prefetch=2, preprocessor=scaler) as it:
        feats = []
        while it.java.hasNext():
            from pyd4j.nd import to_numpy
            feats.append(to_numpy(it.java.next().getFeatures().detach(), copy=True))
    scaled = np.concatenate(feats)
    expected = (original - original.min(0)) / (original.max(0) - original.min(0))
    np.testing.assert_allclose(scaled, expected, atol=1e-5)
    np.testing.assert_array_equal(x, original)  # the user's numpy data was not scaled in place


def test_prefetch_depth_is_validated(jvm, xy):
    with pytest.raises(ValueError, match="prefetch=0"):
        data.iterator([xy], prefetch=0)


def test_computation_graph_multidataset(jvm, xy):
    import jpype

    x, y = xy
    NNC = jpype.JClass("org.deeplearning4j.nn.conf.NeuralNetConfiguration")
    L = jpype.JPackage("org").deeplearning4j.nn.conf.layers
    Act = jpype.JClass("org.nd4j.linalg.activations.Activation")
    LF = jpype.JClass("org.nd4j.linalg.lossfunctions.LossFunctions$LossFunction")
    Adam = jpype.JClass("org.nd4j.linalg.learning.config.Adam")
    S = jpype.JArray(jpype.JString)
    conf = (NNC.Builder().seed(3).updater(Adam(1e-2)).graphBuilder().addInputs(S(["a", "b"]))
            .addLayer("da", L.DenseLayer.Builder().nIn(4).nOut(16).activation(Act.RELU).build(), S(["a"]))
            .addLayer("db", L.DenseLayer.Builder().nIn(4).nOut(16).activation(Act.RELU).build(), S(["b"]))
            .addLayer("out", L.OutputLayer.Builder(LF.MCXENT).nIn(32).nOut(3).activation(Act.SOFTMAX).build(),
                      S(["da", "db"]))
            .setOutputs(S(["out"])).build())
    graph = jpype.JClass("org.deeplearning4j.nn.graph.ComputationGraph")(conf)
    graph.init()

    class Split:
        def __iter__(self):
            for f, l in data.NumpyBatches(x, y, 50):
                yield ([np.ascontiguousarray(f[:, :4]), np.ascontiguousarray(f[:, 4:])], [l])

    result = fit(graph, Split(), epochs=5, prefetch=3, progress=False)
    assert result.samples == 5 * len(x)
    out = graph.output(False, jpype.JArray(jpype.JClass("org.nd4j.linalg.api.ndarray.INDArray"))(
        [data.to_dataset((np.ascontiguousarray(x[:, :4]), y)).getFeatures(),
         data.to_dataset((np.ascontiguousarray(x[:, 4:]), y)).getFeatures()]))[0]
    from pyd4j.nd import to_numpy
    acc = (to_numpy(out, copy=True).argmax(1) == y.argmax(1)).mean()
    assert acc >= 0.9


def test_java_error_mid_fit_stops_prefetch_thread(net, xy):
    """A DL4J failure on the fit thread (bad batch shape) while the prefetch queue is full:
    the Java error reaches Python and fit() stops the prefetch thread blocked on the queue."""
    from pyd4j.jvm import JavaError

    x, y = xy
    good = list(data.NumpyBatches(x, y, batch_size=20, shuffle=False))
    bad = (np.ones((20, 5), np.float32), y[:20])  # 5 features, the net takes 8
    before = data.prefetch_thread_names()
    box = run_with_deadline(lambda: fit(net, good[:3] + [bad] + good[3:], prefetch=2, progress=False))
    assert isinstance(box.get("error"), JavaError), box
    assert threads_back_to(before)


def _drain(it) -> list[np.ndarray]:
    from pyd4j.nd import to_numpy

    out = []
    while it.java.hasNext():
        ds = it.java.next()
        out.append((to_numpy(ds.getFeatures().dup(), copy=True), to_numpy(ds.getLabels().dup(), copy=True)))
    return out


@pytest.mark.parametrize("slice_in_java", [True, False])
def test_numpy_batches_in_java_and_python_agree(jvm, xy, slice_in_java):
    x, y = xy
    x = x[:103].copy()
    y = y[:103].copy()
    with data.iterator(data.NumpyBatches(x, y, 25, shuffle=False, slice_in_java=slice_in_java), prefetch=2) as it:
        batches = _drain(it)
    assert [len(f) for f, _ in batches] == [25, 25, 25, 25, 3]
    np.testing.assert_array_equal(np.concatenate([f for f, _ in batches]), x)
    np.testing.assert_array_equal(np.concatenate([l for _, l in batches]), y)
    with data.iterator(data.NumpyBatches(x, y, 25, shuffle=True, seed=5, slice_in_java=slice_in_java),
                       prefetch=2) as it:
        epochs = []
        for _ in range(2):
            it.reset()
            epochs.append(_drain(it))
    for epoch in epochs:  # every row exactly once, with its own label
        f = np.concatenate([b[0] for b in epoch])
        l = np.concatenate([b[1] for b in epoch])
        order = np.lexsort(f.T[::-1])
        ref = np.lexsort(x.T[::-1])
        np.testing.assert_array_equal(f[order], x[ref])
        np.testing.assert_array_equal(l[order], y[ref])
    assert not np.array_equal(np.concatenate([b[0] for b in epochs[0]]), np.concatenate([b[0] for b in epochs[1]]))
