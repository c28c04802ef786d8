"""Every document reader pyd4j has, as a function of the bytes of the file it reads, with the
exceptions that are its clean refusals; and one hypothesis strategy of bad documents (shared by
tests/test_reader_properties.py, a few hundred examples each, and benchmarks/reader_fuzz.py,
10,000 each).

The bad documents: bytes at random, JSON values at random, and each reader's own good documents
changed: a value anywhere replaced by any JSON value, cut short, non-UTF-8 bytes put in, wrapped in
thousands of brackets. A reader passes when it returns or raises one of its clean refusals.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
NETWORKS = ROOT / "examples" / "networks"


def _plan_seed() -> dict:
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "lenet.plan.json"
        subprocess.run([sys.executable, "-m", "pyd4j.cli", "plan", "--model", str(NETWORKS / "lenet.json"), "--batch",
                        "4", "--policy", "recompute", "--emit-plan", str(out), "--json"], check=True,
                       capture_output=True, timeout=300, cwd=ROOT)
        return json.loads(out.read_text())


TIMELINE_LINES = [
    {"type": "start", "t": 1000, "schema": 1, "pid": 42, "heap_max": 1 << 30},
    {"type": "sample", "t": 1100, "rss": 5 << 20, "heap_used": 1 << 20, "iterations": 3,
     "gc": {"G1 Young": [2, 10]}, "ws": [{"id": "WS", "thread": "main", "size": 4096}]},
    {"type": "gc", "t": 1150, "name": "G1 Young", "ms": 3},
    {"type": "iter", "t": 1200, "n": 4},
    {"type": "plan", "t": 1210, "file": "x.plan.json", "result": {"status": "refused", "reason": "no"}, "then": "exit"},
    {"type": "network", "t": 1220, "network": {"kind": "MultiLayerNetwork", "conf": {"confs": []}, "shapes": [[4, 784]]}},
    {"type": "plan_stats", "t": 1230, "stats": {"steps": 3}},
    {"type": "end", "t": 1300},
]
TUNE = {"schema": 1, "exit_code": 0, "recommended": ["-Xmx1g"], "out_dir": "/t", "verified": True, "notes": ["n"],
        "before": {"run_dir": "/t/before", "exit_code": 0, "iterations": 10, "iterations_per_s": 2.5,
                   "limits": {"heap_max": 1 << 30}, "peaks": {"rss": 5 << 20}, "findings": ["gc-pressure"],
                   "jvm_memory_flags": []},
        "after": {"run_dir": "/t/after", "exit_code": 0, "iterations": 10, "limits": {}, "peaks": {}, "findings": []}}
RUN_META = {"command": ["java", "-cp", "x", "Main"], "returncode": 0, "interrupted": False, "launcher": None}
DEVICES = {"devices": {"k40c": {"tflops": 4.0, "memory_bytes": 12 << 30},
                       "mine": {"name": "mine", "memory_bytes": 8 << 30, "tflops": 1.5, "mem_gbps": 100, "link_gbps": 8}},
           "aliases": {"m": "mine"}, "compute_efficiency": 0.5,
           "conv_algorithms": [{"name": "GEMM", "speed": 1.0, "workspace_im2col": 1.0, "workspace_fixed": 0}]}


def _timeline_text(lines: Any) -> bytes:
    """JSON lines: one line per element of a list, or one line of anything else."""
    return ("\n".join(json.dumps(x) for x in (lines if isinstance(lines, list) else [lines])) + "\n").encode()


class Reader:
    """`read(work_dir, data)` feeds `data` to one reader as the file it reads; `clean`: its refusals."""

    def __init__(self, read: Callable[[Path, bytes], Any], clean: tuple[type[BaseException], ...],
                 seeds: Callable[[], list[Any]], as_bytes: Callable[[Any], bytes] = lambda v: json.dumps(v).encode()):
        self.read, self.clean, self.seeds, self.as_bytes = read, clean, seeds, as_bytes


def _write(work: Path, name: str, data: bytes) -> Path:
    path = work / name
    path.write_bytes(data)
    return path


def read_plan(work: Path, data: bytes) -> Any:
    from pyd4j.dl4j.plan_file import read_plan as read
    return read(_write(work, "x.plan.json", data))


def read_timeline(work: Path, data: bytes) -> Any:
    from pyd4j.profile.report import summary
    from pyd4j.profile.timeline import Timeline

    run = work / "run"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir()
    _write(run, "timeline.jsonl", data)
    return summary(Timeline.load_lanes(run))   # everything the report derives from the lines


def read_run_meta(work: Path, data: bytes) -> Any:
    from pyd4j.profile.report import summary
    from pyd4j.profile.timeline import Timeline

    run = work / "run"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir()
    _write(run, "timeline.jsonl", _timeline_text(TIMELINE_LINES))
    _write(run, "run.json", data)
    return summary(Timeline.load_lanes(run))


def read_tune(work: Path, data: bytes) -> Any:
    from pyd4j.commands.report import _check_tune_document
    from pyd4j.profile.report_page import tune_section
    from pyd4j.profile.tune_doc import find_tune_doc

    run = work / "before"
    run.mkdir(exist_ok=True)
    _write(work, "tune.json", data)
    _check_tune_document(run)
    found = find_tune_doc(run)   # the report's own reader, on a document that passed the check
    if found is not None:
        tune_section(found[0], found[1], work)
    return found


def read_devices(work: Path, data: bytes) -> Any:
    from pyd4j.commands._devices import device_profiles
    from pyd4j.sched.costmodel import CostModel

    doc = device_profiles(str(_write(work, "devices.json", data)))
    for key in ("k40c", *doc.get("devices", {})):
        CostModel.for_device(key, doc)   # what plan does with it next


def read_sidecar(work: Path, data: bytes) -> Any:
    from pyd4j.dl4j.input_types import read_sidecar as read
    return read(_write(work, "x.input.json", data))


def read_config(work: Path, data: bytes) -> Any:
    from pyd4j.dl4j.config import read_config_file
    return read_config_file(_write(work, "net.json", data))


def read_infer_request(work: Path, data: bytes) -> Any:
    from pyd4j.serve.protocol import TensorSpec, infer_response, parse_infer_request

    inputs, outputs = [TensorSpec("input", "FP32", (-1, 4))], [TensorSpec("output", "FP32", (-1, 3))]
    req = parse_infer_request(data, None, inputs, outputs, 32)
    import numpy as np
    return infer_response("m", req, outputs, [np.zeros((req.rows, 3), np.float32)])


def _clean() -> dict[str, tuple[type[BaseException], ...]]:
    import click

    from pyd4j.inputs import InputError
    from pyd4j.schemas import SchemaError
    from pyd4j.serve.protocol import ProtocolError

    return {"plan": (SchemaError,), "timeline": (InputError, SchemaError), "run_json": (), "tune": (InputError, SchemaError),
            "devices": (click.BadParameter, InputError), "sidecar": (InputError,), "config": (InputError,),
            "infer_request": (ProtocolError,)}


def readers() -> dict[str, Reader]:
    clean = _clean()
    return {
        "plan": Reader(read_plan, clean["plan"], lambda: [_plan_seed()]),
        "timeline": Reader(read_timeline, clean["timeline"], lambda: [TIMELINE_LINES], _timeline_text),
        "run_json": Reader(read_run_meta, clean["run_json"], lambda: [RUN_META]),
        "tune": Reader(read_tune, clean["tune"], lambda: [TUNE]),
        "devices": Reader(read_devices, clean["devices"], lambda: [DEVICES]),
        "sidecar": Reader(read_sidecar, clean["sidecar"],
                          lambda: [json.loads(p.read_text()) for p in sorted(NETWORKS.glob("*.input.json"))[:3]]),
        "config": Reader(read_config, clean["config"],
                         lambda: [json.loads((NETWORKS / f"{n}.json").read_text()) for n in ("mlp", "resnet_graph")]),
        "infer_request": Reader(read_infer_request, clean["infer_request"],
                                lambda: [{"inputs": [{"name": "input", "shape": [2, 4], "datatype": "FP32",
                                                      "data": list(range(8))}], "outputs": [{"name": "output"}]}]),
    }


# ----------------------------------------------------------------------------- bad documents

scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=10))
values = st.recursive(scalars, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                      st.dictionaries(st.text(max_size=8), kids, max_size=4)),
                      max_leaves=12)


def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:6]):
            out += _paths(v, (*prefix, i))
    return out


def _replace(doc: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    doc = json.loads(json.dumps(doc))
    cur = doc
    for p in path[:-1]:
        cur = cur[p]
    cur[path[-1]] = value
    return doc


@st.composite
def bad_documents(draw, reader: Reader, seeds: list[Any]) -> bytes:
    """Bytes at random, a JSON value at random, or one of the reader's good documents changed."""
    how = draw(st.sampled_from(["bytes", "value", "replace", "replace", "replace", "cut", "not-utf8", "deep", "nan"]))
    if how == "bytes":
        return draw(st.binary(max_size=300))
    if how == "value":
        return reader.as_bytes(draw(values))
    seed = draw(st.sampled_from(seeds))
    if how == "replace":
        path = draw(st.sampled_from(_paths(seed)))
        return reader.as_bytes(_replace(seed, path, draw(values)))
    good = reader.as_bytes(seed)
    if how == "cut":
        return good[:draw(st.integers(min_value=0, max_value=max(0, len(good) - 1)))]
    if how == "not-utf8":
        at = draw(st.integers(min_value=0, max_value=len(good)))
        return good[:at] + draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80\x80"])) + good[at:]
    if how == "nan":
        return good.replace(b"0", b"NaN", 1).replace(b"1", b"Infinity", 1)
    depth = draw(st.integers(min_value=65, max_value=200_000))
    return b"[" * depth + good + b"]" * depth
