"""The typed file contracts (pyd4j.schemas): each exports JSON Schema and carries "schema": N; the
plan writer's files pass the plan schema; a document of another schema version is refused naming
the version this pyd4j reads; and the Java plan reader (org.pyd4j.train.PlanFile, real JVM) gives
the same verdict as the Python one on the same good and bad documents.

The bad documents count in the CLI corpus's summary (tests/test_cli_corpus.py RESULTS)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pyd4j.schemas import MODELS, VERSIONS, SchemaError, check, json_schemas
from tests.test_cli_corpus import RESULTS

ROOT = Path(__file__).resolve().parents[1]
NETS = ROOT / "examples" / "networks"


@pytest.fixture(scope="module")
def good_plan(tmp_path_factory) -> dict:
    """A plan the one writer wrote (`pyd4j plan --emit-plan`)."""
    out = tmp_path_factory.mktemp("plan") / "lenet.plan.json"
    subprocess.run([sys.executable, "-m", "pyd4j.cli", "plan", "--model", str(NETS / "lenet.json"), "--batch", "4",
                    "--policy", "recompute", "--emit-plan", str(out), "--json"], check=True, capture_output=True,
                   timeout=300)
    return json.loads(out.read_text())


def _set(doc: dict, path: str, value) -> dict:
    """A copy of `doc` with the value at dotted `path` replaced (a key "-" removes it)."""
    doc = copy.deepcopy(doc)
    *parents, last = path.split(".")
    node = doc
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if value == "-":
        del node[int(last) if isinstance(node, list) else last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return doc


# (name, dotted path, new value): each makes a good plan bad
BAD = [
    ("format other", "format", "other"), ("format missing", "format", "-"), ("version 2", "version", 2),
    ("version as text", "version", "1"), ("version 1.0", "version", 1.0), ("version true", "version", True),
    ("schema 3", "schema", 3), ("schema 0", "schema", 0), ("schema as text", "schema", "1"),
    ("sliced on schema 1", "nodes.1.sliced", True), ("sliced text", "nodes.1.sliced", "yes"),
    ("policy empty", "policy", ""), ("policy number", "policy", 3), ("policy missing", "policy", "-"),
    ("tensor_cache text", "tensor_cache", "yes"), ("budget 0", "budget_bytes", 0), ("budget negative", "budget_bytes", -5),
    ("budget past a long", "budget_bytes", 2**63), ("budget text", "budget_bytes", "1g"),
    ("network missing", "network", "-"), ("network a list", "network", []), ("kind other", "network.kind", "Sequential"),
    ("batch 0", "network.batch", 0), ("batch negative", "network.batch", -32), ("batch past an int", "network.batch", 2**31),
    ("batch text", "network.batch", "32"), ("batch 4.0", "network.batch", 4.0), ("batch missing", "network.batch", "-"),
    ("dtype number", "network.dtype", 32), ("predicted a list", "predicted", [1]),
    ("peak negative", "predicted.peak_bytes", -1), ("device peak text", "predicted.device_peak_bytes", "big"),
    ("time negative", "predicted.time_s", -0.5),
    ("nodes empty", "nodes", []), ("nodes missing", "nodes", "-"), ("node not an object", "nodes.1", 7),
    ("node id out of order", "nodes.1.id", 5), ("node id negative", "nodes.0.id", -1), ("node id text", "nodes.1.id", "1"),
    ("node type empty", "nodes.1.type", ""), ("node type missing", "nodes.1.type", "-"), ("node name number", "nodes.1.name", 4),
    ("node dl4j missing", "nodes.1.dl4j", "-"), ("node layer negative", "nodes.1.dl4j.layer", -1),
    ("node layer text", "nodes.1.dl4j.layer", "0"), ("node inputs missing", "nodes.1.inputs", "-"),
    ("node reads itself", "nodes.1.inputs", [1]), ("node reads a later node", "nodes.1.inputs", [3]),
    ("node input negative", "nodes.1.inputs", [-1]), ("y_bytes negative", "nodes.1.y_bytes", -100),
    ("y_bytes past a long", "nodes.1.y_bytes", 2**63), ("y_bytes null", "nodes.1.y_bytes", None),
    ("shape with 0", "nodes.1.shape", [4, 0, 24, 24]), ("shape negative", "nodes.1.shape", [4, -20, 24, 24]),
    ("shape not a list", "nodes.1.shape", 20),
    ("records empty", "records", []), ("records missing", "records", "-"), ("record not a list", "records.0", "ALLOC"),
    ("record too short", "records.0", ["FORWARD"]), ("record too long", "records.0", ["FORWARD", 0, {}, 1]),
    ("record op unknown", "records.0", ["JUMP", 0]), ("record op number", "records.0", [4, 0]),
    ("record arg negative", "records.0", ["FORWARD", -1]), ("record arg text", "records.0", ["FORWARD", "0"]),
    ("compute arg past the nodes", "records.0", ["FORWARD", 999]), ("tensor past the nodes", "records.0", ["FREE", 10**6]),
    ("chunks 0", "records.0", ["FORWARD", 1, {"algo": "BATCH_2", "chunks": 0}]),
    ("chunks on a FREE", "records.0", ["FREE", 5, {"algo": "BATCH_2", "chunks": 2}]),
    ("MOVE without source", "records.0", ["MOVE", 5]), ("MOVE source past the nodes", "records.0", ["MOVE", 5, 10**6]),
    ("OFFLOAD of kept state", "records.0", ["OFFLOAD", 5 * 7 + 1]), ("third element text", "records.0", ["FORWARD", 1, "x"]),
]
GOOD = [
    ("as written", "policy", "recompute"), ("without schema (older files)", "schema", "-"),
    ("without predicted", "predicted", "-"), ("null budget", "budget_bytes", None), ("unknown extra key", "note", "kept"),
    ("without shapes", "nodes.1.shape", "-"), ("without y_bytes", "nodes.1.y_bytes", "-"),
    ("chunked compute record", "records.0", ["FORWARD", 1, {"algo": "BATCH_2", "chunks": 2}]),
]


def _python_verdict(doc) -> str | None:
    try:
        check("plan", doc, "plan test.json", "write it again")
    except SchemaError as err:
        return str(err)
    return None


@pytest.mark.parametrize(("name", "path", "value"), BAD, ids=[b[0] for b in BAD])
def test_python_refuses_a_bad_plan(good_plan, name, path, value):
    doc = _set(good_plan, path, value)
    RESULTS[f"plan file (Python reader): {name}"] = False
    why = _python_verdict(doc)
    assert why is not None and "plan test.json" in why, f"{name} accepted"
    RESULTS[f"plan file (Python reader): {name}"] = True


@pytest.mark.parametrize(("name", "path", "value"), GOOD, ids=[g[0] for g in GOOD])
def test_python_accepts_a_good_plan(good_plan, name, path, value):
    assert _python_verdict(_set(good_plan, path, value)) is None


def test_the_writer_carries_the_schema_and_passes_it(good_plan):
    # schema 1 while no node is sliced (what readers of schema 1 read the same), 2 otherwise
    assert good_plan["schema"] == 1 and VERSIONS["plan"] == 2 and good_plan["format"] == "pyd4j-plan"
    assert good_plan["version"] == 1  # the older fields stay readable
    check("plan", good_plan, "plan", "-")


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_every_contract_exports_json_schema_with_its_version(kind):
    schema = json_schemas()[kind]
    text = json.dumps(schema)
    assert "schema" in text and schema.get("title")
    doc = {"schema": VERSIONS[kind] + 1, "type": "start", "t": 1}
    with pytest.raises(SchemaError, match=rf"{kind} schema {VERSIONS[kind] + 1}.*reads {kind} schemas? (\d to )?{VERSIONS[kind]}"):
        check(kind, doc, "the file", "write it again")


def test_timeline_of_another_schema_is_refused_by_report(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "timeline.jsonl").write_text(json.dumps({"type": "start", "t": 1, "schema": 9}) + "\n"
                                        + json.dumps({"type": "sample", "t": 2, "rss": 5}) + "\n")
    p = subprocess.run([sys.executable, "-m", "pyd4j.cli", "report", "--json", str(run)], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert "timeline schema 9" in json.loads(p.stdout)["error"] and "reads timeline schema 1" in p.stdout


@pytest.mark.jvm
def test_java_reader_gives_the_python_verdict(jvm, good_plan):
    """Every document above, through PlanFile.parse: refused exactly where Python refuses."""
    import jpype

    plan_file = jpype.JClass("org.pyd4j.train.PlanFile")
    disagree = []
    for name, path, value in [*BAD, *GOOD]:
        doc = _set(good_plan, path, value)
        py = _python_verdict(doc)
        try:
            plan_file.parse(json.dumps(doc), "test.json")
            java = None
        except jpype.JException as err:
            java = str(err.getMessage())
            assert "plan test.json" in java, (name, java)
        if (py is None) != (java is None):
            disagree.append((name, py, java))
        if (name, path, value) in BAD:
            RESULTS[f"plan file (Java reader): {name}"] = java is not None
    assert not disagree, disagree


def test_a_tune_document_of_another_schema_is_refused_by_report(tmp_path):
    """report on one of tune's runs reads tune.json next to it: another version is refused, named."""
    (tmp_path / "before").mkdir()
    (tmp_path / "before" / "timeline.jsonl").write_text(json.dumps({"type": "sample", "t": 2, "rss": 5}) + "\n")
    (tmp_path / "tune.json").write_text(json.dumps({"schema": 7, "exit_code": 0, "before": {"run_dir": "x"}}))
    p = subprocess.run([sys.executable, "-m", "pyd4j.cli", "report", "--json", str(tmp_path / "before")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert "tune schema 7" in p.stdout and "reads tune schema 1" in p.stdout
