"""One way to print results: a rich table for people, one JSON document for `--json`."""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
from typing import TYPE_CHECKING, Any, Iterable, Iterator, NoReturn, Sequence

if TYPE_CHECKING:
    from rich.console import Console


def emit_json(document: Any) -> None:
    """Print one JSON document on stdout (what `--json` promises): strict JSON, so NaN and
    infinity (a measurement that is not a number) are written as null."""
    json.dump(_finite(document), sys.stdout, indent=2, default=str, allow_nan=False)
    sys.stdout.write("\n")


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send what the JVM or native code prints to stderr, so `--json` stays one document on stdout."""
    try:
        sys.stdout.flush()
        saved = os.dup(1)
    except (OSError, ValueError):
        yield
        return
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


# Outside a terminal (a pipe, a log file, CI) nothing says how wide a line may be: tables are
# printed as wide as their content, so no flag or path is cut or wrapped at 80 columns.
UNLIMITED_WIDTH = 100_000


def console(stderr: bool = False) -> Console:
    """A rich console: the terminal's width in a terminal, unlimited width elsewhere."""
    from rich.console import Console  # noqa: PLC0415  (heavy: only when a table is printed)

    con = Console(stderr=stderr)
    if not con.is_terminal:
        con = Console(stderr=stderr, width=UNLIMITED_WIDTH)
    return con


def print_table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Print a table for people."""
    from rich.table import Table  # noqa: PLC0415  (heavy: only when a table is printed)

    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(str(cell) for cell in row))
    console().print(table)


def human_bytes(n: float | int | None) -> str:
    """1536 -> '1.5 KiB', 64 MiB -> '64 MiB' (no '.0'): the one formatter for people."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f}".removesuffix(".0") + f" {unit}"
        value /= 1024
    return f"{value:.1f}".removesuffix(".0") + " TiB"


def fail(message: str, as_json: bool, code: int = 2, **extra: Any) -> NoReturn:
    """A command's error, keeping the `--json` promise: one `{"ok": false, "error": ...}` document
    on stdout with --json, a line on stderr otherwise; then exit non-zero."""
    import click  # noqa: PLC0415

    if as_json:
        emit_json({"ok": False, "error": message, **extra})
    else:
        click.echo(f"error: {message}", err=True)
    sys.exit(code)
