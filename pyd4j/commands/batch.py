"""`pyd4j batch`: the largest minibatch a DL4J network can train (or infer) with in a memory budget."""

from __future__ import annotations

import click

from pyd4j.commands import _params as params
from pyd4j.commands._common import network_options, no_pin_option
from pyd4j.output import emit_json, fail, human_bytes, print_table


@click.command("batch")
@network_options
@click.option("--total", default=None, type=params.SIZE, help="Host memory budget, e.g. 8g (default: cgroup limit, else RAM).")
@click.option("--gpu-mem", default=None, type=params.SIZE, help="GPU memory budget, e.g. 16g: the batch must fit the device.")
@click.option("--headroom", default=0.15, show_default=True, type=params.HEADROOM, help="Fraction added to estimates.")
@no_pin_option
def command(model: str, input_spec: str | None, dtype: str, mode: str, prefetch: int, as_json: bool,
            total: int | None, gpu_mem: int | None, headroom: float, no_pin: bool) -> None:
    """Largest minibatch that fits a CPU RAM or GPU memory budget. Exits 3 when not even batch 1 fits."""
    from pyd4j.memory.estimate import estimate  # noqa: PLC0415
    from pyd4j.memory.flags import default_total, flags, largest_batch  # noqa: PLC0415

    est = estimate(model, 1, dtype=dtype, mode=mode, input=input_spec, prefetch_queue=prefetch)
    budget = total if total is not None or gpu_mem is not None else default_total()
    best = largest_batch(est, total=budget, gpu_mem=gpu_mem, headroom=headroom, pin_jvm=not no_pin)
    if best == 0:
        need = flags(est, total=None, headroom=headroom, gpu_mem=gpu_mem, refuse=False, pin_jvm=not no_pin)
        limits = [f"--total {human_bytes(total)}" if total is not None else f"the machine's {human_bytes(budget)}"] if budget else []
        limits += [f"--gpu-mem {human_bytes(gpu_mem)}"] if gpu_mem is not None else []
        fail(f"not even minibatch 1 of {est.model} fits in {' and '.join(limits)}: batch 1 needs "
             f"{human_bytes(need.total_bytes)} of host memory"
             + (f" and {human_bytes(need.gpu_need_bytes)} of GPU memory" if gpu_mem is not None and need.gpu_need_bytes else "")
             + "; raise the budget, or try --dtype float16 or --mode infer",
             as_json, code=3, largest_batch=0, needed_bytes=need.total_bytes)
        return
    fs = flags(est.at_batch(best), total=budget, headroom=headroom, gpu_mem=gpu_mem, pin_jvm=not no_pin)
    doc = {"ok": True, "model": est.model, "mode": est.mode, "dtype": est.dtype, "largest_batch": best,
           "total_bytes": fs.total_bytes, "budget_bytes": fs.budget_bytes, "gpu_budget_bytes": fs.gpu_budget_bytes,
           "gpu_need_bytes": fs.gpu_need_bytes, "flags": fs.args(), "environment": fs.environment, "breakdown": fs.breakdown}
    if as_json:
        emit_json(doc)
    else:
        print_table(f"largest minibatch for {est.model}", ["batch", "needs", "budget"],
                    [(best, human_bytes(fs.total_bytes), human_bytes(fs.budget_bytes) if fs.budget_bytes else human_bytes(gpu_mem))])
        if fs.environment:
            click.echo(f"# in the job's environment: {' '.join(fs.environment_assignments())}")
        click.echo(" ".join(fs.args()))
