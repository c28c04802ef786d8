"""`pyd4j estimate`: the memory a DL4J network needs, term by term, with where each number comes from."""

from __future__ import annotations

import click

from pyd4j.commands import _params as params
from pyd4j.commands._common import network_options, print_estimate
from pyd4j.output import emit_json


@click.command("estimate")
@network_options
@click.option("--batch", required=True, type=params.BATCH, help="Minibatch size.")
def command(model: str, input_spec: str | None, dtype: str, mode: str, prefetch: int, as_json: bool, batch: int) -> None:
    """Memory a DL4J network needs: DL4J's report plus what it leaves out."""
    from pyd4j.memory.estimate import estimate  # noqa: PLC0415

    est = estimate(model, batch, dtype=dtype, mode=mode, input=input_spec, prefetch_queue=prefetch)
    if as_json:
        emit_json(est.to_dict())
    else:
        print_estimate(est)
