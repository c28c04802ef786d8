"""Bad inputs to readers and options outside the server (issue: hardening 4), one test per class:
`plan --devices` with numbers the cost model cannot use, `report` on a tune's run whose tune.json is
a directory, not UTF-8, cut short, nested deep or of wrong types, timeline plan records and
run.json of wrong types (skipped, counted by name), and fit() batch arguments (real DL4J). Each is
a clean error naming the file or value and the fix (`--json`: one {"ok": false} document)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from pyd4j.cli import main
from tests.readers import RUN_META, TIMELINE_LINES, TUNE, _timeline_text

NETS = Path(__file__).resolve().parents[1] / "examples" / "networks"


def _run(*argv: str) -> tuple[int, dict]:
    r = CliRunner().invoke(main, [*argv, "--json"], catch_exceptions=True)
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    return r.exit_code, json.loads(r.stdout)


@pytest.mark.parametrize("devices, words", [
    ({"devices": {"k40c": {"tflops": 0}}}, ["devices.k40c.tflops", "greater than 0", "(got 0)"]),
    ({"devices": {"k40c": {"tflops": "fast"}}}, ["devices.k40c.tflops", "'fast'"]),
    ({"devices": {"k40c": {"memory_bytes": "12g"}}}, ["devices.k40c.memory_bytes", "'12g'"]),
    ({"devices": {"k40c": {"mem_gbps": -5}}}, ["devices.k40c.mem_gbps", "-5"]),
    ({"devices": {"mine": {"tflops": 5}}}, ["'mine' is new", "memory_bytes"]),
    ({"compute_efficiency": 0}, ["compute_efficiency", "greater than 0"]),
    ({"conv_algorithms": [{"name": "X", "speed": 0}]}, ["conv_algorithms.0.speed"]),
    ({"devices": {"k40c": {"tflop": 5}}}, ["tflop", "Extra inputs"]),
    ([1, 2], ["valid dictionary"]),
])
def test_plan_devices_with_unusable_numbers_is_a_clean_error_naming_the_field(tmp_path, devices, words):
    path = tmp_path / "devices.json"
    path.write_text(json.dumps(devices))
    code, doc = _run("plan", "--model", "alexnet", "--devices", str(path))
    assert code == 2 and doc["ok"] is False
    assert str(path) in doc["error"] and "--devices" in doc["error"]
    for w in words:
        assert w in doc["error"], (w, doc["error"])


def _tune_run(tmp_path: Path, tune: bytes | None, directory: bool = False) -> Path:
    run = tmp_path / "before"
    run.mkdir()
    (run / "timeline.jsonl").write_bytes(_timeline_text(TIMELINE_LINES))
    if directory:
        (tmp_path / "tune.json").mkdir()
    elif tune is not None:
        (tmp_path / "tune.json").write_bytes(tune)
    return run


def _wrong(path: tuple, value) -> bytes:
    doc = json.loads(json.dumps(TUNE))
    cur = doc
    for p in path[:-1]:
        cur = cur[p]
    cur[path[-1]] = value
    return json.dumps(doc).encode()


@pytest.mark.parametrize("tune, directory, words", [
    (None, True, ["tune.json", "a directory"]),
    (json.dumps(TUNE).encode()[:-20], False, ["tune.json", "not valid JSON"]),
    (b"\xff\xfe" + json.dumps(TUNE).encode(), False, ["tune.json", "not UTF-8"]),
    (b"[" * 100_000 + b"]" * 100_000, False, ["tune.json", "deeper than"]),
    (_wrong(("before", "limits"), [1, 2]), False, ["tune.json", "before.limits"]),
    (_wrong(("before", "findings"), "gc"), False, ["tune.json", "before.findings"]),
    (_wrong(("recommended",), [5]), False, ["tune.json", "recommended.0"]),
    (_wrong(("before", "run_dir"), 7), False, ["tune.json", "before.run_dir"]),
])
def test_report_on_a_tune_run_with_a_bad_tune_json_names_the_file_and_field(tmp_path, tune, directory, words):
    run = _tune_run(tmp_path, tune, directory)
    code, doc = _run("report", str(run))
    assert code == 2 and doc["ok"] is False
    for w in words:
        assert w in doc["error"], (w, doc["error"])
    assert "move the file away" in doc["error"] or "tune the job again" in doc["error"]


def test_report_with_a_good_tune_json_still_reads_it(tmp_path):
    run = _tune_run(tmp_path, json.dumps(dict(TUNE, before=dict(TUNE["before"], run_dir=str(tmp_path / "before")))).encode())
    code, doc = _run("report", str(run))
    assert code == 0 and doc.get("ok", True), doc
    assert "First run of a tune" in Path(doc["files"]["html"]).read_text()   # the tune document was read


def test_plan_records_and_run_json_of_wrong_types_are_skipped_and_counted_by_name(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    lines = [*TIMELINE_LINES,
             {"type": "plan", "t": 1, "result": ["not", "an", "object"]},
             {"type": "plan", "t": 1, "result": {"status": 5}},
             {"type": "network", "t": 1, "network": {"conf": "text"}},
             {"type": "plan_stats", "t": 1, "stats": 3}]
    (run / "timeline.jsonl").write_bytes(_timeline_text(lines))
    (run / "run.json").write_text(json.dumps(dict(RUN_META, command="java -jar x.jar", returncode="0")))
    code, doc = _run("report", str(run))
    assert code == 0, doc
    assert doc["skipped"]["plan record of wrong types"] == 2
    assert doc["skipped"]["network record of wrong types"] == 1
    assert doc["skipped"]["plan_stats record of wrong types"] == 1
    assert doc["skipped"]["unreadable run.json"] == 1


def test_a_plan_file_nested_too_deep_or_not_utf8_is_a_schema_error(tmp_path):
    from pyd4j.dl4j.plan_file import read_plan
    from pyd4j.schemas import SchemaError

    for name, data, word in (("deep", b"[" * 100_000 + b"]" * 100_000, "deeper than"),
                             ("latin", b'{"format": "pyd4j-plan", "x": "\xe9"}', "not UTF-8")):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(SchemaError, match=word):
            read_plan(tmp_path / name)


@pytest.mark.jvm
@pytest.mark.parametrize("kwargs, words", [
    (dict(batch_size="8"), ["batch_size='8'", "whole number", "not the text '8'"]),
    (dict(batch_size=-1), ["batch_size=-1"]),
    (dict(batch_size=2.0), ["batch_size=2.0"]),
    (dict(batch_size=16), ["batch_size=16", "batches of 4", "leave batch_size out"]),
    (dict(memory="superneurons", input_shape=(28, 28)), ["input_shape=(28, 28)", "(784,)", "leave input_shape out"]),
])
def test_fit_batch_arguments_are_refused_before_training(jvm, kwargs, words):
    import jpype

    from pyd4j.data import NumpyBatches
    from pyd4j.train import fit

    text = (NETS / "mlp.json").read_text()
    net = jpype.JClass("org.deeplearning4j.nn.multilayer.MultiLayerNetwork")(
        jpype.JClass("org.deeplearning4j.nn.conf.MultiLayerConfiguration").fromJson(text))
    net.init()
    before = np.array(net.params().toDoubleVector())
    rng = np.random.default_rng(1)
    data = NumpyBatches(rng.random((8, 784), dtype=np.float32), np.eye(10, dtype=np.float32)[np.arange(8) % 10],
                        batch_size=4)
    with pytest.raises(ValueError) as err:
        fit(net, data, progress=False, **kwargs)
    for w in words:
        assert w in str(err.value), (w, str(err.value))
    assert np.array_equal(np.array(net.params().toDoubleVector()), before)


@pytest.mark.jvm
def test_fit_with_a_numpy_batches_and_its_own_input_shape_plans_at_its_batch(jvm):
    """input_shape that agrees with the NumpyBatches: planned at the NumpyBatches' batch size (it once
    asked for batch_size=N although a NumpyBatches was given)."""
    import jpype

    from pyd4j.data import NumpyBatches
    from pyd4j.train import fit

    net = jpype.JClass("org.deeplearning4j.nn.multilayer.MultiLayerNetwork")(
        jpype.JClass("org.deeplearning4j.nn.conf.MultiLayerConfiguration").fromJson((NETS / "mlp.json").read_text()))
    net.init()
    rng = np.random.default_rng(2)
    data = NumpyBatches(rng.random((8, 784), dtype=np.float32), np.eye(10, dtype=np.float32)[np.arange(8) % 10],
                        batch_size=4)
    result = fit(net, data, progress=False, memory="superneurons", input_shape=(784,))
    assert result.plan["batch"] == 4 and result.samples == 8


@pytest.mark.jvm
def test_nd4j_build_refuses_a_network_no_machine_holds_before_any_build_runs(tmp_path):
    """The pre-init size check (pyd4j.dl4j.sizecheck) before `nd4j-build` starts a JVM per build."""
    import subprocess
    import sys

    doc = json.loads((NETS / "mlp.json").read_text())
    doc["confs"][0]["layer"]["nout"] = doc["confs"][1]["layer"]["nin"] = 2**31 - 1
    (tmp_path / "huge.json").write_text(json.dumps(doc))
    (tmp_path / "huge.input.json").write_text((NETS / "mlp.input.json").read_text())
    p = subprocess.run([sys.executable, "-m", "pyd4j.cli", "nd4j-build", "--model", str(tmp_path / "huge.json"),
                        "--batch", "4", "--json"], capture_output=True, text=True, timeout=300)
    doc = json.loads(p.stdout)
    assert p.returncode == 2 and doc["ok"] is False and "Traceback" not in p.stderr
    assert "parameters alone take 8942121917412 bytes" in doc["error"] and "refused before DL4J allocates" in doc["error"]
    assert "nd4j-native" not in p.stderr   # no build was measured
