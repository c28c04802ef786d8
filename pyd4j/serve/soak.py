"""Soak: N requests per model through the server's HTTP API, with the server's memory sampled.

Between rounds of requests the JVM collects fully and the server process's resident memory, the
live Java heap and JavaCPP's count are read: the same "memory kept after full collections" points
pyd4j.profile.diagnose judges for training jobs. `pyd4j serve --soak` (pyd4j.commands.serve)
hands them to the profiler's judge(), x being the requests served; serve sits beside profile in
the layers and does not import it.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import numpy as np


def request_body(model: Any, rows: int = 1, seed: int = 0) -> bytes:
    """An OIP v2 JSON request of `rows` random rows for a ServedModel's inputs."""
    rng = np.random.default_rng(seed)
    inputs = []
    for s in model.inputs:
        shape = [rows, *s.shape[1:]]
        inputs.append({"name": s.name, "shape": shape, "datatype": s.datatype,
                       "data": rng.random(int(np.prod(shape)), dtype=np.float32).tolist()})
    return json.dumps({"inputs": inputs}).encode()


async def _drive(url: str, plan: list[str], bodies: dict[str, bytes], concurrency: int,
                 deadline: float | None) -> list[tuple[str, int, float]]:
    import httpx  # noqa: PLC0415

    out: list[tuple[str, int, float]] = []
    it = iter(plan)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120.0) as client:
        async def one_client() -> None:
            for name in it:
                if deadline is not None and time.monotonic() > deadline:
                    return
                t0 = time.perf_counter()
                try:
                    r = await client.post(f"/v2/models/{name}/infer", content=bodies[name],
                                          headers={"content-type": "application/json"})
                    status = r.status_code
                except httpx.HTTPError:
                    status = -1
                out.append((name, status, time.perf_counter() - t0))
        await asyncio.gather(*(one_client() for _ in range(concurrency)))
    return out


def drive(url: str, plan: list[str], bodies: dict[str, bytes], concurrency: int = 4,
          max_seconds: float | None = None) -> list[tuple[str, int, float]]:
    """Send one request per entry of `plan` (model names) from `concurrency` concurrent clients;
    (model, HTTP status or -1, seconds) for each request sent before `max_seconds`."""
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    return asyncio.run(_drive(url, plan, bodies, concurrency, deadline))


def memory_point() -> dict[str, float]:
    """Memory kept after full collections: process RSS, live Java heap, JavaCPP's count."""
    import jpype  # noqa: PLC0415
    import psutil  # noqa: PLC0415

    system = jpype.JClass("java.lang.System")
    for _ in range(2):
        system.gc()
        time.sleep(0.2)  # ND4J's and JavaCPP's deallocators run after the collection
    rt = jpype.JClass("java.lang.Runtime").getRuntime()
    pointer = jpype.JClass("org.bytedeco.javacpp.Pointer")
    return {"rss": float(psutil.Process().memory_info().rss), "heap_live": float(rt.totalMemory() - rt.freeMemory()),
            "javacpp_total": float(pointer.totalBytes())}


def soak(server: Any, requests_per_model: int, points: int = 10, concurrency: int = 4) -> dict[str, Any]:
    """Run `requests_per_model` batch-1 requests per ready model in `points` rounds, sampling memory
    kept after full collections before the first round and after each."""

    names = [n for n, w in server.workers.items() if w.state == "ready"]
    bodies = {n: request_body(server.model(n)) for n in names}
    per_round = max(1, requests_per_model // points)
    samples = [{"requests": 0, **memory_point()}]
    done, failed, statuses = 0, 0, {}
    t0 = time.perf_counter()
    while done < requests_per_model:
        n = min(per_round, requests_per_model - done)
        plan = [name for _ in range(n) for name in names]
        for _, status, _ in drive(server.url, plan, bodies, concurrency):
            statuses[status] = statuses.get(status, 0) + 1
            failed += status != 200
        done += n
        samples.append({"requests": done * len(names), **memory_point()})
    seconds = time.perf_counter() - t0
    return {"requests_per_model": requests_per_model, "models": names, "requests": done * len(names),
            "failed": failed, "statuses": {str(k): v for k, v in statuses.items()}, "seconds": round(seconds, 2),
            "samples": samples}
