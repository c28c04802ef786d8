"""The memory budget: which models are resident, and which idle one to evict (least recently used).

Pure Python (threads only). A model is counted against the budget from the moment it starts
loading or restoring until its eviction has finished, so the resident sum never passes the budget
on account of a restore. Eviction itself runs on the victim's own worker thread (DL4J's workspaces
are per thread): `Budget` only asks for it through the `request_eviction` callback and waits.

States: loading -> resident <-> evicting -> evicted -> restoring -> resident; failed.
Idle models are evicted first; a busy one chosen as a victim finishes its batch and is evicted
before its next. With an idle time (`idle_s`), a model that served a request less than `idle_s`
ago is not evicted at all: a model that needs room then waits until one has been idle that long,
and past its caller's timeout gets NoRoomError, which names the budget, the models holding it and
when the first of them may go (the server's 503 with Retry-After). Models waiting for room are served first come first served. A busy model never
waits on the budget (it is resident already), so waiting for room cannot deadlock.

An eviction that fails (a full disk) leaves its model resident and out of the candidates for a
while that doubles with each failure in a row (EVICT_RETRY_FIRST_S up to EVICT_RETRY_MAX_S): a
model that needs the room waits or gets NoRoomError naming the failure, and the failing eviction is
not asked for again and again (it once was, 15,000 times a second).
"""

from __future__ import annotations

import math
import threading
from collections import deque
import time
from dataclasses import dataclass
from typing import Callable


EVICT_RETRY_FIRST_S = 1.0    # after a failed eviction the model is not asked again for this long ...
EVICT_RETRY_MAX_S = 60.0     # ... doubled after each failure in a row, up to this


class OverBudgetError(Exception):
    """A model larger than the whole budget."""


class NoRoomError(Exception):
    """No room within the timeout: the models holding the budget are inside their idle time."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass
class Entry:
    name: str
    footprint: int
    state: str = "loading"
    busy: bool = False
    last_used: float = 0.0
    requested: bool = False   # has served a request (a model only loaded is not protected by the idle time)
    evictions: int = 0
    restores: int = 0
    eviction_failures: int = 0       # in a row; 0 after an eviction that worked
    eviction_error: str | None = None
    evict_retry_at: float = 0.0      # monotonic time before which it is not asked to go again


class Budget:
    """Resident-bytes accounting under `limit` bytes (None: no limit, nothing is ever evicted)."""

    def __init__(self, limit: int | None, request_eviction: Callable[[str], None], idle_s: float = 0.0) -> None:
        self.limit = limit
        self.idle_s = idle_s
        self._request_eviction = request_eviction
        self._cond = threading.Condition()
        self._entries: dict[str, Entry] = {}
        self._waiters: deque[str] = deque()
        self.peak_resident = 0

    # ----------------------------------------------------------------- queries

    def resident_bytes(self) -> int:
        with self._cond:
            return self._committed()

    def entry(self, name: str) -> Entry:
        with self._cond:
            e = self._entries[name]
            return Entry(**vars(e))

    def _committed(self) -> int:
        return sum(e.footprint for e in self._entries.values() if e.state in ("loading", "resident", "evicting", "restoring"))

    def _note_peak(self) -> None:
        self.peak_resident = max(self.peak_resident, self._committed())

    # ----------------------------------------------------------------- load

    def begin_load(self, name: str, reserve: int, timeout: float | None = None) -> None:
        """Count `name` as loading with `reserve` bytes (its estimate) once room is made for it."""
        with self._cond:
            if self.limit is not None:
                reserve = min(reserve, self.limit)
            self._entries[name] = e = Entry(name, int(reserve), state="evicted")
            self._wait_for_room(e, timeout)
            e.state, e.busy = "loading", True
            self._note_peak()

    def loaded(self, name: str, footprint: int) -> None:
        """The measured footprint replaces the reservation; others are evicted if it needs more room.
        OverBudgetError when the model alone is larger than the budget (it is dropped)."""
        with self._cond:
            e = self._entries[name]
            if self.limit is not None and footprint > self.limit:
                del self._entries[name]
                self._cond.notify_all()
                raise OverBudgetError(footprint)
            e.footprint, e.state, e.busy, e.last_used = int(footprint), "resident", False, time.monotonic()
            self._make_room(need=0, keep=name)
            self._note_peak()
            self._cond.notify_all()

    def failed(self, name: str) -> None:
        with self._cond:
            self._entries.pop(name, None)
            self._cond.notify_all()

    # ----------------------------------------------------------------- running

    def begin(self, name: str, timeout: float | None = None) -> str:
        """Before a batch: 'run' (resident, now busy), 'restore' (room made, now counted: restore it,
        then call restored()), or 'evict' (an eviction of this model was asked for: do it, call
        evicted(), and begin again)."""
        with self._cond:
            e = self._entries[name]
            if e.state == "evicting":
                return "evict"
            if e.state == "resident":
                e.busy, e.last_used, e.requested = True, time.monotonic(), True
                return "run"
            self._wait_for_room(e, timeout)
            e.state, e.busy, e.last_used, e.requested = "restoring", True, time.monotonic(), True
            self._note_peak()
            return "restore"

    def restored(self, name: str) -> None:
        with self._cond:
            e = self._entries[name]
            e.state = "resident"
            e.restores += 1

    def not_evicted(self, name: str, error: str = "") -> float:
        """An eviction failed: the model is resident again and not asked to go for a while (doubling
        with each failure in a row); who asked for its room waits on, or times out. Returns the wait."""
        with self._cond:
            e = self._entries[name]
            e.state = "resident"
            e.eviction_failures += 1
            e.eviction_error = error or "eviction failed"
            wait = min(EVICT_RETRY_MAX_S, EVICT_RETRY_FIRST_S * 2 ** (e.eviction_failures - 1))
            e.evict_retry_at = time.monotonic() + wait
            self._cond.notify_all()
            return wait

    def not_restored(self, name: str) -> None:
        """A restore failed: the model is evicted again and its room given back (not an eviction)."""
        with self._cond:
            e = self._entries[name]
            e.state = "evicted"
            self._cond.notify_all()

    def end(self, name: str) -> None:
        """After a batch: the model is idle (a victim candidate) again."""
        with self._cond:
            e = self._entries[name]
            e.busy, e.last_used = False, time.monotonic()
            self._cond.notify_all()

    def evicted(self, name: str) -> None:
        with self._cond:
            e = self._entries[name]
            e.state = "evicted"
            e.evictions += 1
            e.eviction_failures, e.eviction_error, e.evict_retry_at = 0, None, 0.0
            self._cond.notify_all()

    # ----------------------------------------------------------------- room

    def _wait_for_room(self, e: Entry, timeout: float | None) -> None:
        """Wait until `e` fits, first come first served: a model waiting for room is not overtaken
        by one that asked after it (else a busy pair could starve a third)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self.limit is not None and e.footprint > self.limit:
            raise OverBudgetError(e.footprint)
        if self.limit is None:
            return
        self._waiters.append(e.name)
        try:
            while True:
                if self._waiters[0] == e.name:
                    if self._committed() + e.footprint <= self.limit:
                        return
                    self._make_room(need=e.footprint, keep=e.name)
                    if self._committed() + e.footprint <= self.limit:
                        return
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise self._no_room(e)
                self._cond.wait(timeout=0.5 if left is None else min(0.5, left))
        finally:
            self._waiters.remove(e.name)
            self._cond.notify_all()

    def _make_room(self, need: int, keep: str) -> None:
        """Ask for evictions until what stays fits with `need`: idle models first, least recently used
        first; a busy model is evicted after its current batch."""
        if self.limit is None:
            return
        staying = sum(x.footprint for x in self._entries.values() if x.state in ("loading", "resident", "restoring"))
        now = time.monotonic()
        candidates = sorted((x for x in self._entries.values() if x.state == "resident" and x.name != keep
                             and self._idle_left(x, now) <= 0 and x.evict_retry_at <= now),
                            key=lambda x: (x.busy, x.last_used))
        for victim in candidates:
            if staying + need <= self.limit:
                break
            victim.state = "evicting"
            staying -= victim.footprint
            self._request_eviction(victim.name)

    def _idle_left(self, e: Entry, now: float) -> float:
        """Seconds until `e` may be evicted (0 or less: now)."""
        if not self.idle_s or not e.requested:
            return 0.0
        return e.last_used + self.idle_s - now if not e.busy else self.idle_s

    def _no_room(self, e: Entry) -> NoRoomError:
        now = time.monotonic()
        held = sorted((x for x in self._entries.values() if x.state in ("resident", "loading", "restoring")
                       and x.name != e.name), key=lambda x: self._idle_left(x, now))
        protected = [x for x in held if self._idle_left(x, now) > 0]
        wait = math.ceil(max(1.0, min((self._idle_left(x, now) for x in protected), default=1.0)))
        names = ", ".join(f"{x.name!r} ({x.footprint} bytes, idle for {max(0.0, now - x.last_used):.1f} s)"
                          for x in (protected or held))
        why = (f"held by {names}, used within the idle time of {self.idle_s:g} s (--idle-before-evict)"
               if protected else f"held by {names}")
        failing = [x for x in held if x.eviction_error]
        if failing:
            why += "; evicting " + ", ".join(f"{x.name!r} failed ({x.eviction_error}), retried in "
                                             f"{max(0.0, x.evict_retry_at - now):.0f} s" for x in failing)
        return NoRoomError(f"no room for model {e.name!r} ({e.footprint} bytes) within the budget of {self.limit} "
                           f"bytes: {why}; retry in {wait} s, or raise --budget", wait)
