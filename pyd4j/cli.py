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


class _Group(click.Group):
    """Subcommands whose arguments click refuses keep the `--json` promise.

    A bad argument (an unknown choice, a missing file, a `click.BadParameter` raised by the
    command) is printed by click as usage text on stderr. With `--json` among the subcommand's
    own options (before any `--`), it becomes the document `pyd4j.output.fail()` prints for the
    commands' own errors, `{"ok": false, "error": ...}`, on stdout, with click's exit status.
    """

    def invoke(self, ctx: click.Context):
        args = [*getattr(ctx, "_protected_args", ()), *ctx.args]
        own = args[: args.index("--")] if "--" in args else args
        try:
            return super().invoke(ctx)
        except click.ClickException as err:
            if "--json" not in own[1:]:
                raise
            from pyd4j.output import fail  # noqa: PLC0415

            fail(err.format_message(), as_json=True, code=err.exit_code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
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
