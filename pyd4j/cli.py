"""The `pyd4j` command.

Each subcommand lives in its own module under `pyd4j/commands/` and exposes `command`, a
click command. Every subcommand prints a human table by default and one JSON document with
`--json`.
"""

from __future__ import annotations

import importlib
import pkgutil

import click

from pyd4j import __version__
from pyd4j import commands


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="pyd4j")
def main() -> None:
    """Memory and performance toolkit for Deeplearning4j / ND4J."""


def _register_subcommands() -> None:
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        main.add_command(module.command)


_register_subcommands()

if __name__ == "__main__":
    main()
