"""A/B measurement on a shared machine: sides interleaved so that drifts in load fall on every side
alike, and the median and spread of what they measured."""

from __future__ import annotations

import json
import statistics
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

S = TypeVar("S")
T = TypeVar("T")


def order(sides: Sequence[S], round_: int, rotate: bool = False) -> list[S]:
    """The sides in the order round `round_` runs them: reversed every other round (A B, B A, A B, ...),
    or with `rotate` started one side later each round (A B C, B C A, C A B, ...)."""
    if rotate:
        k = round_ % len(sides)
        return [*sides[k:], *sides[:k]]
    return list(sides) if round_ % 2 == 0 else list(sides)[::-1]


def interleave(sides: Sequence[S], rounds: int, measure: Callable[[S, int], T],
               rotate: bool = False) -> dict[S, list[T]]:
    """`measure(side, round)` for every side in each of `rounds` rounds, in `order`: each side's results."""
    out: dict[S, list[T]] = {s: [] for s in sides}
    for r in range(rounds):
        for side in order(sides, r, rotate):
            out[side].append(measure(side, r))
    return out


def ratios(a: Sequence[float | None], b: Sequence[float | None]) -> list[float]:
    """a / b round by round, leaving out rounds where either side measured nothing."""
    return [x / y for x, y in zip(a, b) if x and y]


def median_range(values: Sequence[float], digits: int = 3) -> dict[str, Any] | None:
    """The median and the range [min, max] of `values` (None when there are none)."""
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    return {"median": round(statistics.median(vals), digits), "range": [round(min(vals), digits), round(max(vals), digits)]}


def run_pool(items: list[dict], fn: Callable[[dict], dict], parallel: int) -> list[dict]:
    """`fn` over `items` on `parallel` threads, results in the items' order; a failure becomes a row
    naming it (the other items go on). Each result is printed as it comes."""
    results: list[dict] = [{}] * len(items)
    queue = list(enumerate(items))
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not queue:
                    return
                i, item = queue.pop(0)
            try:
                results[i] = fn(item)
            except Exception as err:  # noqa: BLE001 - a failed item is a result
                results[i] = {"name": item["name"], "error": repr(err)[:300], "right": False}
            print(json.dumps({k: results[i].get(k) for k in ("name", "right", "findings", "outcome",
                                                              "verdict_iterations", "site")}), flush=True)

    threads = [threading.Thread(target=worker) for _ in range(parallel)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return results
