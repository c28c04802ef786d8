"""No module over 500 lines and no function over 80, in Python and in the helper jar's Java: no exception
list; a file or function over its limit is split at its seam."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON_ROOTS = ("pyd4j", "benchmarks", "examples", "tests")
JAVA_ROOT = "java/src"
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 80

def python_files() -> list[Path]:
    return sorted(p for r in PYTHON_ROOTS for p in (ROOT / r).rglob("*.py") if "target" not in p.parts)


def java_files() -> list[Path]:
    return sorted((ROOT / JAVA_ROOT).rglob("*.java"))


def line_count(path: Path) -> int:
    return len(path.read_text().splitlines())


def python_functions(source: str) -> dict[str, int]:
    """Each function's lines, from its `def` to its last line (nested functions counted on their own too)."""
    out: dict[str, int] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = node.name
            while name in out:   # two functions of one name (e.g. in two classes): both kept
                name += "'"
            out[name] = node.end_lineno - node.lineno + 1
    return out


_JAVA_NOISE = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
_TYPE_HEADER = re.compile(r"\b(class|interface|enum|record)\b|\bnew\s+[\w.<>\[\], ?]+\(.*\)\s*$", re.S)
_CONTROL = re.compile(r"^\s*(if|for|while|switch|catch|synchronized|try|else|do)\b")


def java_methods(source: str) -> dict[str, int]:
    """Each method's (and constructor's) lines, from its declaration to its closing brace, by matching
    braces with comments and literals blanked out: a `{` whose header has a parameter list and whose
    enclosing block is a class body (named, or anonymous) opens a method."""
    text = _JAVA_NOISE.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), source)
    out: dict[str, int] = {}
    stack: list[tuple[str, str, int]] = []   # (kind, name, first line)
    header_start = 0
    for i, ch in enumerate(text):
        if ch == "{":
            header = text[header_start:i]
            enclosing = stack[-1][0] if stack else "file"
            if _TYPE_HEADER.search(header) and not _CONTROL.match(header):
                stack.append(("class", "", 0))
            elif enclosing == "class" and "(" in header and not _CONTROL.match(header):
                lines = [(n, l) for n, l in enumerate(header.split("\n")) if l.strip() and not l.strip().startswith("@")]
                offset = lines[0][0] if lines else 0
                first = text.count("\n", 0, header_start) + offset + 1
                name = header.split("(")[0].split()[-1]
                stack.append(("method", name, first))
            else:
                stack.append(("block", "", 0))
            header_start = i + 1
        elif ch == "}":
            kind, name, first = stack.pop() if stack else ("block", "", 0)
            if kind == "method":
                last = text.count("\n", 0, i) + 1
                while name in out:
                    name += "'"
                out[name] = last - first + 1
            header_start = i + 1
        elif ch == ";":
            header_start = i + 1
    return out


def measured() -> dict[str, int]:
    """Every file and function over its limit, with its size."""
    over: dict[str, int] = {}
    for path, functions in [(p, python_functions) for p in python_files()] + [(p, java_methods) for p in java_files()]:
        rel = path.relative_to(ROOT).as_posix()
        n = line_count(path)
        if n > MAX_FILE_LINES:
            over[rel] = n
        for name, size in functions(path.read_text()).items():
            if size > MAX_FUNCTION_LINES:
                over[f"{rel}::{name}"] = size
    return over


def test_nothing_over_its_limit() -> None:
    over = measured()
    assert not over, f"over {MAX_FILE_LINES} lines a file or {MAX_FUNCTION_LINES} a function: {over}; split it"


PY_SAMPLE = '''
def small():
    return 1


class A:
    @property
    def big(self):
''' + "        x = 1\n" * 80 + '''        return x
'''

JAVA_SAMPLE = """
class A {
    @Override
    public int small(int x) { return x; }
    /* a { brace in a comment */
    private static final String S = "a { brace in a string";
    A(int y) {
        if (y > 0) {
            y++;
        }
    }
    void big() {
""" + "        int x = 1;\n" * 80 + """        Runnable r = new Runnable() {
            public void run() { int z = 0; }
        };
    }
}
"""


def test_function_sizes_are_measured_from_def_to_the_last_line() -> None:
    sizes = python_functions(PY_SAMPLE)
    assert sizes == {"small": 2, "big": 82}


def test_java_method_sizes_by_brace_matching() -> None:
    sizes = java_methods(JAVA_SAMPLE)
    assert sizes["small"] == 1 and sizes["A"] == 5 and sizes["run"] == 1
    assert sizes["big"] == 85
