"""The one validation layer for what users hand pyd4j: the readers and checks every user-given
file and value goes through (the click parameter types built on them are the CLI's,
`pyd4j.commands._params`).

The same bad value gets the same error everywhere, naming the value, the limit and the fix, and
it is refused where it enters: before a JVM starts, a job runs or a directory is made. Errors
are `InputError` (readers) or click's `BadParameter` (options); `pyd4j.cli` turns both into one
line on stderr, or with `--json` one `{"ok": false, "error": ...}` document on stdout.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import stat
from pathlib import Path
from typing import Any

JAVA_INT_MAX = 2**31 - 1          # batch sizes and counts end up in Java ints
JAVA_LONG_MAX = 2**63 - 1         # byte sizes end up in Java longs (-Xmx, JavaCPP limits)
MAX_TEXT_BYTES = 64 * 1024**2     # a DL4J configuration, sidecar or timeline line is far smaller
MAX_JSON_DEPTH = 64               # DL4J configurations nest about 6 deep
MAX_INTERVAL_MS = 3_600_000       # the agent samples at least once an hour
MAX_RESNET_DEPTH = 100_000        # the deepest ResNet planned: ~333,000 layers, a few GB of graph


class InputError(ValueError):
    """Something the user gave that pyd4j cannot use; the message names the value, the limit and the fix."""


# ----------------------------------------------------------------------------- readers

def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def regular_file(path: str | Path, what: str = "file", fix: str = "give the path of an existing file") -> Path:
    """`path` if it is a regular file this process can read: a FIFO or device would block or never end."""
    p = Path(path)
    try:
        mode = p.stat().st_mode
    except OSError as err:
        raise InputError(f"{what} {str(p)!r}: {err.strerror}; {fix}") from None
    if not stat.S_ISREG(mode):
        raise InputError(f"{what} {str(p)!r} is {_kind(mode)}, not a regular file; {fix}")
    if not os.access(p, os.R_OK):
        raise InputError(f"{what} {str(p)!r} is not readable by this user; fix its permissions")
    return p


def read_text(path: str | Path, what: str = "file", max_bytes: int = MAX_TEXT_BYTES) -> str:
    """The UTF-8 text of a regular file of at most `max_bytes`."""
    p = regular_file(path, what)
    size = p.stat().st_size
    if size > max_bytes:
        raise InputError(f"{what} {str(p)!r} is {size} bytes, more than the {max_bytes} this reads; "
                         f"give the file pyd4j expects (e.g. a DL4J configuration JSON from conf.toJson())")
    try:
        data = p.read_bytes()
    except OSError as err:
        raise InputError(f"cannot read {what} {str(p)!r}: {err.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"{what} {str(p)!r} is not UTF-8 text (byte {data[err.start]:#04x} at offset {err.start}); "
                         f"give a text file, e.g. JSON written by DL4J's toJson()") from None


def parse_json(text: str, where: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """JSON text as Python values, nested at most `max_depth` deep."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"{where} is not valid JSON: {err.msg} at line {err.lineno}, column {err.colno} "
                         f"(char {err.pos})") from None
    except RecursionError:
        raise InputError(f"{where} nests JSON deeper than {max_depth} levels; DL4J configurations nest about "
                         f"6 deep: give the JSON written by conf.toJson()") from None
    except ValueError as err:  # e.g. an integer with more digits than Python converts
        raise InputError(f"{where} is not valid JSON: {err}") from None
    depth = json_depth(value)
    if depth > max_depth:
        raise InputError(f"{where} nests JSON {depth} levels deep, more than {max_depth}; DL4J configurations "
                         f"nest about 6 deep: give the JSON written by conf.toJson()")
    return value


def json_depth(value: Any) -> int:
    """How deep lists and objects nest in a parsed JSON value (a scalar is 0), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def read_json(path: str | Path, what: str = "file", max_depth: int = MAX_JSON_DEPTH) -> Any:
    """A user's JSON file: regular, UTF-8, valid, nested at most `max_depth`."""
    return parse_json(read_text(path, what), f"{what} {str(path)!r}", max_depth)


def finite(value: Any, what: str) -> float:
    """A real number that is not NaN or infinite."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{what} {value!r} is not a number")
    if not math.isfinite(value):
        raise InputError(f"{what} {value!r} is not a finite number")
    return float(value)


def positive_int(value: Any, what: str, limit: int = JAVA_INT_MAX) -> int:
    """A whole number from 1 to `limit` (a layer size, a dimension, a batch)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
        raise InputError(f"{what} {value!r} must be a whole number from 1 to {limit}")
    return value


MAX_NAME_LENGTH = 64              # a served model's name: part of URLs and file names (255 bytes at most)
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")


def model_name(name: Any, where: str = "model name") -> str:
    """A served model's name: 1 to MAX_NAME_LENGTH ASCII letters, digits, '-', '_' and '.', not
    starting with '.'. It becomes a URL path segment (/v2/models/NAME, where '.' and '..' are
    rewritten by clients that normalise URLs) and part of file names (255 bytes on most file systems)."""
    if not isinstance(name, str):
        raise InputError(f"{where} {name!r} is a {type(name).__name__}; give a text name such as 'mlp'")
    fix = f"use 1 to {MAX_NAME_LENGTH} letters, digits, '-', '_' or '.', not starting with '.', e.g. 'mlp' or 'lenet-v2'"
    if not name:
        raise InputError(f"{where} is empty; {fix}")
    if len(name) > MAX_NAME_LENGTH:
        raise InputError(f"{where} {name[:40]!r}... is {len(name)} characters, more than {MAX_NAME_LENGTH} "
                         f"(it is part of URLs and file names); {fix}")
    bad = sorted(set(name) - _NAME_CHARS)
    if bad:
        raise InputError(f"{where} {name!r} holds {''.join(bad)!r} (it becomes part of the URL /v2/models/NAME); {fix}")
    if name.startswith("."):
        raise InputError(f"{where} {name!r} starts with '.' ('.' and '..' are rewritten by clients that normalise "
                         f"URLs); {fix}")
    return name


def executable(command: str) -> str:
    """The path of the program a job command starts, which must exist and be executable."""
    found = shutil.which(command) if os.sep not in command else (command if os.access(command, os.X_OK)
                                                                 and Path(command).is_file() else None)
    if found is None:
        where = "on PATH" if os.sep not in command else "at that path"
        raise InputError(f"the job's program {command!r} is not an executable {where}; install it, fix the path, "
                         f"or write the command as `-- java -cp job.jar com.acme.Train`")
    return found


def output_dir_error(path: Path, may_exist: bool = False) -> str | None:
    """Why `path` cannot be a directory pyd4j writes a run or report into, or None when it can:
    it must be new or empty (unless `may_exist`), and makeable under its nearest existing parent."""
    text = str(path)
    if "\0" in text or len(os.fsencode(text)) >= 4096:
        return f"{text[:80]!r}... is not a usable path"
    for part in path.parts:
        if len(os.fsencode(part)) > 255:
            return f"the name {part[:40]!r}... is longer than the 255 bytes a file name may have"
    if path.exists() or path.is_symlink():
        if not path.is_dir():
            return f"{text!r} exists and is not a directory; give a new directory"
        if not may_exist and any(path.iterdir()):
            return f"{text!r} already exists and is not empty; pyd4j never overwrites earlier runs or other files: " \
                   f"give a new or empty directory, or remove it"
        if not os.access(path, os.W_OK | os.X_OK):
            return f"{text!r} is not writable by this user"
        return None
    parent = path.absolute().parent
    while not parent.exists() and not parent.is_symlink():
        parent = parent.parent
    if not parent.is_dir():
        return f"{text!r} cannot be made: {str(parent)!r} is a file, not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{text!r} cannot be made: {str(parent)!r} is not writable by this user"
    return None
