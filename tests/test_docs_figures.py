"""README.md, benchmarks/README.md and docs/*.md say only what can be traced: each figure to its result file
and JSON key, each command and option to the `pyd4j` command's own definition.

Figure tables
-------------
A markdown table whose header row is exactly

    | figure | value | target | result file | key | command | measured |

is a figure table, in README.md, benchmarks/README.md or any page of docs/. Each row:

- `figure`: what was measured (free text, not checked).
- `value`: the measured numbers, one per key and in the keys' order. Every number in the cell is checked,
  so the cell holds no other digits. The digits printed set the rounding: `1.39` matches 1.38865, `4713`
  matches 4713.3. A unit right after a number converts the JSON value before comparing: `µs` and `ms`
  (the JSON holds seconds), `%` (a fraction), `MiB` and `GiB` (bytes), unless the key's name ends in
  that unit already (`overhead_ms` printed in ms, `slowdown_percent` in %); anything else (`×`, `s`,
  `MB/s`, words) is compared as the JSON holds it. `2,046` is two thousand and forty-six. A key whose value is
  text or true/false matches when that text is in the cell (digits in that text are not numbers to check).
- `target`: `—` where there is none; else the target and the verdict, which says `met`, `missed` or
  `not measured` (a target missed is shown as missed).
- `result file`: `benchmarks/results/NAME.json`, in backticks; the file must exist.
- `key`: one dotted path per number, each in backticks, e.g. `summary.bad_found`. List items are numbers
  (`comparisons.1.ratio`); a JSON key that itself holds a dot or a space is written as it is
  (`networks_chunked.deep_cnn_bn.planned.budget_0.4.peak_over_fit`).
- `command`: in backticks, the command line the result file's run record holds (`run.command`, or a
  later command under `run.amended`), as a shell would take it; an argument that names a folder of the
  machine that ran it (an absolute path) is written `DIR`.
- `measured`: the date (YYYY-MM-DD) of that run record: `run.started_utc`, or, for a record
  reconstructed from git (results older than the benchmark harness), `run.committed_utc`.

Commands and options
--------------------
Inside code in README.md and docs/*.md (fenced blocks and `inline spans`):

- `pyd4j WORD` (also `.venv/bin/pyd4j WORD`) names a subcommand of `pyd4j`;
- each `--option` of such a command line, up to a bare `--` (after it comes the job's own command), is
  one of that subcommand's options; a fenced line ending in a backslash continues on the next;
- a `# comment` in a fenced block, and an inline span that starts with an option (`--window 5m`), name
  options of some subcommand.

Links: every relative link `[text](path)` on these pages names a file of the project.

benchmarks/README.md holds the current figures only: at most 400 lines, and a figure table in every
section (one per capability), unless the section says "No result file yet".
"""

from __future__ import annotations

import json
import math
import re
import shlex
from pathlib import Path
from typing import Any

import click
import pytest

from pyd4j.cli import main as pyd4j_main

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS_README = ROOT / "benchmarks" / "README.md"
PAGES = [ROOT / "README.md", BENCHMARKS_README, *sorted((ROOT / "docs").glob("*.md"))]
HEADER = ["figure", "value", "target", "result file", "key", "command", "measured"]
UNITS = {"µs": 1e6, "ms": 1e3, "%": 100.0, "MiB": 1 / 2**20, "GiB": 1 / 2**30}
NAMED = {"µs": ("_us",), "ms": ("_ms",), "%": ("_percent", "_pct"), "MiB": ("_mib",), "GiB": ("_gib",)}
NUMBER = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?:\s?(µs|ms|%|MiB|GiB)(?!\w))?")
CODE_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
SUBCOMMAND = re.compile(r"(?:^|[\s/(\"'])pyd4j\s+([a-z][a-z0-9-]*)")
OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


# ---- figure tables -------------------------------------------------------------------------------------

def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def figure_rows(page: Path) -> list[tuple[str, dict[str, str]]]:
    """(where, row) for every row of every figure table on `page`."""
    rows: list[tuple[str, dict[str, str]]] = []
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        if lines[i].lstrip().startswith("|") and _cells(lines[i]) == HEADER:
            i += 2   # the header and its |---| line
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                cells = _cells(lines[i])
                assert len(cells) == len(HEADER), f"{page.name}:{i + 1}: {len(cells)} cells, not {len(HEADER)}"
                rows.append((f"{page.relative_to(ROOT)}:{i + 1}", dict(zip(HEADER, cells))))
                i += 1
        i += 1
    return rows


def resolve(doc: Any, path: str) -> Any:
    """The value at dotted `path` in `doc`; a key holding dots is matched whole (longest key first)."""
    parts = path.split(".")
    node = doc
    while parts:
        if isinstance(node, list):
            node = node[int(parts.pop(0))]
            continue
        if not isinstance(node, dict):
            raise KeyError(f"{path}: {type(node).__name__} before {'.'.join(parts)}")
        for n in range(len(parts), 0, -1):
            key = ".".join(parts[:n])
            if key in node:
                node = node[key]
                del parts[:n]
                break
        else:
            raise KeyError(f"{path}: no key {parts[0]!r} (has {sorted(node)[:12]})")
    return node


def printed_numbers(cell: str) -> list[tuple[float, int, str | None]]:
    """(number, decimals, unit) for each number in a value cell."""
    out = []
    for m in NUMBER.finditer(cell):
        whole, frac, unit = m.group(1), m.group(2) or "", m.group(3)
        out.append((float(whole.replace(",", "") + frac), max(len(frac) - 1, 0), unit))
    return out


def matches(printed: tuple[float, int, str | None], value: Any, key: str = "") -> bool:
    number, decimals, unit = printed
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    named = unit is not None and key.lower().endswith(NAMED.get(unit, ()))
    scaled = value * (1.0 if named else UNITS.get(unit or "", 1.0))
    return abs(scaled - number) <= 0.5 * 10 ** -decimals + 1e-9 * max(1.0, abs(number))


def run_record_dates(run: dict[str, Any]) -> set[str]:
    dates = {str(run[k])[:10] for k in ("started_utc", "committed_utc") if run.get(k)}
    return dates | {str(a.get("date_utc", ""))[:10] for a in run.get("amended", [])}


def run_record_commands(run: dict[str, Any]) -> list[str]:
    """Each command of the run record as a shell takes it, also with its absolute paths written DIR."""
    out: list[str] = []
    for command in [run["command"], *(a["command"] for a in run.get("amended", []))]:
        out.append(shlex.join(command))
        out.append(shlex.join("DIR" if arg.startswith("/") else arg for arg in command))
    return list(dict.fromkeys(out))


def spans(cell: str) -> list[str]:
    return CODE_SPAN.findall(cell)


ROWS = [row for page in PAGES for row in figure_rows(page)]


def test_the_readme_has_a_figure_table() -> None:
    assert any(where.startswith("README.md") for where, _ in ROWS)


def test_benchmarks_readme_is_short_with_a_figure_table_per_section() -> None:
    """One table per capability (a `## ` section each), the current state only: at most 400 lines."""
    lines = BENCHMARKS_README.read_text().splitlines()
    assert len(lines) <= 400, f"benchmarks/README.md has {len(lines)} lines; at most 400"
    sections = [i for i, line in enumerate(lines) if line.startswith("## ")] + [len(lines)]
    assert len(sections) > 1, "benchmarks/README.md has no `## ` section"
    rel = str(BENCHMARKS_README.relative_to(ROOT))
    for start, end in zip(sections, sections[1:]):
        rows = [w for w, _ in ROWS if w.startswith(rel + ":") and start < int(w.rsplit(":", 1)[1]) <= end]
        waiting = any("No result file yet" in line for line in lines[start:end])
        assert rows or waiting, f"{rel}:{start + 1}: section {lines[start]!r} has no figure table row"


@pytest.mark.parametrize("where,row", ROWS, ids=[w for w, _ in ROWS])
def test_figure_traces_to_its_result(where: str, row: dict[str, str]) -> None:
    files = spans(row["result file"])
    assert len(files) == 1 and files[0].startswith("benchmarks/results/"), (
        f"{where}: result file {row['result file']!r}")
    path = ROOT / files[0]
    assert path.is_file(), f"{where}: {files[0]} does not exist"
    doc = json.loads(path.read_text())
    keys = spans(row["key"])
    assert keys, f"{where}: no key in backticks"
    values = [resolve(doc, k) for k in keys]
    numeric = [(k, v) for k, v in zip(keys, values) if isinstance(v, (int, float)) and not isinstance(v, bool)]
    texts = [(k, v) for k, v in zip(keys, values) if (k, v) not in numeric]
    numbers_cell = row["value"]
    for key, value in texts:
        text = json.dumps(value) if isinstance(value, bool) or value is None else str(value)
        assert text.lower() in numbers_cell.lower(), f"{where}: {key} is {text!r}, not in {row['value']!r}"
        start = numbers_cell.lower().index(text.lower())
        numbers_cell = numbers_cell[:start] + numbers_cell[start + len(text):]   # its digits are not numbers to check
    printed = printed_numbers(numbers_cell)
    assert len(printed) == len(numeric), (
        f"{where}: the value cell prints {len(printed)} numbers for {len(numeric)} numeric keys: {row['value']!r}")
    for (key, value), shown in zip(numeric, printed):
        assert matches(shown, value, key), (
            f"{where}: {key} is {value!r} in {files[0]}, the row prints {shown[0]}{shown[2] or ''}")
    target = row["target"]
    assert target == "—" or re.search(r"\b(met|missed|not measured)\b", target), (
        f"{where}: target {target!r} says neither met, missed nor not measured")
    run = doc["run"]
    commands = spans(row["command"])
    assert len(commands) == 1 and commands[0] in run_record_commands(run), (
        f"{where}: command {row['command']!r}; the run record holds {run_record_commands(run)}")
    assert row["measured"] in run_record_dates(run), (
        f"{where}: measured {row['measured']!r}; the run record's dates are {sorted(run_record_dates(run))}")


def test_value_parsing() -> None:
    """The rules above on hand-made cells."""
    assert printed_numbers("12 of 18; median 1.39×") == [(12.0, 0, None), (18.0, 0, None), (1.39, 2, None)]
    assert printed_numbers("2,046 requests, 0 errors") == [(2046.0, 0, None), (0.0, 0, None)]
    assert printed_numbers("24 µs; 0.4 %") == [(24.0, 0, "µs"), (0.4, 1, "%")]
    assert matches((1.39, 2, None), 1.38865) and not matches((1.39, 2, None), 1.4)
    assert matches((24.0, 0, "µs"), 2.4136e-05) and matches((4713.0, 0, None), 4713.3)
    assert matches((64.0, 0, "MiB"), 64 * 2**20) and not matches((1.0, 0, None), True)
    assert matches((1.4, 1, "ms"), 1.389, "server_overhead.batch1.overhead_ms")
    assert not matches((1.4, 1, "ms"), 1.389, "server_overhead.batch1.overhead_s")
    run = {"command": ["python", "benchmarks/x.py", "--configs", "/tmp/zoo", "--out", "r.json"]}
    assert run_record_commands(run) == ["python benchmarks/x.py --configs /tmp/zoo --out r.json",
                                        "python benchmarks/x.py --configs DIR --out r.json"]
    doc = {"a": {"budget_0.4": {"x": [1, {"y": 2}]}, "b c": 3}}
    assert resolve(doc, "a.budget_0.4.x.1.y") == 2 and resolve(doc, "a.b c") == 3
    with pytest.raises(KeyError):
        resolve(doc, "a.missing")


# ---- commands and options ------------------------------------------------------------------------------

def cli_options() -> dict[str, set[str]]:
    """Every subcommand of `pyd4j` and its long options (both names of a --x/--no-x flag)."""
    out: dict[str, set[str]] = {}
    for name, cmd in pyd4j_main.commands.items():
        names: set[str] = {"--help"}
        for param in cmd.params:
            if isinstance(param, click.Option):
                names.update(o for o in (*param.opts, *param.secondary_opts) if o.startswith("--"))
        out[name] = names
    return out


OPTIONS = cli_options()
ANY_OPTION = set().union(*OPTIONS.values())


def code_of(page: Path) -> tuple[list[str], list[str]]:
    """(fenced lines, continuation lines joined; inline spans outside fences) of a page."""
    fenced: list[str] = []
    inline: list[str] = []
    inside = False
    pending = ""
    for line in page.read_text().splitlines():
        if line.lstrip().startswith("```"):
            inside = not inside
            continue
        if inside:
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            fenced.append(pending + line)
            pending = ""
        else:
            inline.extend(CODE_SPAN.findall(line))
    return fenced, inline


def problems_in(text: str, where: str, comment_allowed: bool) -> list[str]:
    """What `text` (one command line, or one span) names that `pyd4j` does not have."""
    found: list[str] = []
    code, _, comment = text.partition(" #") if comment_allowed else (text, "", "")
    m = SUBCOMMAND.search(code)
    if m:
        sub = m.group(1)
        if sub not in OPTIONS:
            found.append(f"{where}: `pyd4j {sub}` is not a subcommand ({sorted(OPTIONS)})")
        else:
            own = code[m.end():]
            own = re.split(r"(?:^|\s)--(?:\s|$)", own, maxsplit=1)[0]   # a bare -- starts the job's command
            found += [f"{where}: `pyd4j {sub}` has no {o}" for o in OPTION.findall(own) if o not in OPTIONS[sub]]
    elif code.lstrip().startswith("--"):
        found += [f"{where}: no subcommand has {o}" for o in OPTION.findall(code) if o not in ANY_OPTION]
    for sub in SUBCOMMAND.findall(comment):
        if sub not in OPTIONS:
            found.append(f"{where}: `pyd4j {sub}` (in a comment) is not a subcommand")
    found += [f"{where}: no subcommand has {o} (in a comment)" for o in OPTION.findall(comment) if o not in ANY_OPTION]
    return found


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_commands_and_options_exist(page: Path) -> None:
    fenced, inline = code_of(page)
    name = str(page.relative_to(ROOT))
    problems = [p for line in fenced for p in problems_in(line, name, comment_allowed=True)]
    problems += [p for span in inline for p in problems_in(span, name, comment_allowed=False)]
    assert not problems, "\n".join(problems)


def test_option_checks_catch_what_does_not_exist() -> None:
    assert problems_in("pyd4j tune --speed --window 5m -- java --cp x", "t", True) == []
    assert problems_in("pyd4j tune --sped -- java", "t", True) == ["t: `pyd4j tune` has no --sped"]
    assert problems_in(".venv/bin/pyd4j tuner --json", "t", True)[0].startswith("t: `pyd4j tuner`")
    assert problems_in("--no-such-option", "t", False) == ["t: no subcommand has --no-such-option"]
    assert problems_in("pyd4j serve --budget 64m  # see --idle-before-evict", "t", True) == []


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_relative_links_resolve(page: Path) -> None:
    """Every relative link `[text](path)` on a page names a file of the project."""
    links = re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", page.read_text())
    missing = [link for link in links if "://" not in link and not (page.parent / link).exists()]
    assert not missing, f"{page.relative_to(ROOT)}: links to missing files {missing}"
