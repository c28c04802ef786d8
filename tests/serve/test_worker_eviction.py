"""The worker's eviction bookkeeping, without a JVM: the model here is a stand-in that records what it
was asked to do (the name says so: FakeModel). Found by benchmarks/serving.py on an idle machine: a
model asked to give up its room while one of its batches waited for room was evicted by that batch
(the budget said "evict"), the batch then gave up (no room before its deadline), and the eviction
request still set made the worker evict the evicted model again: its thread died on a missing
network and the model stopped serving."""

from __future__ import annotations

import asyncio
import time

import numpy as np

import pytest

from pyd4j.serve.budget import EVICT_RETRY_FIRST_S, Budget, NoRoomError
from pyd4j.serve.metrics import Metrics
from pyd4j.serve.model import Footprint
from pyd4j.serve.worker import ModelWorker, Pending


class FakeModel:
    """Records evict/restore calls; fails like ServedModel.evict when asked to evict with no network."""

    def __init__(self, name: str, size: int, fail_restore: bool = False) -> None:
        self.name, self.size, self.fail_restore = name, size, fail_restore
        self.footprint = Footprint(1, size, 0, 0, size, 1, 0)
        self.inputs = [None]
        self.net: object | None = object()
        self.evictions = 0
        self.restores = 0

    @property
    def resident(self) -> bool:
        return self.net is not None

    def evict(self) -> None:
        if self.net is None:
            raise AttributeError("'NoneType' object has no attribute 'params'")
        self.net = None
        self.evictions += 1

    def restore(self) -> float:
        self.restores += 1
        if self.fail_restore:
            raise OSError("disk tier file unreadable")
        self.net = object()
        return 0.0

    def infer(self, arrays):
        return [np.zeros((arrays[0].shape[0], 1), np.float32)]


def _setup(limit: int, fail_restore: bool = False):
    """Models a and b of 60 bytes under `limit` (one fits): a loads, is asked to go and goes (its
    worker's `_evict`, called here as its thread would), then b loads."""
    workers: dict[str, ModelWorker] = {}
    budget = Budget(limit, lambda name: workers[name].request_eviction())
    metrics = Metrics()
    for name in ("a", "b"):
        model = FakeModel(name, 60, fail_restore and name == "a")
        workers[name] = ModelWorker(model, budget, metrics, max_batch=4, max_wait_s=0.0, queue_size=8)  # type: ignore[arg-type]
    a = workers["a"]
    budget.begin_load("a", limit)
    budget.loaded("a", 60)
    with budget._cond:
        budget._make_room(need=limit, keep="b")
    assert a._evict_asked and budget.entry("a").state == "evicting"
    a._evict()
    assert a.model.evictions == 1 and budget.entry("a").state == "evicted" and not a._evict_asked
    budget.begin_load("b", limit)
    budget.loaded("b", 60)
    return budget, workers


def _pending(loop: asyncio.AbstractEventLoop, deadline_s: float) -> Pending:
    return Pending([np.zeros((1, 1), np.float32)], 1, time.monotonic() + deadline_s, loop, loop.create_future())


def test_fake_model_a_stale_eviction_request_does_not_evict_twice() -> None:
    loop = asyncio.new_event_loop()
    try:
        budget, workers = _setup(100)
        a, b = workers["a"], workers["b"]
        # later: a is resident again and b evicted (their workers did it; here by hand) ...
        budget._entries["a"].state, a.model.net = "resident", object()
        budget._entries["b"].state, b.model.net = "evicted", None
        # ... and b needs room: a is asked to go, and b gets the room and is busy
        with budget._cond:
            budget._make_room(need=60, keep="b")
        assert a._evict_asked and budget.entry("a").state == "evicting"
        budget._entries["b"].state, budget._entries["b"].busy, b.model.net = "resident", True, object()
        # a's next batch: the budget says "evict" (done here), then a finds no room before its deadline
        done = _pending(loop, 0.0)
        a._run([done])
        loop.run_until_complete(asyncio.sleep(0))
        assert isinstance(done.future.exception(), NoRoomError)
        assert a.model.evictions == 2 and budget.entry("a").state == "evicted"
        # the request that caused it is answered; a stale call does nothing (it evicted a missing network)
        assert not a._evict_asked
        a._evict()
        assert a.model.evictions == 2
    finally:
        loop.close()


def test_fake_model_a_failed_restore_gives_its_room_back() -> None:
    loop = asyncio.new_event_loop()
    try:
        budget, workers = _setup(100, fail_restore=True)
        a, b = workers["a"], workers["b"]
        budget._entries["b"].state, b.model.net = "evicted", None   # room for a
        failed = _pending(loop, 5.0)
        a._run([failed])   # the restore fails: the batch fails, the worker serves on
        loop.run_until_complete(asyncio.sleep(0))
        assert isinstance(failed.future.exception(), OSError)
        assert a.model.restores == 1 and not a.model.resident
        # its room is given back: not left counted as "restoring"
        assert budget.entry("a").state == "evicted" and budget.resident_bytes() == 0
        a._run([_pending(loop, 5.0)])   # the next batch tries again
        assert a.model.restores == 2 and budget.resident_bytes() == 0
    finally:
        loop.close()


def test_fake_model_a_failed_eviction_leaves_it_resident_and_says_so(caplog) -> None:
    """An eviction that fails (a full disk writing the parameters) leaves the model resident and
    serving, counted as such, with the reason logged and counted; the worker thread goes on."""
    loop = asyncio.new_event_loop()
    try:
        budget, workers = _setup(100)
        b = workers["b"]
        b.model.evict = lambda: (_ for _ in ()).throw(OSError(28, "No space left on device"))  # type: ignore[method-assign]
        b.model.spill_dir = "/spill"  # type: ignore[attr-defined]
        with budget._cond:
            budget._make_room(need=100, keep="a")
        assert b._evict_asked and budget.entry("b").state == "evicting"
        with caplog.at_level("ERROR", logger="pyd4j.serve"):
            b._evict()
        assert b.model.resident and budget.entry("b").state == "resident" and not b._evict_asked
        assert "eviction failed, it stays resident" in caplog.text and "No space left on device" in caplog.text
        assert b.metrics.eviction_failures.labels("b")._value.get() == 1
        assert b.metrics.eviction_failing.labels("b")._value.get() == 1
        e = budget.entry("b")
        assert e.eviction_failures == 1 and "No space left on device" in e.eviction_error
        # backed off: asked for room again at once, the budget does not ask b again (no busy loop) ...
        with budget._cond:
            budget._make_room(need=100, keep="a")
        assert not b._evict_asked and budget.entry("b").state == "resident"
        # ... and one who waits for the room hears why it is held
        with pytest.raises(NoRoomError, match="evicting 'b' failed .*No space left on device"):
            budget.begin("a", timeout=0.0)
        # once its back-off has passed it is asked again; a second failure doubles the wait
        budget._entries["b"].evict_retry_at = 0.0
        with budget._cond:
            budget._make_room(need=100, keep="a")
        assert b._evict_asked
        b._evict()
        e = budget.entry("b")
        assert e.eviction_failures == 2 and e.evict_retry_at - time.monotonic() > EVICT_RETRY_FIRST_S * 1.5
        served = _pending(loop, 5.0)
        b._run([served])   # it still serves
        loop.run_until_complete(asyncio.sleep(0))
        assert served.future.result()[0].shape == (1, 1)
    finally:
        loop.close()


def test_parameters_are_written_whole_or_not_at_all_in_a_file_without_a_name(tmp_path) -> None:
    """The disk tier's file: a write that fails halfway (a full disk; here an array whose tofile fails
    after 100 bytes, a stand-in) leaves no file a restore could read; a complete one reads back exactly.
    Neither is ever visible in the directory: nothing is left there however the process ends."""
    from pyd4j.serve.model import _write_params

    params = np.random.default_rng(0).random(1000, dtype=np.float32)

    class FullDisk(np.ndarray):
        def tofile(self, f, *args, **kwargs):  # noqa: ANN001
            f.write(b"x" * 100)
            raise OSError(28, "No space left on device")

    try:
        _write_params(params.view(FullDisk), tmp_path, "m")
    except OSError as err:
        assert err.errno == 28
    else:
        raise AssertionError("the failed write was not reported")
    assert list(tmp_path.iterdir()) == []
    f = _write_params(params, tmp_path, "m")
    assert list(tmp_path.iterdir()) == []
    np.testing.assert_array_equal(np.memmap(f, dtype=np.float32, mode="r"), params)
    f.close()
