"""Python batches -> DL4J DataSetIterator / MultiDataSetIterator, with async prefetch.

The Java side (`org.pyd4j.data`) pulls each batch from a JPype proxy of `BatchSource` on
AsyncDataSetIterator's prefetch thread; the proxy turns the Python batch into a DataSet whose
arrays wrap the numpy memory (pyd4j.nd.from_numpy: no copy for C/F-ordered arrays of a shared
dtype). JPype releases the GIL while the Python thread waits in fit(), and takes it for each
callback, so the prefetch thread runs Python while the main thread trains.

An exception in the Python source is kept under an id (pyd4j.jvm.errors); the Java side ends
the prefetch stream, rethrows an org.pyd4j.PythonException with that id on the fit() thread,
and `pyd4j.jvm.java_errors()` around fit() re-raises the original Python exception object.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Iterable, Iterator

import numpy as np

from pyd4j.jvm.errors import java_errors, remember_python_exception
from pyd4j.nd import from_numpy

# ---- batches ---------------------------------------------------------------------------------

_KEYS = ("features", "labels", "features_mask", "labels_mask")
MAX_PREFETCH = 1024
"""The deepest async queue: each slot holds a batch in memory (the CLI's --prefetch has the same limit)."""


def _parts(batch: Any) -> tuple[Any, Any, Any, Any]:
    """(features, labels, features_mask, labels_mask) from a tuple, list or dict batch."""
    if isinstance(batch, dict):
        unknown = set(batch) - set(_KEYS)
        if unknown:
            raise ValueError(f"batch dict has unknown keys {sorted(unknown)}; use {', '.join(_KEYS)}")
        return tuple(batch.get(k) for k in _KEYS)  # type: ignore[return-value]
    if isinstance(batch, (tuple, list)) and 2 <= len(batch) <= 4:
        padded = list(batch) + [None] * (4 - len(batch))
        return tuple(padded)  # type: ignore[return-value]
    raise TypeError(
        f"a batch must be (features, labels), (features, labels, features_mask, labels_mask), a dict "
        f"with keys {', '.join(_KEYS)}, or an ND4J DataSet; got {type(batch).__name__}"
        + (f" of length {len(batch)}" if isinstance(batch, (tuple, list)) else ""))


@functools.cache
def _nd4j() -> SimpleNamespace:
    """The ND4J classes every batch needs, looked up once (the JVM runs by the first batch)."""
    import jpype  # noqa: PLC0415

    return SimpleNamespace(
        DataSet=jpype.JClass("org.nd4j.linalg.dataset.DataSet"),
        MultiDataSet=jpype.JClass("org.nd4j.linalg.dataset.MultiDataSet"),
        MultiDataSetApi=jpype.JClass("org.nd4j.linalg.dataset.api.MultiDataSet"),
        INDArrays=jpype.JArray(jpype.JClass("org.nd4j.linalg.api.ndarray.INDArray")),
    )


def _indarray(value: Any):
    if value is None:
        return None
    if hasattr(value, "isAttached"):  # already an INDArray
        return value
    return from_numpy(value if isinstance(value, np.ndarray) else np.asarray(value), copy=None)


def to_dataset(batch: Any):
    """An ND4J DataSet over the batch's numpy memory (no copy where pyd4j.nd can share it)."""
    data_set = _nd4j().DataSet
    if isinstance(batch, data_set):
        return batch
    f, l, fm, lm = _parts(batch)
    if f is None:
        raise ValueError("a batch needs features (got None)")
    return data_set(_indarray(f), _indarray(l), _indarray(fm), _indarray(lm))


def to_multidataset(batch: Any):
    """An ND4J MultiDataSet from (features_list, labels_list[, fmasks, lmasks]) or a dict."""
    java = _nd4j()
    if isinstance(batch, java.MultiDataSetApi):
        return batch

    def many(value):
        if value is None:
            return None
        seq = value if isinstance(value, (list, tuple)) else [value]
        return java.INDArrays([_indarray(v) for v in seq])

    return java.MultiDataSet(*(many(p) for p in _parts(batch)))


# ---- sources ---------------------------------------------------------------------------------


class PythonSource:
    """A Python iterable, iterator/generator, or zero-argument callable seen as a BatchSource.

    - re-iterable object (list, NumpyBatches, any class with __iter__): reset = iter() again
    - iterator or generator: one pass only (reset raises; pass a function for more epochs)
    - callable: called at every pass, must return an iterable (e.g. a generator function)
    """

    def __init__(self, source: Any, multi: bool = False) -> None:
        if isinstance(source, Iterator):
            self.kind = "iterator"
        elif isinstance(source, Iterable):
            self.kind = "iterable"
        elif callable(source):
            self.kind = "callable"
        else:
            raise TypeError(f"cannot read batches from a {type(source).__name__}: pass an iterable, a "
                            f"generator, or a function returning an iterable")
        self.source = source
        self.multi = multi
        self._convert = to_multidataset if multi else to_dataset
        self._it: Iterator[Any] | None = None
        self._started_once = False

    def _open(self) -> Iterator[Any]:
        if self.kind == "iterator":
            return self.source
        if self.kind == "iterable":
            return iter(self.source)
        made = self.source()
        if not isinstance(made, Iterable):
            raise TypeError(f"the batch function returned a {type(made).__name__}, not an iterable of batches")
        return iter(made)

    # --- BatchSource / MultiBatchSource (called from Java) ---
    def next(self):
        try:
            if self._it is None:
                self._it = self._open()
                self._started_once = True
            batch = next(self._it, None)
            return None if batch is None else self._convert(batch)
        except BaseException as exc:  # noqa: BLE001  (every failure must reach the fit() caller)
            self._raise_in_java(exc)

    def reset(self) -> None:
        try:
            if self.kind == "iterator" and self._started_once:
                raise RuntimeError(
                    "this batch source is a one-shot iterator/generator and was already read; for several "
                    "epochs pass a function that returns a new one, e.g. lambda: my_batches()")
            self._it = None
        except BaseException as exc:  # noqa: BLE001
            self._raise_in_java(exc)

    def resetSupported(self) -> bool:  # noqa: N802  (Java interface name)
        return self.kind != "iterator"

    @staticmethod
    def _raise_in_java(exc: BaseException):
        import jpype  # noqa: PLC0415

        fid = remember_python_exception(exc)
        raise jpype.JClass("org.pyd4j.PythonException")(
            jpype.JLong(fid), f"{type(exc).__name__}: {exc}")


class NumpyBatches:
    """Minibatches over in-memory numpy arrays, reshuffled at each pass (re-iterable).

    With slice_in_java=True (default) `pyd4j.data.iterator` wraps each whole array once (no copy)
    and Java slices the batches (org.pyd4j.data.ArrayBatchSource): no Python runs per batch.
    Iterated from Python (slice_in_java=False, or any other use), slices of C-ordered arrays are
    views, so batches reach ND4J without a copy. With shuffle=True each batch is gathered once
    (one copy, as DL4J's own shuffling makes); Java and Python draw different permutations.
    """

    def __init__(self, features: np.ndarray, labels: np.ndarray, batch_size: int, shuffle: bool = True,
                 seed: int | None = 0, drop_last: bool = False,
                 features_mask: np.ndarray | None = None, labels_mask: np.ndarray | None = None,
                 slice_in_java: bool = True) -> None:
        n = len(features)
        if len(labels) != n:
            raise ValueError(f"features have {n} rows but labels {len(labels)}; they must match")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size={batch_size!r} must be an int >= 1")
        self.features, self.labels = features, labels
        self.features_mask, self.labels_mask = features_mask, labels_mask
        self.batch_size, self.shuffle, self.drop_last = batch_size, shuffle, drop_last
        self.seed, self.slice_in_java = seed, slice_in_java
        self._rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        n = len(self.features)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self) -> Iterator[tuple]:
        n = len(self.features)
        order = self._rng.permutation(n) if self.shuffle else None
        stop = n - (n % self.batch_size) if self.drop_last else n
        for start in range(0, stop, self.batch_size):
            if order is None:
                sl: Any = slice(start, min(start + self.batch_size, n))
            else:
                sl = np.sort(order[start:start + self.batch_size])
            parts = [self.features[sl], self.labels[sl]]
            if self.features_mask is not None or self.labels_mask is not None:
                parts += [None if self.features_mask is None else self.features_mask[sl],
                          None if self.labels_mask is None else self.labels_mask[sl]]
            yield tuple(np.ascontiguousarray(p) if p is not None else None for p in parts)


# ---- prefetching iterators -------------------------------------------------------------------


@dataclass
class PrefetchIterator:
    """A Python-fed DL4J iterator behind an async queue of `depth` batches.

    `java` is the DataSetIterator (or MultiDataSetIterator) to hand to fit(); use as a context
    manager, or call shutdown(), to stop the prefetch thread.
    """

    java: Any
    source: PythonSource
    depth: int
    _proxy: Any = None

    @property
    def samples_consumed(self) -> int:
        return int(self.java.samplesConsumed())

    @property
    def batches_consumed(self) -> int:
        return int(self.java.batchesConsumed())

    @property
    def wait_seconds(self) -> float:
        """Time fit() spent waiting for batches (an empty queue): the source is the bottleneck."""
        return int(self.java.waitNanos()) / 1e9

    def reset(self) -> None:
        with java_errors():
            self.java.reset()

    def shutdown(self) -> None:
        self.java.shutdown()

    def __enter__(self) -> "PrefetchIterator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def iterator(source: Any, prefetch: int = 4, batch_size: int = 0, multi: bool = False,
             preprocessor: Any = None, copy_before_preprocess: bool = True,
             use_workspace: bool = True) -> PrefetchIterator:
    """A DL4J iterator fed by `source` (see PythonSource) with an async queue of `prefetch` batches.

    preprocessor: an ND4J DataSetPreProcessor (MultiDataSetPreProcessor when multi), run on the
    prefetch thread; batches are copied before it unless copy_before_preprocess=False (it would
    otherwise change your numpy arrays in place).
    use_workspace: AsyncDataSetIterator's circular workspace for the prefetch thread.
    """
    import jpype  # noqa: PLC0415

    import pyd4j.jvm  # noqa: PLC0415

    if isinstance(prefetch, bool) or not isinstance(prefetch, int) or not 1 <= prefetch <= MAX_PREFETCH:
        raise ValueError(f"prefetch={prefetch!r} must be an int from 1 to {MAX_PREFETCH} (the async queue depth, "
                         "batches held in memory at once; DL4J's fit() uses 2)")
    pyd4j.jvm.info()
    py_source = source if isinstance(source, PythonSource) else PythonSource(source, multi=multi)
    pkg = "org.pyd4j.data."
    with pyd4j.jvm.java_errors():
        if isinstance(source, NumpyBatches) and source.slice_in_java and not multi:
            proxy = _array_source(source)
            inner = jpype.JClass(pkg + "PythonDataSetIterator")(proxy, jpype.JInt(source.batch_size))
            wrapper = jpype.JClass(pkg + "PrefetchDataSetIterator")
        elif py_source.multi:
            proxy = jpype.JProxy(pkg + "MultiBatchSource", inst=py_source)
            inner = jpype.JClass(pkg + "PythonMultiDataSetIterator")(proxy)
            wrapper = jpype.JClass(pkg + "PrefetchMultiDataSetIterator")
        else:
            proxy = jpype.JProxy(pkg + "BatchSource", inst=py_source)
            inner = jpype.JClass(pkg + "PythonDataSetIterator")(proxy, jpype.JInt(batch_size))
            wrapper = jpype.JClass(pkg + "PrefetchDataSetIterator")
        inner.setCopyBeforePreProcess(bool(copy_before_preprocess))
        if preprocessor is not None:
            inner.setPreProcessor(preprocessor)
        java = wrapper(inner, jpype.JInt(prefetch), bool(use_workspace))
    return PrefetchIterator(java=java, source=py_source, depth=prefetch, _proxy=proxy)


def _array_source(batches: NumpyBatches):
    """org.pyd4j.data.ArrayBatchSource over the whole arrays, wrapped once without copying."""
    import jpype  # noqa: PLC0415

    def whole(a):
        return None if a is None else _indarray(np.ascontiguousarray(a))

    seed = batches.seed if batches.seed is not None else int(np.random.default_rng().integers(2**62))
    return jpype.JClass("org.pyd4j.data.ArrayBatchSource")(
        whole(batches.features), whole(batches.labels), whole(batches.features_mask), whole(batches.labels_mask),
        jpype.JInt(batches.batch_size), bool(batches.shuffle), jpype.JLong(seed), bool(batches.drop_last))


def prefetch_thread_names() -> list[str]:
    """Names of live Java threads that are AsyncDataSetIterator prefetch threads (leak checks)."""
    import jpype  # noqa: PLC0415

    names = []
    for thread in jpype.JClass("java.lang.Thread").getAllStackTraces().keySet():
        name = str(thread.getName())
        if "prefetch thread" in name:  # "ADSI prefetch thread", "AMDSI prefetch thread"
            names.append(name)
    return sorted(names)


__all__ = [
    "NumpyBatches", "PrefetchIterator", "PythonSource", "iterator",
    "prefetch_thread_names", "to_dataset", "to_multidataset",
]
