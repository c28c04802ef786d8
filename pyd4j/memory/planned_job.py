"""What a planned training job holds off the Java heap: one figure, made by one function.

A plan's simulated device peak (`SimResult.device_peak_bytes` of the plan the trainer runs) is the
memory of its training step: parameters, gradients, updater state, activations, their gradients and
the steps' working memory, as the plan schedules them. The job holds more than its step: the data
pipeline's prefetch buffers and what glibc keeps of an LSTM's per-step pieces, which any training run
of the network holds, planned or not (`Estimate.beside_the_step_bytes`, the one memory model's terms).

`planned_job_offheap` adds the two. That sum is the figure `pyd4j plan` prints for the plan it chooses,
`pyd4j.train.fit(..., memory="superneurons")` records in its result's `.plan`, `pyd4j tune --plan`
shows for the job it plans, and benchmarks/zoo_coverage.py measures against a planned job's native
memory: made here only, so that what users see and what the benchmark validates cannot drift apart.
`planned_job` makes the estimate the figure needs the one way every surface makes it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from pyd4j.dl4j.input_types import inputs_from_shapes
from pyd4j.inputs import InputError
from pyd4j.jvm.classpath import ClasspathError
from pyd4j.jvm.errors import JavaError
from pyd4j.jvm.java import JavaNotFoundError
from pyd4j.memory.estimate import DL4J_FIT_PREFETCH_QUEUE, Estimate, estimate
from pyd4j.output import human_bytes

KEY = "planned_job_offheap"
"""The key the figure's document (`PlannedJobOffheap.to_dict`) goes under on every surface."""
NOT_ESTIMATED = (InputError, JavaError, JavaNotFoundError, ClasspathError)
"""Why a figure may be missing: a network the plan reads and the memory model does not, DL4J refusing its
memory report, no JVM to ask. A surface then shows the plan's peak and the reason: the figure is a report
beside the plan, and planning or training under it goes on."""


@dataclass(frozen=True)
class PlannedJobOffheap:
    """What a planned training job holds off the heap (bytes): its plan's peak and what it holds beside the step."""

    plan_peak_bytes: int          # the plan's simulated device peak: the training step
    beside_the_step_bytes: int    # the data pipeline and glibc's LSTM pieces (Estimate.beside_the_step_bytes)
    total_bytes: int              # the two together: the figure
    data_pipeline_bytes: int      # of beside_the_step_bytes, the data pipeline's prefetch buffers
    prefetch_queue: int           # the data pipeline's async queue the estimate assumed

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        return offheap_line(self.to_dict())


def planned_job_offheap(plan_peak_bytes: int, estimate: Estimate) -> PlannedJobOffheap:
    """The off-heap memory of a job training under a plan whose simulated device peak is `plan_peak_bytes`:
    that peak (the training step, as the plan schedules it) plus what the job holds besides its step
    (`estimate.beside_the_step_bytes()`: the data pipeline's prefetch buffers, what glibc keeps of an
    LSTM's per-step pieces), which the plan does not schedule and the same network holds planned or not.
    `estimate`: the network's training estimate at the plan's batch, with the job's prefetch queue."""
    if estimate.mode != "train":
        raise ValueError(f"a planned job trains: give its training estimate, not the {estimate.mode} one")
    beside = estimate.beside_the_step_bytes()
    return PlannedJobOffheap(plan_peak_bytes=int(plan_peak_bytes), beside_the_step_bytes=beside,
                             total_bytes=int(plan_peak_bytes) + beside,
                             data_pipeline_bytes=estimate.term_bytes("prefetch_buffers"),
                             prefetch_queue=estimate.prefetch_queue)


def planned_job(plan_peak_bytes: int, model: Any, batch: int, dtype: str = "float32",
                input: str | dict | list | None = None,  # noqa: A002
                prefetch_queue: int = DL4J_FIT_PREFETCH_QUEUE) -> PlannedJobOffheap:
    """`planned_job_offheap` with the network's training estimate made here (`pyd4j.memory.estimate.estimate`:
    `model` a DL4J JSON file, JSON text or live network; `input` its input types where no sidecar gives them)
    at the plan's `batch` and data type, with the job's data pipeline: DL4J's own fit() queue unless the job
    feeds it another (pyd4j.train.fit's `prefetch`)."""
    return planned_job_offheap(plan_peak_bytes, estimate(model, batch, dtype=dtype, mode="train", input=input,
                                                         prefetch_queue=prefetch_queue))


def planned_job_document(plan_peak_bytes: int, model: Any, batch: int, dtype: str,
                         input: str | dict | list | None = None,  # noqa: A002
                         prefetch_queue: int = DL4J_FIT_PREFETCH_QUEUE) -> dict[str, Any]:
    """`planned_job` as the document every surface carries under `KEY`; where the figure cannot be made
    (`NOT_ESTIMATED`), the plan's peak and the reason instead."""
    try:
        return planned_job(plan_peak_bytes, model, batch, dtype, input, prefetch_queue).to_dict()
    except NOT_ESTIMATED as err:
        return {"plan_peak_bytes": int(plan_peak_bytes), "error": str(err)}


def job_network_document(plan_peak_bytes: int, conf: dict[str, Any], shapes: list[list[int]], dtype: str,
                         prefetch_queue: int = DL4J_FIT_PREFETCH_QUEUE) -> dict[str, Any]:
    """`planned_job_document` of a network known by its configuration (DL4J's JSON as a dict) and the shapes
    of the batch it trains on (batch first, one per input: a plan's DATA nodes, the agent's first batch)."""
    try:
        inputs = inputs_from_shapes(conf, shapes)
    except InputError as err:
        return {"plan_peak_bytes": int(plan_peak_bytes), "error": str(err)}
    return planned_job_document(plan_peak_bytes, json.dumps(conf), int(shapes[0][0]), dtype, inputs, prefetch_queue)


def offheap_line(figure: dict[str, Any]) -> str:
    """The figure in one line, from its document (`PlannedJobOffheap.to_dict`), as every surface prints it."""
    if "total_bytes" not in figure:
        return f"the planned job's off-heap memory: not estimated ({figure.get('error')})"
    pipeline = figure["data_pipeline_bytes"]
    kept = figure["beside_the_step_bytes"] - pipeline
    return (f"the planned job holds {human_bytes(figure['total_bytes'])} off the heap: plan peak "
            f"{human_bytes(figure['plan_peak_bytes'])} + {human_bytes(figure['beside_the_step_bytes'])} beside the "
            f"step (data pipeline {human_bytes(pipeline)}, prefetch queue {figure['prefetch_queue']}"
            + (f"; glibc's LSTM pieces {human_bytes(kept)}" if kept else "") + ")")
