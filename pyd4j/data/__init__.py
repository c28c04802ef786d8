"""Python data -> DL4J iterators with async prefetch (see pyd4j.data.source)."""

from pyd4j.data.source import (
    NumpyBatches,
    PrefetchIterator,
    PythonSource,
    iterator,
    prefetch_thread_names,
    to_dataset,
    to_multidataset,
)

__all__ = [
    "NumpyBatches", "PrefetchIterator", "PythonSource", "iterator",
    "prefetch_thread_names", "to_dataset", "to_multidataset",
]
