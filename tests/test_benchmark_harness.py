"""The benchmarks' harness: scripts stand on it alone (no script edits sys.path or imports another script),
every script is listed with what it measures, A/B sides are interleaved, and what it writes validates."""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path

import pytest

from benchmarks.harness import Recorder, interleave, median_range, order, ratios
from benchmarks.harness.catalog import CATALOG, listing

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"


def scripts() -> list[Path]:
    """The benchmark scripts git tracks (every one in the folder outside a git checkout)."""
    out = subprocess.run(["git", "ls-files", "benchmarks/*.py"], cwd=ROOT, capture_output=True, text=True)
    names = [n for n in out.stdout.splitlines() if n.count("/") == 1] if out.returncode == 0 else []
    return [ROOT / n for n in names] or sorted(BENCHMARKS.glob("*.py"))


SCRIPTS = scripts()


def test_every_script_is_listed_and_every_entry_is_a_script() -> None:
    names = {p.stem for p in SCRIPTS}
    assert len(names) > 30
    assert names == set(CATALOG)
    text = listing()
    for name, b in CATALOG.items():
        assert name in text and b.takes in text
        assert b.measures and b.takes[0].isdigit()


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_script_stands_on_the_harness(path: Path) -> None:
    tree = ast.parse(path.read_text())
    script_names = {p.stem for p in SCRIPTS}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mods = [node.module or ""]
        else:
            mods = []
        for mod in mods:
            assert not mod.startswith("benchmarks"), f"{path.name} imports {mod}"
            assert mod.split(".")[0] not in script_names, f"{path.name} imports the script {mod}"
        if isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name):
            assert node.value.id != "sys", f"{path.name} edits sys.path (the harness puts the project on it)"
    assert "Recorder" in path.read_text(), f"{path.name} writes its results without the harness's run record"


def test_interleave_reverses_every_other_round() -> None:
    seen: list[tuple[str, int]] = []
    out = interleave(("a", "b"), 3, lambda side, r: seen.append((side, r)) or f"{side}{r}")
    assert seen == [("a", 0), ("b", 0), ("b", 1), ("a", 1), ("a", 2), ("b", 2)]
    assert out == {"a": ["a0", "a1", "a2"], "b": ["b0", "b1", "b2"]}
    assert [order("xyz", r, rotate=True) for r in range(4)] == [list("xyz"), list("yzx"), list("zxy"), list("xyz")]


def test_ratios_and_their_median_and_range() -> None:
    assert ratios([2.0, None, 3.0, 4.0], [1.0, 1.0, 0.0, 2.0]) == [2.0, 2.0]
    assert median_range([1.0, 3.0, 2.0, 10.0]) == {"median": 2.5, "range": [1.0, 10.0]}
    assert median_range([]) is None


def test_recorder_writes_a_valid_run_and_amending_keeps_it(tmp_path: Path) -> None:
    rec = Recorder("tiers")
    rec.doc["figure"] = 1.5
    hidden = rec.hide(tmp_path / "scratch")
    rec.doc["where"] = str(hidden / "x.json")
    path = rec.write(tmp_path / "out.json")
    doc = json.loads(path.read_text())
    assert doc["figure"] == 1.5 and doc["where"] == "<runs>/x.json"
    run = doc["run"]
    assert run["benchmark"] == "tiers" and len(run["commit"]) == 40 and run["seconds"] >= 0
    assert len(run["load_average_start"]) == 3 and run["machine"]["cpus"] >= 1
    again = Recorder.amending(path)
    again.doc["figure"] = 2.0
    again.write(path)
    doc2 = json.loads(path.read_text())
    assert doc2["figure"] == 2.0
    assert {k: v for k, v in doc2["run"].items() if k != "amended"} == run
    assert len(doc2["run"]["amended"]) == 1 and doc2["run"]["amended"][0]["commit"] == run["commit"]


def test_recorder_refuses_to_write_a_broken_run(tmp_path: Path) -> None:
    rec = Recorder("tiers")
    del rec.run["machine"]
    with pytest.raises(ValueError, match="machine"):
        rec.write(tmp_path / "out.json")
    assert not (tmp_path / "out.json").exists()
