"""The `pyd4j` command.

Each subcommand lives in its own module under `pyd4j/commands/` and exposes `command`, a
click command. Every subcommand prints a human table by default and one JSON document with
`--json`.
"""

from __future__ import annotations

import copy
import importlib
import pkgutil

import click

from pyd4j import __version__
from pyd4j import commands


class _Group(click.Group):
    """One error path for every subcommand.

    Bad input (click's own refusals, `pyd4j.inputs.InputError` and the errors that say the machine
    lacks Java or pyd4j's jars) becomes one line on stderr, or, with `--json` among the
    subcommand's own options (before any `--`), the document `pyd4j.output.fail()` prints,
    `{"ok": false, "error": ...}`, on stdout. Anything else is a bug and keeps its traceback.
    """

    def invoke(self, ctx: click.Context):
        args = [*getattr(ctx, "_protected_args", ()), *ctx.args]
        own = args[: args.index("--")] if "--" in args else args
        as_json = "--json" in own[1:]
        from pyd4j.output import fail  # noqa: PLC0415

        try:
            return super().invoke(ctx)
        except click.ClickException as err:
            if not as_json:
                raise
            fail(err.format_message(), as_json=True, code=err.exit_code)
        except _user_errors() as err:
            fail(_message(err), as_json=as_json, code=2)


def _user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean bad input or a machine not set up, never a bug in pyd4j."""
    from pyd4j.inputs import InputError  # noqa: PLC0415
    from pyd4j.jvm.classpath import ClasspathError  # noqa: PLC0415
    from pyd4j.jvm.java import JavaNotFoundError  # noqa: PLC0415
    from pyd4j.jvm.options import JvmOptionError  # noqa: PLC0415
    from pyd4j.profile.command import JobCommandError  # noqa: PLC0415
    from pyd4j.schemas import SchemaError  # noqa: PLC0415

    return InputError, ClasspathError, JavaNotFoundError, JvmOptionError, JobCommandError, SchemaError, OSError


def _message(err: BaseException) -> str:
    """The error's own words; an OSError names the file and what the system said."""
    if isinstance(err, OSError) and err.strerror:
        return f"{err.filename}: {err.strerror}" if err.filename else err.strerror
    return str(err)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="pyd4j")
def main() -> None:
    """Memory and performance toolkit for Deeplearning4j / ND4J."""


def _register_subcommands() -> None:
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):  # shared option types and helpers, not subcommands
            continue
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        main.add_command(module.command)
        for old in getattr(module, "OLD_NAMES", ()):   # a renamed command's old name keeps working, unlisted
            main.add_command(_alias(module.command, old))


def _alias(command: click.Command, name: str) -> click.Command:
    alias = copy.copy(command)
    alias.name, alias.hidden = name, True
    return alias


_register_subcommands()

if __name__ == "__main__":
    main()
