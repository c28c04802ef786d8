"""Choose an async prefetch depth: training throughput of one network and source per depth.

A deeper queue hides a slow or bursty source behind training, at the cost of `depth` batches
held in memory (and in AsyncDataSetIterator's circular workspace). DL4J's fit() always uses 2.
`tune_prefetch` measures each depth on the real network and source and recommends the smallest
depth within `tolerance` of the best throughput.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from pyd4j.train import fit

DEFAULT_DEPTHS = (1, 2, 3, 4, 6, 8, 12, 16)


@dataclass
class DepthResult:
    depth: int
    samples_per_s: float          # median over repeats
    runs: list[float] = field(default_factory=list)
    queue_bytes: int = 0          # depth x largest batch (features + labels + masks)


@dataclass
class PrefetchReport:
    results: list[DepthResult]
    recommended: int
    best: int
    tolerance: float
    epochs_per_run: int
    repeats: int
    dl4j_default: int = 2

    def speedup_vs_dl4j_default(self) -> float | None:
        by_depth = {r.depth: r.samples_per_s for r in self.results}
        if self.dl4j_default not in by_depth or not by_depth[self.dl4j_default]:
            return None
        return by_depth[self.recommended] / by_depth[self.dl4j_default]

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["speedup_vs_dl4j_default"] = self.speedup_vs_dl4j_default()
        return out


def _batch_bytes(source: Any) -> int:
    """Bytes of the largest batch of a NumpyBatches-like source (0 when unknown)."""
    features = getattr(source, "features", None)
    labels = getattr(source, "labels", None)
    size = getattr(source, "batch_size", None)
    if features is None or labels is None or size is None:
        return 0
    rows = min(size, len(features))
    per_row = features[:1].nbytes + labels[:1].nbytes
    return rows * per_row


def tune_prefetch(net, source: Any, depths: Sequence[int] = DEFAULT_DEPTHS, epochs: int = 1, repeats: int = 3,
                  warmup_epochs: int = 1, tolerance: float = 0.05) -> PrefetchReport:
    """Measure samples/s of `net` trained on `source` (re-iterable or function) at each depth.

    Runs are interleaved (every depth once per round, order rotated each round) so that load
    drifting over time does not favour one depth; each depth's figure is the median of its runs.
    The net keeps training during the measurement: pass a copy if its weights matter.
    """
    depths = sorted(set(int(d) for d in depths))
    if not depths or depths[0] < 1:
        raise ValueError(f"depths={list(depths)} must be ints >= 1")
    if repeats < 1 or epochs < 1:
        raise ValueError(f"repeats={repeats} and epochs={epochs} must be >= 1")
    if warmup_epochs:
        fit(net, source, epochs=warmup_epochs, prefetch=depths[-1], progress=False)  # JIT, workspaces learn sizes
    runs: dict[int, list[float]] = {d: [] for d in depths}
    for round_ in range(repeats):
        shift = round_ % len(depths)
        for depth in depths[shift:] + depths[:shift]:
            runs[depth].append(fit(net, source, epochs=epochs, prefetch=depth, progress=False).samples_per_s)
    per_batch = _batch_bytes(source)
    results = [DepthResult(depth=d, samples_per_s=statistics.median(runs[d]), runs=runs[d],
                           queue_bytes=d * per_batch) for d in depths]
    best = max(results, key=lambda r: r.samples_per_s)
    good_enough = [r for r in results if r.samples_per_s >= (1 - tolerance) * best.samples_per_s]
    recommended = min(good_enough, key=lambda r: r.depth)
    return PrefetchReport(results=results, recommended=recommended.depth, best=best.depth, tolerance=tolerance,
                          epochs_per_run=epochs, repeats=repeats)


__all__ = ["DEFAULT_DEPTHS", "DepthResult", "PrefetchReport", "tune_prefetch"]
