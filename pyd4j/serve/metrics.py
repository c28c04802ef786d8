"""Prometheus metrics of one server (its own registry, so two servers in a process do not mix)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

if TYPE_CHECKING:
    from pyd4j.serve.model import Footprint

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class Metrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.requests = Counter("pyd4j_serve_requests", "Inference requests by model and HTTP status",
                                ["model", "status"], registry=r)
        self.latency = Histogram("pyd4j_serve_request_seconds", "Inference request latency (server side)",
                                 ["model"], buckets=_LATENCY_BUCKETS, registry=r)
        self.batch_rows = Histogram("pyd4j_serve_batch_rows", "Rows per output() call after dynamic batching",
                                    ["model"], buckets=_BATCH_BUCKETS, registry=r)
        self.resident_bytes = Gauge("pyd4j_serve_resident_bytes", "Bytes the model holds while resident (0 when evicted)",
                                    ["model"], registry=r)
        self.footprint_bytes = Gauge("pyd4j_serve_footprint_bytes",
                                     "Footprint measured at load (kind: params, workspaces, io, total, estimate)",
                                     ["model", "kind"], registry=r)
        self.evictions = Counter("pyd4j_serve_evictions", "Evictions to the disk tier", ["model"], registry=r)
        self.restores = Counter("pyd4j_serve_restores", "Restores from the disk tier", ["model"], registry=r)
        self.restore_seconds = Histogram("pyd4j_serve_restore_seconds", "Time to restore a model from the disk tier",
                                         ["model"], buckets=_LATENCY_BUCKETS, registry=r)
        self.evict_seconds = Histogram("pyd4j_serve_evict_seconds", "Time to evict a model to the disk tier",
                                       ["model"], buckets=_LATENCY_BUCKETS, registry=r)
        self.load_failures = Counter("pyd4j_serve_load_failures", "Models that failed to load", ["model"], registry=r)
        self.eviction_failures = Counter("pyd4j_serve_eviction_failures",
                                         "Evictions that failed (the model stayed resident), e.g. a full disk",
                                         ["model"], registry=r)
        self.eviction_failing = Gauge("pyd4j_serve_eviction_failing",
                                      "1 while the model's last eviction failed (it stays resident; retried later)",
                                      ["model"], registry=r)
        self.budget_bytes = Gauge("pyd4j_serve_budget_bytes", "The memory budget (0: none)", registry=r)

    def request(self, model: str, status: int, seconds: float) -> None:
        self.requests.labels(model, str(status)).inc()
        if status == 200:
            self.latency.labels(model).observe(seconds)

    def batch(self, model: str, rows: int) -> None:
        self.batch_rows.labels(model).observe(rows)

    def footprint(self, model: str, fp: "Footprint") -> None:
        for kind, value in (("params", fp.params_bytes), ("workspaces", fp.workspace_bytes), ("io", fp.io_bytes),
                            ("total", fp.total_bytes), ("estimate", fp.estimate_bytes)):
            if value is not None:   # no estimate: the series is absent rather than a made-up 0
                self.footprint_bytes.labels(model, kind).set(value)

    def resident(self, model: str, n: int) -> None:
        self.resident_bytes.labels(model).set(n)

    def evicted(self, model: str, seconds: float) -> None:
        self.evictions.labels(model).inc()
        self.eviction_failing.labels(model).set(0)
        self.evict_seconds.labels(model).observe(seconds)
        self.resident_bytes.labels(model).set(0)

    def restored(self, model: str, seconds: float, resident: int) -> None:
        self.restores.labels(model).inc()
        self.restore_seconds.labels(model).observe(seconds)
        self.resident_bytes.labels(model).set(resident)

    def load_failure(self, model: str) -> None:
        self.load_failures.labels(model).inc()

    def eviction_failure(self, model: str) -> None:
        self.eviction_failures.labels(model).inc()
        self.eviction_failing.labels(model).set(1)

    def text(self) -> bytes:
        return generate_latest(self.registry)
