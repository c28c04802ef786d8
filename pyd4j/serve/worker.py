"""One worker thread per model: dynamic batching, the model's Java calls, eviction when asked.

Requests wait in a bounded queue (a full queue is the server's 429). The worker takes the first
request, then keeps taking until the batch holds `max_batch` rows or `max_wait` seconds have
passed since the first arrived, concatenates the inputs along the batch axis, makes the model
resident (pyd4j.serve.budget), runs one output() and hands each request its rows. Results go back
to the asyncio loop that submitted them with call_soon_threadsafe.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pyd4j.serve.budget import Budget, NoRoomError, OverBudgetError
from pyd4j.serve.metrics import Metrics
from pyd4j.serve.model import ServedModel

log = logging.getLogger("pyd4j.serve")


class ModelBusyError(Exception):
    """The model's queue is full."""


@dataclass
class Pending:
    inputs: list[np.ndarray]
    rows: int
    deadline: float
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    arrived: float = field(default_factory=time.monotonic)


def _resolve(fut: asyncio.Future, value: Any, error: BaseException | None) -> None:
    if fut.done():  # timed out or cancelled on the HTTP side
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(value)


class ModelWorker(threading.Thread):
    """Owns one ServedModel; every Java call on it happens here."""

    def __init__(self, model: ServedModel, budget: Budget, metrics: Metrics, max_batch: int,
                 max_wait_s: float, queue_size: int, slice_rows: int | str = "auto") -> None:
        super().__init__(name=f"pyd4j-serve-{model.name}", daemon=True)
        self.model = model
        self.budget = budget
        self.metrics = metrics
        self.max_batch = max_batch
        self.slice_rows = slice_rows
        self.max_wait_s = max_wait_s
        self.queue_size = queue_size
        self.state = "loading"          # loading, ready, failed
        self.error: str | None = None
        self.loaded = threading.Event()
        self._cond = threading.Condition()
        self._queue: deque[Pending] = deque()
        self._evict_asked = False
        self._stopping = False

    # ----------------------------------------------------------------- called from other threads

    def submit(self, p: Pending) -> None:
        with self._cond:
            if len(self._queue) >= self.queue_size:
                raise ModelBusyError(len(self._queue))
            self._queue.append(p)
            self._cond.notify()

    def queued(self) -> int:
        with self._cond:
            return len(self._queue)

    def request_eviction(self) -> None:
        """Called by the budget (under its lock): evict at the next chance, on this thread."""
        with self._cond:
            self._evict_asked = True
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()

    # ----------------------------------------------------------------- the thread

    def run(self) -> None:
        from pyd4j.jvm.core import attach, detach  # noqa: PLC0415

        attach()
        try:
            if self._load():
                self._serve()
        finally:
            try:
                self.model.close()
            finally:
                detach()

    def _load(self) -> bool:
        name = self.model.name
        try:
            self.budget.begin_load(name, self._reserve())
            fp = self.model.load(self.max_batch, self.slice_rows)
            self.budget.loaded(name, fp.total_bytes)
        except OverBudgetError as err:
            fp = self.model.footprint
            self.model.close()
            self._fail(f"model {name!r} needs {int(err.args[0])} bytes resident at batch {self.max_batch} "
                       + (f"(parameters {fp.params_bytes}, workspaces {fp.workspace_bytes}, inputs/outputs {fp.io_bytes}; "
                          f"pyd4j's estimate {fp.estimate_bytes}) " if fp else "")
                       + f"and the budget is {self.budget.limit} bytes: raise --budget or lower --max-batch")
            return False
        except Exception as err:  # noqa: BLE001  (any failure to load: reported, the other models serve)
            self.budget.failed(name)
            self.model.close()
            self._fail(f"model {name!r} failed to load from {str(self.model.path)!r}: {err}")
            return False
        self.metrics.footprint(name, fp)
        self.metrics.resident(name, fp.total_bytes)
        self.state = "ready"
        self.loaded.set()
        log.info("model %s loaded (%s, %d bytes resident at batch %d, estimate %s)", name, self.model.source,
                 fp.total_bytes, self.max_batch, fp.estimate_bytes if fp.estimate_bytes is not None else "none")
        sz = self.model.sizing
        if sz is not None and sz.how == "measured":
            ratio = next((st.ratio for st in reversed(sz.steps) if st.kept and st.rows == fp.slice_rows), 1.0)
            log.info("model %s: output() runs %d rows a call (workspaces %d bytes; %d for %d rows in one call), "
                     "fastest time for %d rows %.2fx of one call's; measured in %.1f s, stopped: %s", name, fp.slice_rows,
                     fp.workspace_bytes, fp.whole_workspace_bytes, self.max_batch, self.max_batch, ratio,
                     sz.seconds, sz.stopped)
        return True

    def _reserve(self) -> int:
        """Bytes to hold while the model loads: the whole budget, since its footprint is unknown until
        measured (models load one at a time, at start), so the resident sum stays under the budget."""
        if self.budget.limit is not None:
            return self.budget.limit
        return 0

    def _fail(self, message: str) -> None:
        self.state, self.error = "failed", message
        self.metrics.load_failure(self.model.name)
        log.error("%s", message)
        self.loaded.set()
        with self._cond:
            queued, self._queue = list(self._queue), deque()
        for p in queued:
            p.loop.call_soon_threadsafe(_resolve, p.future, None, RuntimeError(message))

    def _serve(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._evict_asked and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    queued, self._queue = list(self._queue), deque()
                    break
                evict = self._evict_asked
                self._evict_asked = False
            if evict:
                self._evict()
                continue
            batch = self._take_batch()
            if batch:
                self._run(batch)
        for p in queued:
            p.loop.call_soon_threadsafe(_resolve, p.future, None, RuntimeError("the server is shutting down"))

    def _take_batch(self) -> list[Pending]:
        batch: list[Pending] = []
        rows = 0
        with self._cond:
            first = self._queue[0].arrived
            while True:
                while self._queue and rows + self._queue[0].rows <= self.max_batch:
                    p = self._queue.popleft()
                    batch.append(p)
                    rows += p.rows
                left = first + self.max_wait_s - time.monotonic()
                if rows >= self.max_batch or left <= 0 or self._queue or self._stopping or self._evict_asked:
                    break
                self._cond.wait(timeout=left)
        now = time.monotonic()
        live = []
        for p in batch:
            if now > p.deadline:
                p.loop.call_soon_threadsafe(_resolve, p.future, None, TimeoutError("timed out in the queue"))
            else:
                live.append(p)
        return live

    def _evict(self) -> None:
        """Evict the model to the disk tier. Answers every request made so far: one asked for while a
        batch waited for room may already have been done in `_run` (begin() said "evict"), and that
        batch may then have given up (no room in time), leaving the model evicted with the request
        still set; evicting again would find no network."""
        with self._cond:
            self._evict_asked = False
        name = self.model.name
        if not self.model.resident:
            return
        t0 = time.perf_counter()
        try:
            self.model.evict()
        except Exception as err:  # noqa: BLE001  (the model stays resident and serves; the waiter hears "no room")
            wait = self.budget.not_evicted(name, f"{type(err).__name__}: {err}")
            log.error("model %s: eviction failed, it stays resident (%s: %s); not tried again for %.0f s; free the "
                      "disk under %s or raise --budget", name, type(err).__name__, err, wait, self.model.spill_dir)
            self.metrics.eviction_failure(name)
            return
        self.budget.evicted(name)
        self.metrics.evicted(name, time.perf_counter() - t0)
        log.info("model %s evicted to the disk tier", name)

    def _run(self, batch: list[Pending]) -> None:
        name = self.model.name
        try:
            while True:  # room is waited for until the batch's first deadline (then 503, not a 504 later)
                action = self.budget.begin(name, timeout=max(0.0, min(p.deadline for p in batch) - time.monotonic()))
                if action != "evict":
                    break
                self._evict()
        except NoRoomError as err:
            for p in batch:
                p.loop.call_soon_threadsafe(_resolve, p.future, None, err)
            return
        try:
            if action == "restore":
                seconds = self.model.restore()
                self.budget.restored(name)
                self.metrics.restored(name, seconds, self.model.footprint.total_bytes)
                log.info("model %s restored in %.3f s", name, seconds)
            x = batch[0].inputs if len(batch) == 1 else \
                [np.concatenate([p.inputs[i] for p in batch]) for i in range(len(self.model.inputs))]
            outs = self.model.infer(x)
        except Exception as err:  # noqa: BLE001  (a failed batch fails its requests; the worker serves on)
            log.exception("model %s: inference failed", name)
            if action == "restore" and not self.model.resident:
                self.budget.not_restored(name)   # its room is given back; the next batch tries again
            for p in batch:
                p.loop.call_soon_threadsafe(_resolve, p.future, None, err)
            return
        finally:
            self.budget.end(name)
        self.metrics.batch(name, sum(p.rows for p in batch))
        start = 0
        for p in batch:
            part = [o[start:start + p.rows] for o in outs]
            start += p.rows
            p.loop.call_soon_threadsafe(_resolve, p.future, part, None)
