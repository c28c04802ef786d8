"""DL4J training fed from Python: `fit(net, source, epochs=…, prefetch=…)` with a progress bar.

    from pyd4j.data import NumpyBatches
    from pyd4j.train import fit
    result = fit(net, NumpyBatches(x, y, batch_size=64), epochs=10, prefetch=4)
    print(result.samples_per_s)

The source is read on DL4J's prefetch thread while fit() trains (see pyd4j.data). An exception
in the source stops fit() and is raised here as that same exception object.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from pyd4j.data.source import PrefetchIterator, iterator
from pyd4j.jvm.errors import java_errors


@dataclass
class MemorySample:
    """Process memory as ND4J/JavaCPP and the JVM see it (bytes)."""

    offheap: int        # resident minus JVM-committed heap and non-heap: ND4J arrays, workspaces
    physical: int       # JavaCPP Pointer.physicalBytes(): resident set of the process
    heap_used: int      # Java heap in use
    javacpp: int        # JavaCPP Pointer.totalBytes() (ND4J M2.1's CPU buffers are not counted here)


def memory_sample() -> MemorySample:
    import jpype  # noqa: PLC0415

    pointer = jpype.JClass("org.bytedeco.javacpp.Pointer")
    mx = jpype.JClass("java.lang.management.ManagementFactory").getMemoryMXBean()
    heap, nonheap = mx.getHeapMemoryUsage(), mx.getNonHeapMemoryUsage()
    physical = int(pointer.physicalBytes())
    return MemorySample(offheap=physical - int(heap.getCommitted()) - int(nonheap.getCommitted()),
                        physical=physical, heap_used=int(heap.getUsed()), javacpp=int(pointer.totalBytes()))


@dataclass
class FitResult:
    epochs: int
    samples: int
    batches: int
    seconds: float
    samples_per_s: float
    prefetch: int
    peak_offheap: int
    peak_physical: int
    score: float | None
    wait_seconds: float           # fit() waiting for the next batch; near 0 when prefetch hides the source
    epoch_seconds: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _is_graph(net) -> bool:
    return hasattr(net, "getConfiguration") and not hasattr(net, "getLayerWiseConfigurations")


def _wants_multi(net) -> bool:
    """A ComputationGraph with several inputs or outputs trains on MultiDataSets."""
    if not _is_graph(net):
        return False
    conf = net.getConfiguration()
    return conf.getNetworkInputs().size() > 1 or conf.getNetworkOutputs().size() > 1


class _Monitor(threading.Thread):
    """Samples memory and consumed samples while fit() runs; drives the progress bar."""

    def __init__(self, it: PrefetchIterator, total: int | None, epochs: int, show: bool, interval: float = 0.25):
        super().__init__(name="pyd4j-fit-monitor", daemon=True)
        self.it, self.total, self.epochs, self.show, self.interval = it, total, epochs, show, interval
        self.stop_event = threading.Event()
        self.peak_offheap = 0
        self.peak_physical = 0
        self.epoch = 0
        self.t0 = time.perf_counter()

    def sample(self) -> MemorySample:
        m = memory_sample()
        self.peak_offheap = max(self.peak_offheap, m.offheap)
        self.peak_physical = max(self.peak_physical, m.physical)
        return m

    def run(self) -> None:
        from pyd4j.jvm.core import detach  # noqa: PLC0415

        try:
            self._run()
        finally:
            detach()  # this thread used Java: leave no attached Java thread behind

    def _run(self) -> None:
        if not self.show:
            while not self.stop_event.wait(self.interval):
                self.sample()
            return
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: PLC0415

        from pyd4j.output import human_bytes  # noqa: PLC0415

        columns = [TextColumn("epoch {task.fields[epoch]}/{task.fields[epochs]}"), BarColumn(),
                   TextColumn("{task.completed:,.0f} samples"), TextColumn("{task.fields[rate]}"),
                   TextColumn("off-heap {task.fields[offheap]} rss {task.fields[rss]}"), TimeElapsedColumn()]
        with Progress(*columns, transient=False) as progress:
            task = progress.add_task("fit", total=self.total, epoch=1, epochs=self.epochs, rate="-",
                                     offheap="-", rss="-")
            while True:
                stopping = self.stop_event.wait(self.interval)
                m = self.sample()
                done = self.it.samples_consumed
                elapsed = max(time.perf_counter() - self.t0, 1e-9)
                progress.update(task, completed=done, epoch=min(self.epoch + 1, self.epochs),
                                rate=f"{done / elapsed:,.0f} samples/s",
                                offheap=human_bytes(m.offheap), rss=human_bytes(m.physical))
                if stopping:
                    break


def fit(net, source: Any, epochs: int = 1, prefetch: int = 4, batch_size: int = 0, progress: bool = True,
        preprocessor: Any = None, copy_before_preprocess: bool = True, use_workspace: bool = True,
        multi: bool | None = None) -> FitResult:
    """Train a DL4J MultiLayerNetwork or ComputationGraph on batches from Python.

    source: a re-iterable of batches (e.g. pyd4j.data.NumpyBatches), a function returning an
    iterable (called every epoch), a one-shot generator (epochs=1 only), or a PrefetchIterator.
    Batches: (features, labels[, features_mask, labels_mask]) numpy arrays, a dict, or a DataSet;
    lists of arrays per slot for multi-input/-output graphs.
    prefetch: async queue depth (DL4J's own fit() fixes 2); pyd4j.data.tune.tune_prefetch measures it.
    """
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs={epochs!r} must be an int >= 1")
    owned = not isinstance(source, PrefetchIterator)
    if owned:
        multi = _wants_multi(net) if multi is None else multi
        it = iterator(source, prefetch=prefetch, batch_size=batch_size, multi=multi, preprocessor=preprocessor,
                      copy_before_preprocess=copy_before_preprocess, use_workspace=use_workspace)
    else:
        it = source
    if epochs > 1 and not it.source.resetSupported():
        if owned:
            it.shutdown()
        raise ValueError(
            f"epochs={epochs} but the source is a one-shot iterator/generator; pass a function that returns "
            f"a new iterable per epoch (e.g. lambda: my_batches()) or a re-iterable such as NumpyBatches")
    total = None
    try:
        total = epochs * len(it.source.source.features)  # NumpyBatches knows its size
    except (AttributeError, TypeError):
        pass
    start_samples = it.samples_consumed
    start_batches = it.batches_consumed
    start_wait = it.wait_seconds
    monitor = _Monitor(it, total, epochs, show=progress)
    monitor.sample()
    monitor.start()
    epoch_seconds: list[float] = []
    t0 = time.perf_counter()
    try:
        for epoch in range(epochs):
            monitor.epoch = epoch
            te = time.perf_counter()
            with java_errors():
                net.fit(it.java)
            epoch_seconds.append(time.perf_counter() - te)
    finally:
        seconds = time.perf_counter() - t0
        monitor.stop_event.set()
        monitor.join(timeout=10)
        if owned:
            it.shutdown()
    samples = it.samples_consumed - start_samples
    try:
        score = float(net.score())
    except Exception:  # noqa: BLE001  (no score before any batch)
        score = None
    return FitResult(epochs=epochs, samples=samples, batches=it.batches_consumed - start_batches,
                     seconds=seconds, samples_per_s=samples / seconds if seconds > 0 else 0.0,
                     prefetch=it.depth, peak_offheap=monitor.peak_offheap, peak_physical=monitor.peak_physical,
                     score=score, wait_seconds=it.wait_seconds - start_wait, epoch_seconds=epoch_seconds)


def evaluate(net, features, labels, batch_size: int = 256) -> float:
    """Classification accuracy of `net` on numpy features and one-hot (or index) labels."""
    import numpy as np  # noqa: PLC0415

    from pyd4j.nd import from_numpy, to_numpy  # noqa: PLC0415

    truth = labels.argmax(axis=1) if labels.ndim == 2 else labels
    correct = 0
    for start in range(0, len(features), batch_size):
        x = np.ascontiguousarray(features[start:start + batch_size], dtype=np.float32)
        out = net.output(from_numpy(x)) if not _is_graph(net) else net.outputSingle(from_numpy(x))
        pred = to_numpy(out, copy=True).argmax(axis=1)
        correct += int((pred == truth[start:start + batch_size]).sum())
    return correct / len(features)


__all__ = ["FitResult", "MemorySample", "evaluate", "fit", "memory_sample"]
