"""DL4J training fed from Python: `fit(net, source, epochs=…, prefetch=…)` with a progress bar.

    from pyd4j.data import NumpyBatches
    from pyd4j.train import fit
    result = fit(net, NumpyBatches(x, y, batch_size=64), epochs=10, prefetch=4)
    print(result.samples_per_s)

    # the same training in less memory: SuperNeurons plans govern DL4J's own fit()
    result = fit(net, NumpyBatches(x, y, batch_size=64), memory="superneurons", budget="1500m")

The source is read on DL4J's prefetch thread while fit() trains (see pyd4j.data). An exception
in the source stops fit() and is raised here as that same exception object.

With `memory="superneurons"`, each iteration replays a plan of `pyd4j.sched` on DL4J's own layers
(the Java planned trainer, org.pyd4j.train): gradients, updates, listeners and counts are DL4J's.
Without a budget the plan is liveness only (every activation closed right after its last use:
as fast as fit()); with one, the fastest plan that fits it (`pyd4j.dl4j.plan_file`), its
convolutions run in as many batch chunks as the budget needs (each chunk's working memory is a
fraction of the whole batch's, DL4J's largest); a budget below what any plan needs is refused
before training, with the minimum that works. `policy` forces
one planner policy (e.g. "utp" or "recompute", which offload activations); `policy="smallest"`
trains with the smallest plan of them all (`pyd4j.sched.choose.smallest_plan`).

A plan that offloads activations gets the backend's offload tier (`tier="auto"`, the default): a
disk tier on ND4J's CPU backend (a memory-mapped file in the temp directory, written behind the
forward steps and read ahead of the backward steps), the native side-agent's pinned host pool on
CUDA; pyd4j creates it for the training and closes it after. `tier="disk"` / `"pinned"` choose one,
`tier="none"` keeps every plan in memory, and a Java org.pyd4j.train.OffloadTier is used as given
(and left open: its owner closes it).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from pyd4j.data.source import NumpyBatches, PrefetchIterator, iterator
from pyd4j.jvm.errors import java_errors

MEMORY_MODES = (None, "superneurons")
TIER_CHOICES = ("auto", "disk", "pinned", "none")


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
    plan: dict[str, Any] | None = None   # memory="superneurons": the plan (policy, predicted peak) and what the trainer did

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
        multi: bool | None = None, memory: str | None = None, budget: str | int | None = None,
        tier: Any = "auto", policy: str | None = None, input_shape: Any = None) -> FitResult:
    """Train a DL4J MultiLayerNetwork or ComputationGraph on batches from Python.

    source: a re-iterable of batches (e.g. pyd4j.data.NumpyBatches), a function returning an
    iterable (called every epoch), a one-shot generator (epochs=1 only), or a PrefetchIterator.
    Batches: (features, labels[, features_mask, labels_mask]) numpy arrays, a dict, or a DataSet;
    lists of arrays per slot for multi-input/-output graphs.
    prefetch: async queue depth (DL4J's own fit() fixes 2); pyd4j.prefetch_tuning.tune_prefetch measures it.
    memory: None (DL4J's own fit()) or "superneurons" (planned training; see the module docstring),
    with `budget` (bytes or "1500m") for the plan's peak, `policy` to force one planner policy
    ("smallest": the smallest plan), and `tier` ("auto", "disk", "pinned", "none" or an
    org.pyd4j.train.OffloadTier) for plans that offload activations. The plan is made for one batch size and input shape: a NumpyBatches or a
    list of numpy batches (several inputs and outputs included) gives them; for other sources pass
    `batch_size` and `input_shape` (one example's shape, or one per network input).
    """
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs={epochs!r} must be an int >= 1")
    if memory not in MEMORY_MODES:
        raise ValueError(f"memory={memory!r}; use 'superneurons' (planned training) or None (DL4J's own fit())")
    batch_size = _checked_batch(net, source, batch_size, input_shape)
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
    try:
        planned = _attach_plan(net, source, batch_size, memory, budget, tier, policy, input_shape)
    except BaseException:
        if owned:
            it.shutdown()
        raise
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
        if planned is not None:
            _detach_plan(planned)
    samples = it.samples_consumed - start_samples
    try:
        score = float(net.score())
    except Exception:  # noqa: BLE001  (no score before any batch)
        score = None
    return FitResult(epochs=epochs, samples=samples, batches=it.batches_consumed - start_batches,
                     seconds=seconds, samples_per_s=samples / seconds if seconds > 0 else 0.0,
                     prefetch=it.depth, peak_offheap=monitor.peak_offheap, peak_physical=monitor.peak_physical,
                     score=score, wait_seconds=it.wait_seconds - start_wait, epoch_seconds=epoch_seconds,
                     plan=_with_offheap(planned, it.depth) if planned is not None else None)


def _detach_plan(planned: tuple) -> None:
    """After training under a plan: the trainer's account into the plan's summary, the trainer and pyd4j's own
    offload tier closed."""
    trainer, plan_doc, own_tier = planned[:3]
    try:
        plan_doc["trainer"] = json.loads(str(trainer.stats().toJson()))
        trainer.close()
    finally:
        if own_tier is not None:
            own_tier.close()


def _with_offheap(planned: tuple, prefetch: int) -> dict[str, Any]:
    """The plan's summary with what the planned job holds off the heap (`pyd4j.memory.planned_job`, the figure
    `pyd4j plan` and `pyd4j tune --plan` show) under "planned_job_offheap": the plan's peak and, beside the step,
    this fit()'s data pipeline (its `prefetch` queue). Made after training, so that estimating the network
    (which may probe its opaque layers in DL4J) cannot touch the training."""
    from pyd4j.memory.planned_job import KEY, job_network_document  # noqa: PLC0415

    summary = planned[1]
    conf, shapes, dtype = planned[3]
    summary[KEY] = job_network_document(summary["predicted"]["device_peak_bytes"], conf, shapes, dtype, prefetch)
    return summary


def _checked_batch(net, source: Any, batch_size: Any, input_shape: Any) -> int:
    """fit()'s batch arguments checked before anything runs, and the network's parameters against the
    machine (pyd4j.dl4j.sizecheck, as for every network pyd4j builds): the batch size to use (a
    NumpyBatches' own when none is given)."""
    from pyd4j.dl4j.config import configuration_of  # noqa: PLC0415
    from pyd4j.dl4j.sizecheck import check_parameters_fit  # noqa: PLC0415
    from pyd4j.inputs import JAVA_INT_MAX  # noqa: PLC0415

    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 0 <= batch_size <= JAVA_INT_MAX:
        raise ValueError(f"batch_size={batch_size!r} must be a whole number from 0 (the source's own batches) to "
                         f"{JAVA_INT_MAX}, e.g. batch_size=8 (an int, not the text '8')")
    if isinstance(source, NumpyBatches):
        if batch_size not in (0, source.batch_size):
            raise ValueError(f"batch_size={batch_size} but the NumpyBatches makes batches of {source.batch_size}; "
                             f"leave batch_size out (the NumpyBatches' batch_size is the one used)")
        example = tuple(int(d) for d in source.features.shape[1:])
        if input_shape is not None and _shape_of(input_shape) != example:
            raise ValueError(f"input_shape={input_shape!r} but the NumpyBatches' features are {example} per example; "
                             f"leave input_shape out (the NumpyBatches gives it)")
        batch_size = source.batch_size
    with java_errors():
        check_parameters_fit(configuration_of(net)[0], "the network given to fit()")
    return batch_size


def _shape_of(value: Any) -> tuple | None:
    try:
        return tuple(int(d) for d in value)
    except (TypeError, ValueError):
        return None


def _planned_shape(source: Any, batch_size: int, input_shape: Any) -> tuple[int, Any]:
    """The batch size and input shape(s) to plan for: given, or read from a NumpyBatches or from the
    first batch of a list of numpy batches (one shape per input for several inputs)."""
    import numpy as np  # noqa: PLC0415

    from pyd4j.data.source import _parts  # noqa: PLC0415  (the one reader of a batch's parts)

    if input_shape is not None:
        return batch_size, input_shape
    if isinstance(source, NumpyBatches):
        return source.batch_size, tuple(int(d) for d in source.features.shape[1:])
    if isinstance(source, (list, tuple)) and source:
        try:
            features = _parts(source[0])[0]
        except TypeError:
            return batch_size, None
        arrays = features if isinstance(features, (list, tuple)) else [features]
        if arrays and all(isinstance(a, np.ndarray) and a.ndim >= 2 for a in arrays):
            shapes = [tuple(int(d) for d in a.shape[1:]) for a in arrays]
            return (batch_size if batch_size > 0 else int(arrays[0].shape[0])), (shapes[0] if len(shapes) == 1 else shapes)
    return batch_size, None


def _attach_plan(net, source: Any, batch_size: int, memory: str | None, budget: str | int | None,
                 tier: Any, policy: str | None,
                 input_shape: Any = None) -> tuple[Any, dict[str, Any], Any, tuple] | None:
    """For memory="superneurons": plan the network, make the offload tier the plan needs (the
    third element: pyd4j's own tier, closed after training; None otherwise) and install the plan
    in the network's optimizer. The fourth: the configuration, input shapes (batch first) and data type
    the plan was made for, which the planned job's off-heap figure is estimated for (`_with_offheap`)."""
    if memory is None:
        if budget is not None or tier != "auto" or policy is not None or input_shape is not None:
            raise ValueError("budget, tier, policy and input_shape are for planned training: add memory='superneurons'")
        return None
    if isinstance(tier, str) and tier not in TIER_CHOICES:
        raise ValueError(f"tier={tier!r}; use one of {list(TIER_CHOICES)} or an org.pyd4j.train.OffloadTier")
    from pyd4j.sched.policies import POLICIES  # noqa: PLC0415
    from pyd4j.sched.choose import IN_MEMORY, SMALLEST  # noqa: PLC0415

    if policy is not None and policy not in (*POLICIES, IN_MEMORY, SMALLEST):
        raise ValueError(f"policy={policy!r}; use one of {[*POLICIES, IN_MEMORY, SMALLEST]}, or None to pick the "
                         "fastest plan that fits the budget")
    import jpype  # noqa: PLC0415

    if not isinstance(tier, str) and not isinstance(tier, jpype.JClass("org.pyd4j.train.OffloadTier")):
        raise ValueError(f"tier={tier!r} is a {type(tier).__name__}; use one of {list(TIER_CHOICES)} or an "
                         "org.pyd4j.train.OffloadTier (e.g. OffloadTier.forPlan('disk', plan))")
    if tier == "pinned" and jpype.JClass("org.nd4j.linalg.factory.Nd4j").getEnvironment().isCPU():
        raise ValueError("tier='pinned' keeps offloaded activations in pinned host memory for a GPU, and ND4J runs "
                         "on its CPU backend here (no device memory to offload from); use tier='disk' or 'auto' "
                         "(the disk tier on CPU), or 'none'")

    from pyd4j.dl4j.graph import network_kind  # noqa: PLC0415
    from pyd4j.sched.choose import choose_plan  # noqa: PLC0415
    from pyd4j.dl4j.plan_file import plan_document  # noqa: PLC0415
    from pyd4j.units import parse_bytes  # noqa: PLC0415

    cap = None if budget is None else (budget if isinstance(budget, int) else parse_bytes(str(budget), "budget"))
    conf = net.getConfiguration() if _is_graph(net) else net.getLayerWiseConfigurations()
    doc = json.loads(str(conf.toJson()))
    batch_size, shape = _planned_shape(source, batch_size, input_shape)
    if batch_size < 1:
        raise ValueError("planned training plans for one batch size: pass batch_size=N (or a NumpyBatches source)")
    graph = planned_graph(net, doc, batch_size, shape)
    offload = not (isinstance(tier, str) and tier == "none")
    plan, result = choose_plan(graph, cap, policy, offload=offload)   # BudgetTooSmall names the minimum
    plan_doc = plan_document(plan, result, network_kind(doc), "pyd4j.train.fit", cap)
    PlanFile = jpype.JClass("org.pyd4j.train.PlanFile")  # noqa: N806
    trainer_cls = jpype.JClass("org.pyd4j.train.PlannedTrainer")
    with java_errors():
        plan_file = PlanFile.parse(json.dumps(plan_doc), "pyd4j.train.fit")
        own = None
        if isinstance(tier, str):
            if plan_file.offloads():
                own = jpype.JClass("org.pyd4j.train.OffloadTier").forPlan(tier, plan_file)
            given = own
        else:
            given = tier
        try:
            trainer = trainer_cls.attach(net, plan_file, given)
        except BaseException:
            if own is not None:
                own.close()
            raise
    summary = {"policy": plan.policy, "tensor_cache": plan_doc["tensor_cache"], "budget_bytes": cap,
               "predicted": plan_doc["predicted"], "batch": batch_size,
               "tier": None if given is None else str(given.getClass().getSimpleName())}
    shapes = [list(node["shape"]) for node in plan_doc["nodes"] if node["type"] == "DATA"]
    return trainer, summary, own, (doc, shapes, plan_doc["network"]["dtype"])


def planned_graph(net, doc: dict[str, Any], batch_size: int, shape: tuple[int, ...] | None = None):
    """The planner's graph of a live network. Layers and vertices without a measured model (OPAQUE
    nodes) get what DL4J itself says of them: their output shapes (DL4J's shape inference, where
    the planner has no rule) and the working memory and kept bytes of a probe iteration of each
    (`pyd4j.dl4j.probe`), so that their memory is measured, not guessed."""
    from pyd4j.dl4j.probe import of_network  # noqa: PLC0415
    from pyd4j.dl4j.graph import probed_graph  # noqa: PLC0415

    return probed_graph(doc, batch_size, shape, probe=of_network(net))


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
