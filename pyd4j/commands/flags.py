"""`pyd4j flags`: JVM flags that hold a DL4J network, for java, Maven, Gradle, Spark or Kubernetes.

`--json` keys: ok, flags (list of arguments), total_bytes (container limit), breakdown (term -> bytes),
sources (term -> dl4j-report / measured / estimate), reasons (argument -> why), heap_bytes, maxbytes,
maxphysicalbytes, max_direct_bytes, budget_bytes, rendered (the chosen --format). A budget that cannot hold
the network exits 3 with ok=false, needed_bytes, biggest_term and largest_batch.
"""

from __future__ import annotations

import click

from pyd4j.memory.cli_common import fail, handle_errors, network_options, print_estimate
from pyd4j.output import emit_json, human_bytes, print_table


@click.command("flags")
@network_options
@click.option("--batch", required=True, type=int, help="Minibatch size.")
@click.option("--total", default=None, help="Total memory budget, e.g. 8g (default: cgroup limit, else RAM).")
@click.option("--gpu-mem", default=None, help="GPU memory budget, e.g. 16g (CUDA backend).")
@click.option("--headroom", default=0.15, show_default=True, type=float, help="Fraction added to estimates.")
@click.option("--format", "fmt", default="args", show_default=True,
              type=click.Choice(["args", "env", "maven", "gradle", "spark", "k8s"]), help="Output format.")
@handle_errors
def command(model: str, input_spec: str | None, dtype: str, mode: str, prefetch: int, as_json: bool, batch: int,
            total: str | None, gpu_mem: str | None, headroom: float, fmt: str) -> None:
    """JVM flags (-Xmx, maxbytes, maxphysicalbytes, ...) that hold a DL4J network, each with its reason."""
    from pyd4j.memory.estimate import estimate  # noqa: PLC0415
    from pyd4j.memory.flags import BudgetError, flags  # noqa: PLC0415

    est = estimate(model, batch, dtype=dtype, mode=mode, input=input_spec, prefetch_queue=prefetch)
    try:
        fs = flags(est, total=total, headroom=headroom, gpu_mem=gpu_mem)
    except BudgetError as err:
        fail(str(err), as_json, code=3, needed_bytes=err.needed_bytes, budget_bytes=err.budget_bytes,
             biggest_term=err.biggest_term, largest_batch=err.largest_batch, breakdown=err.breakdown)
        return
    if as_json:
        emit_json({"ok": True, **fs.to_dict(), "rendered": fs.render(fmt)})
        return
    print_estimate(est)
    print_table("JVM flags", ["flag", "value", "reason"], [(f.name, f.arg, f.reason) for f in fs.flags])
    for note in fs.notes:
        click.echo(note)
    if fs.budget_bytes:
        click.echo(f"budget {human_bytes(fs.budget_bytes)}: uses {human_bytes(fs.total_bytes)}, "
                   f"{human_bytes(fs.budget_bytes - fs.total_bytes)} to spare")
    click.echo(f"\n{fs.render(fmt)}")
