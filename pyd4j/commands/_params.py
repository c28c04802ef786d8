"""Click parameter types for every subcommand's options, built on the one validation layer
(`pyd4j.inputs`): the same bad value gets the same error everywhere, naming the value, the limit
and the fix, before a JVM starts, a job runs or a directory is made."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import click

from pyd4j.inputs import (JAVA_INT_MAX, MAX_INTERVAL_MS, InputError, executable, output_dir_error,
                          regular_file)


def job_command(argv: list[str] | tuple[str, ...]) -> None:
    """The job command after `--`: a command line pyd4j can run, whose program exists, checked
    before any run directory is made."""
    from pyd4j.profile.command import JobCommand  # noqa: PLC0415  (the one parser of job command lines)

    command = JobCommand.parse(list(argv))  # a launcher's program is checked there (on PATH, executable)
    if command.java is not None:
        executable(command.java.java)  # `java` resolved as every JVM pyd4j starts (JAVA_HOME first)



# ----------------------------------------------------------------------------- click types

class Whole(click.ParamType):
    """A whole number in [low, high] (high defaults to Java's int), refused with the fix."""

    name = "integer"

    def __init__(self, low: int = 1, high: int = JAVA_INT_MAX, example: str = "", why: str = "") -> None:
        self.low, self.high, self.example, self.why = low, high, example, why

    def convert(self, value: Any, param, ctx) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            try:
                number = int(str(value).strip(), 10)
            except ValueError:
                self.fail(f"{value!r} is not a whole number{self._hint()}", param, ctx)
        if not self.low <= number <= self.high:
            shown = str(value) if len(str(value)) <= 40 else f"{str(value)[:20]}...({len(str(value))} digits)"
            self.fail(f"{shown!r} is out of range: give a whole number >={self.low} and <={self.high}"
                      f"{f' ({self.why})' if self.why else ''}{self._hint()}", param, ctx)
        return number

    def _hint(self) -> str:
        return f"; e.g. {self.example}" if self.example else ""


class Real(click.ParamType):
    """A finite real number in [low, high] (NaN and infinity refused), with the fix."""

    name = "number"

    def __init__(self, low: float, high: float, example: str, low_open: bool = False) -> None:
        self.low, self.high, self.example, self.low_open = low, high, example, low_open

    def convert(self, value: Any, param, ctx) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):
            self.fail(f"{value!r} is not a number; e.g. {self.example}", param, ctx)
        too_low = number <= self.low if self.low_open else number < self.low
        if not math.isfinite(number) or too_low or number > self.high:
            low = f">{self.low:g}" if self.low_open else f">={self.low:g}"
            self.fail(f"{value!r} must be a finite number {low} and <={self.high:g}; e.g. {self.example}", param, ctx)
        return number


class ByteSize(click.ParamType):
    """A byte size as people write it ('8g', '512m'), more than 0 and within a Java long."""

    name = "size"

    def __init__(self, example: str = "8g") -> None:
        self.example = example

    def convert(self, value: Any, param, ctx) -> int:
        from pyd4j.units import SizeError, parse_bytes  # noqa: PLC0415

        try:
            n = parse_bytes(value, what="")
        except SizeError as err:
            self.fail(str(err), param, ctx)
        if n <= 0:
            self.fail(f"{value!r} must be more than 0 bytes; write e.g. '{self.example}'", param, ctx)
        return n


class InputFile(click.ParamType):
    """An existing, readable, regular file (a FIFO or device as input would block)."""

    name = "file"

    def __init__(self, what: str = "file", fix: str = "give the path of an existing file") -> None:
        self.what, self.fix = what, fix

    def convert(self, value: Any, param, ctx) -> str:
        try:
            regular_file(value, self.what, self.fix)
        except InputError as err:
            self.fail(str(err), param, ctx)
        return str(value)


class OutputDir(click.Path):
    """A directory pyd4j writes into: new or empty (never overwriting anything), and makeable."""

    def __init__(self, may_exist: bool = False, agent_safe: bool = False) -> None:
        super().__init__(file_okay=False, path_type=Path)
        self.may_exist = may_exist
        self.agent_safe = agent_safe

    def convert(self, value: Any, param, ctx) -> Path:
        path = Path(value) if not isinstance(value, Path) else value
        problem = output_dir_error(path, self.may_exist)
        if problem is None and self.agent_safe and "," in str(path.absolute()):
            problem = f"{str(path)!r} holds ',', which the profiling agent's options cannot carry; pick another path"
        if problem:
            self.fail(problem, param, ctx)
        return path


class OutputFile(click.Path):
    """A file pyd4j writes (a plot): its directory must exist; an existing file is not overwritten."""

    def __init__(self) -> None:
        super().__init__(dir_okay=False, path_type=str)

    def convert(self, value: Any, param, ctx) -> str:
        path = Path(value)
        if path.exists() or path.is_symlink():
            self.fail(f"{value!r} already exists; pyd4j does not overwrite files: give a new file name", param, ctx)
        parent = path.absolute().parent
        if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
            self.fail(f"{value!r} cannot be written: {str(parent)!r} is not a writable directory", param, ctx)
        return str(path)


# The options several subcommands share, so each is checked the same way everywhere.
BATCH = Whole(1, JAVA_INT_MAX, example="--batch 32", why="DL4J holds batch sizes in a Java int")
COUNT = Whole(1, JAVA_INT_MAX, example="1")
INTERVAL_MS = Whole(1, MAX_INTERVAL_MS, example="--interval 100",
                    why="the agent samples every 1 ms to once an hour")
SECONDS = Real(0, 1e7, example="--timeout 3600", low_open=True)
HEADROOM = Real(0, 4, example="--headroom 0.15 (15%)")
FRACTION = Real(0, 1, example="0.05")
SIZE = ByteSize()
