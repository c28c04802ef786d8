"""Every subcommand on a corpus of bad inputs, one class of bad input at a time (files that are
not UTF-8, not regular or nested too deep, sizes with hundreds of digits, NaN and infinity, values
past Java's int or the agent's range, output paths that cannot be made or hold files, a missing
java, an old or broken java, a classpath without jars, malformed networks, sidecars,
preprocessors, timelines and data): each ends with a non-zero exit, no traceback and, with
`--json`, exactly one JSON document `{"ok": false, "error": ...}` on stdout, within 10 s (a
deadline for hangs: none of these starts a JVM or a job).

The counts are written to the terminal summary: bad inputs run, and how many ended cleanly.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
LENET = ROOT / "examples" / "networks" / "lenet.json"
MLP = ROOT / "examples" / "networks" / "mlp.json"
HUGE = "9" * 300
DEADLINE_S = 10  # for a hang; more on a machine so loaded that starting the CLI alone takes over 0.5 s

RESULTS: dict[str, bool] = {}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, str]:
    """The bad files, directories and programs, by name."""
    d = tmp_path_factory.mktemp("corpus")
    f: dict[str, str] = {"lenet": str(LENET), "mlp": str(MLP)}

    def put(name: str, data: bytes | str) -> str:
        path = d / name
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
        f[name.split(".")[0]] = str(path)
        return str(path)

    put("latin1.json", '{"confs": [], "name": "caf\xe9"}'.encode("latin-1"))
    put("binary.json", bytes(range(256)) * 4)
    put("deep.json", "[" * 100_000 + "]" * 100_000)
    put("deepobj.json", '{"a":' * 5_000 + "1" + "}" * 5_000)
    put("bigint.json", '{"confs": [{"layer": {"nout": ' + "9" * 5000 + "}}]}")
    os.mkfifo(d / "fifo.json")
    f["fifo"] = str(d / "fifo.json")
    lenet = json.loads(LENET.read_text())
    for name, value in (("negative", -5), ("zero", 0), ("toobig", 2**40), ("text", "many")):
        doc = json.loads(LENET.read_text())
        doc["confs"][-1]["layer"]["nout"] = value
        put(f"{name}.json", json.dumps(doc))
    # malformed sidecars next to an otherwise good network
    for name, side in (("sidecar_neg", {"inputs": [{"type": "convolutionalFlat", "height": -28, "width": 28, "channels": 1}]}),
                       ("sidecar_str", {"inputs": "cnn:28x28x1"}),
                       ("sidecar_nan", '{"inputs": [{"type": "feedForward", "size": NaN}]}'),
                       ("sidecar_bad", b"\xff\xfe not json")):
        put(f"{name}.json", json.dumps(lenet))
        put(f"{name}.input.json", side if isinstance(side, (str, bytes)) else json.dumps(side))
    pre = json.loads(LENET.read_text())
    pre.setdefault("inputPreProcessors", {})["0"] = {
        "@class": "org.deeplearning4j.nn.conf.preprocessor.FeedForwardToCnnPreProcessor",
        "inputHeight": "28", "inputWidth": -1, "numChannels": None}
    put("badpre.json", json.dumps(pre))
    # timelines
    for name, lines in (("tl_nokey", ['{"type": "sample", "rss": 5}', '{"type": "sample", "t": "soon"}']),
                        ("tl_nan", ['{"type": "sample", "t": NaN, "rss": NaN, "heap_used": Infinity}']),
                        ("tl_nonobject", ["[1, 2, 3]", "42", '"text"', "null"]),
                        ("tl_garbage", ["\x00\x01\x02", "{{{", '{"type": "sample", "t": 1e999}'])):
        run = d / name
        run.mkdir()
        (run / "timeline.jsonl").write_bytes(("\n".join(lines) + "\n").encode("utf-8", "surrogatepass"))
        f[name] = str(run)
    (d / "tl_fifo").mkdir()
    os.mkfifo(d / "tl_fifo" / "timeline.jsonl")
    f["tl_fifo"] = str(d / "tl_fifo")
    # output paths
    (d / "full").mkdir()
    (d / "full" / "mine.txt").write_text("keep me")
    f["full"] = str(d / "full")
    f["afile"] = put("afile.txt", "keep me too")
    f["under_file"] = str(d / "afile.txt" / "run")
    f["longname"] = str(d / ("x" * 300))
    f["comma"] = str(d / "a,b")
    # java programs that are not a usable JDK
    for name, script in (("oldjava", 'echo "    java.version = 1.8.0_292" >&2; echo \'openjdk version "1.8.0_292"\' >&2'),
                         ("garbagejava", "head -c 600 /dev/urandom >&2; exit 3"),
                         ("silentjava", "exit 0")):
        home = d / name
        (home / "bin").mkdir(parents=True)
        java = home / "bin" / "java"
        java.write_text(f"#!/bin/sh\n{script}\n")
        java.chmod(java.stat().st_mode | stat.S_IEXEC)
        f[name] = str(home)
    (d / "nojars").mkdir()
    (d / "nojars" / "readme.txt").write_text("no jars here")
    f["nojars"] = str(d / "nojars")
    # data that does not fit the digits MLP (64 features, 10 classes)
    np.savez(d / "wrongx.npz", x=np.ones((20, 5), np.float32), y=np.eye(10, dtype=np.float32)[np.arange(20) % 10])
    np.savez(d / "wrongy.npz", x=np.ones((20, 64), np.float32), y=np.ones((20, 3), np.float32))
    np.savez(d / "wrongn.npz", x=np.ones((20, 64), np.float32), y=np.eye(10, dtype=np.float32)[:7])
    np.savez(d / "scalar.npz", x=np.float32(1), y=np.float32(2))
    f.update(wrongx=str(d / "wrongx.npz"), wrongy=str(d / "wrongy.npz"), wrongn=str(d / "wrongn.npz"),
             scalar=str(d / "scalar.npz"))
    put("notzip.npz", b"PK\x03\x04 this is not a zip")
    t0 = time.monotonic()  # what starting the CLI costs on this machine now, for the hang deadline
    subprocess.run([sys.executable, "-m", "pyd4j.cli", "--help"], capture_output=True, timeout=600, check=True)
    f["startup_s"] = time.monotonic() - t0
    return f


JOB = ("--", "java", "-cp", "job.jar", "com.acme.Train")
NET = ("--model", "{lenet}")

# (class of bad input, subcommand arguments, environment changes)
CASES: list[tuple[str, tuple[str, ...], dict[str, str]]] = []
for cmd, extra in (("estimate", ("--batch", "4")), ("flags", ("--batch", "4")), ("batch", ())):
    CASES += [
        ("not UTF-8", (cmd, "--model", "{latin1}", *extra), {}),
        ("binary file", (cmd, "--model", "{binary}", *extra), {}),
        ("nested JSON", (cmd, "--model", "{deep}", *extra), {}),
        ("nested JSON", (cmd, "--model", "{deepobj}", *extra), {}),
        ("huge integer in JSON", (cmd, "--model", "{bigint}", *extra), {}),
        ("FIFO", (cmd, "--model", "{fifo}", *extra), {}),
        ("directory", (cmd, "--model", "{full}", *extra), {}),
        ("negative layer size", (cmd, "--model", "{negative}", *extra), {}),
        ("zero layer size", (cmd, "--model", "{zero}", *extra), {}),
        ("layer size past Java int", (cmd, "--model", "{toobig}", *extra), {}),
        ("layer size not a number", (cmd, "--model", "{text}", *extra), {}),
        ("malformed sidecar", (cmd, "--model", "{sidecar_neg}", *extra), {}),
        ("malformed sidecar", (cmd, "--model", "{sidecar_str}", *extra), {}),
        ("malformed sidecar", (cmd, "--model", "{sidecar_nan}", *extra), {}),
        ("malformed sidecar", (cmd, "--model", "{sidecar_bad}", *extra), {}),
        ("malformed preprocessor", (cmd, "--model", "{badpre}", *extra), {}),
        ("bad --input", (cmd, *NET, "--input", "cnn:0x28x1", *extra), {}),
        ("bad --input", (cmd, *NET, "--input", f"ff:{HUGE}", *extra), {}),
        ("bad --prefetch", (cmd, *NET, "--prefetch", "-1", *extra), {}),
        ("JAVA_HOME at an old Java", (cmd, *NET, *extra), {"JAVA_HOME": "{oldjava}"}),
        ("java printing binary garbage", (cmd, *NET, *extra), {"JAVA_HOME": "{garbagejava}"}),
        ("java printing nothing", (cmd, *NET, *extra), {"JAVA_HOME": "{silentjava}"}),
        ("JAVA_HOME without java", (cmd, *NET, *extra), {"JAVA_HOME": "{nojars}"}),
        ("PYD4J_CLASSPATH without jars", (cmd, *NET, *extra), {"PYD4J_CLASSPATH": "{nojars}"}),
    ]
for cmd in ("estimate", "flags"):
    CASES += [
        ("batch past Java int", (cmd, *NET, "--batch", "2147483648"), {}),
        ("batch with hundreds of digits", (cmd, *NET, "--batch", HUGE), {}),
        ("batch not a number", (cmd, *NET, "--batch", "nan"), {}),
    ]
for cmd, extra in (("flags", ("--batch", "4")), ("batch", ())):
    CASES += [
        ("size with hundreds of digits", (cmd, *NET, *extra, "--total", HUGE), {}),
        ("size with hundreds of digits", (cmd, *NET, *extra, "--gpu-mem", HUGE + "g"), {}),
        ("size past a Java long", (cmd, *NET, *extra, "--total", "9000000t"), {}),
        ("NaN/inf", (cmd, *NET, *extra, "--headroom", "nan"), {}),
        ("NaN/inf", (cmd, *NET, *extra, "--headroom", "inf"), {}),
        ("NaN/inf", (cmd, *NET, *extra, "--headroom", "-inf"), {}),
    ]
CASES += [
    ("NaN/inf", ("flags", *NET, "--batch", "4", "--timeout", "nan", "--verify", *JOB), {}),
    ("missing java binary", ("flags", *NET, "--batch", "4", "--verify", "--", "/nonexistent/bin/java", "-cp", "x", "Main"), {}),
    ("size with hundreds of digits", ("plan", "--budget", HUGE), {}),
    ("size with hundreds of digits", ("plan", "--budget", HUGE + "k"), {}),
    ("batch past Java int", ("plan", "--batch", "2147483648"), {}),
    ("batch with hundreds of digits", ("plan", "--batch", HUGE), {}),
    ("bound", ("plan", "--depth", HUGE), {}),
    ("bound", ("plan", "--image", "0"), {}),
    ("not UTF-8", ("plan", "--network", "{latin1}"), {}),
    ("nested JSON", ("plan", "--network", "{deep}"), {}),
    ("FIFO", ("plan", "--network", "{fifo}"), {}),
    ("FIFO", ("plan", "--devices", "{fifo}"), {}),
    ("malformed device profiles", ("plan", "--devices", "{binary}"), {}),
    ("malformed device profiles", ("plan", "--devices", "{mlp}"), {}),
    ("negative layer size", ("plan", "--network", "{negative}"), {}),
    ("zero layer size", ("plan", "--network", "{zero}"), {}),
    ("malformed sidecar", ("plan", "--network", "{sidecar_neg}"), {}),
    ("malformed sidecar", ("plan", "--network", "{sidecar_bad}"), {}),
    ("malformed preprocessor", ("plan", "--network", "{badpre}"), {}),
    ("output path that exists", ("plan", "--plot", "{afile}"), {}),
    ("output path that cannot be made", ("plan", "--plot", "{under_file}"), {}),
]
for cmd in ("profile", "tune"):
    CASES += [
        ("interval out of the agent's range", (cmd, "--interval", "0", *JOB), {}),
        ("interval out of the agent's range", (cmd, "--interval", "-5", *JOB), {}),
        ("interval out of the agent's range", (cmd, "--interval", HUGE, *JOB), {}),
        ("NaN/inf", (cmd, "--timeout", "nan", *JOB), {}),
        ("NaN/inf", (cmd, "--timeout", "inf", *JOB), {}),
        ("bound", (cmd, "--timeout", "0", *JOB), {}),
        ("output path that cannot be made", (cmd, "--out", "{under_file}", *JOB), {}),
        ("output path that cannot be made", (cmd, "--out", "{longname}", *JOB), {}),
        ("output path the agent cannot carry", (cmd, "--out", "{comma}", *JOB), {}),
        ("output directory not empty", (cmd, "--out", "{full}", *JOB), {}),
        ("output path that is a file", (cmd, "--out", "{afile}", *JOB), {}),
        ("missing java binary", (cmd, "--", "/nonexistent/bin/java", "-cp", "x", "Main"), {}),
        ("java not on PATH", (cmd, *JOB), {"PATH": "/nonexistent"}),
        ("JAVA_HOME at an old Java", (cmd, *JOB), {"JAVA_HOME": "{oldjava}"}),
        ("java printing binary garbage", (cmd, *JOB), {"JAVA_HOME": "{garbagejava}"}),
    ]
CASES += [
    ("size with hundreds of digits", ("tune", "--total", HUGE, *JOB), {}),
    ("NaN/inf", ("tune", "--headroom", "nan", *JOB), {}),
    ("FIFO", ("profile", "--python", "{fifo}"), {}),
    ("directory", ("profile", "--python", "{full}"), {}),
    ("malformed timeline", ("report", "{tl_nokey}"), {}),
    ("malformed timeline", ("report", "{tl_nan}"), {}),
    ("malformed timeline", ("report", "{tl_nonobject}"), {}),
    ("malformed timeline", ("report", "{tl_garbage}"), {}),
    ("FIFO", ("report", "{tl_fifo}"), {}),
    ("output path that is a file", ("report", "--out", "{afile}", "{tl_nan}"), {}),
    ("output directory not empty", ("report", "--out", "{full}", "{tl_nan}"), {}),
    ("output path that cannot be made", ("report", "--out", "{under_file}", "{tl_nan}"), {}),
    ("data that does not fit the network", ("tune-prefetch", "--data", "{wrongx}"), {}),
    ("data that does not fit the network", ("tune-prefetch", "--data", "{wrongy}"), {}),
    ("data that does not fit the network", ("tune-prefetch", "--data", "{wrongn}"), {}),
    ("data that does not fit the network", ("tune-prefetch", "--data", "{scalar}"), {}),
    ("data that does not fit the network", ("tune-prefetch", "--data", "{notzip}"), {}),
    ("FIFO", ("tune-prefetch", "--data", "{fifo}"), {}),
    ("FIFO", ("tune-prefetch", "--model", "{fifo}"), {}),
    ("not UTF-8", ("tune-prefetch", "--model", "{latin1}"), {}),
    ("nested JSON", ("tune-prefetch", "--model", "{deep}"), {}),
    ("negative layer size", ("tune-prefetch", "--model", "{negative}"), {}),
    ("NaN/inf", ("tune-prefetch", "--tolerance", "nan"), {}),
    ("bound", ("tune-prefetch", "--depths", f"1,{HUGE}"), {}),
    ("batch past Java int", ("tune-prefetch", "--batch", "2147483648"), {}),
    ("bound", ("tune-prefetch", "--shape", "0,8,8", "--model", "digits-lenet"), {}),
    ("JAVA_HOME at an old Java", ("doctor",), {"JAVA_HOME": "{oldjava}"}),
    ("java printing binary garbage", ("doctor",), {"JAVA_HOME": "{garbagejava}"}),
    ("PYD4J_CLASSPATH without jars", ("doctor",), {"PYD4J_CLASSPATH": "{nojars}"}),
]


def _argv(args: tuple[str, ...], files: dict[str, str], as_json: bool) -> list[str]:
    argv = [a.format(**files) for a in args]
    if as_json:
        cut = argv.index("--") if "--" in argv else len(argv)
        argv = [*argv[:cut], "--json", *argv[cut:]]
    return argv


@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
@pytest.mark.parametrize(("kind", "args", "env"),
                         [pytest.param(*c, id=f"{c[1][0]}: {c[0]}: {' '.join(c[1][1:])[:50]}") for c in CASES])
def test_bad_input_is_a_clean_error(corpus, kind, args, env, as_json, tmp_path):
    deadline = max(DEADLINE_S, 20 * corpus["startup_s"])
    argv = _argv(args, corpus, as_json)
    environ = {**os.environ, **{k: v.format(**corpus) for k, v in env.items()}}
    key = f"{kind} | {' '.join(argv)} | {env}"
    RESULTS[key] = False
    try:
        p = subprocess.run([sys.executable, "-m", "pyd4j.cli", *argv], capture_output=True, text=True,
                           cwd=tmp_path, env=environ, timeout=deadline, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{argv} did not end within {deadline:.0f} s (a hang)")
    assert p.returncode != 0, (argv, p.stdout[-1000:], p.stderr[-2000:])
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    if as_json:
        doc = json.loads(p.stdout)  # exactly one document: json.loads refuses anything after it
        assert isinstance(doc, dict) and doc["ok"] is False, doc
        message = doc.get("error") or " ".join(c["detail"] for c in doc.get("checks", []) if not c["ok"])
    else:
        message = p.stderr if p.stderr.strip() else p.stdout  # doctor reports failed checks as its table
    assert len(message.strip()) > 20, (argv, message)
    RESULTS[key] = True


def test_profile_python_script_prints_stay_out_of_json(tmp_path):
    """`profile --python script --json`: what the script prints goes to stderr; stdout is one document."""
    script = tmp_path / "train.py"
    script.write_text("print('hello from the script')\nprint('{\"not\": \"the document\"}')\n")
    p = subprocess.run([sys.executable, "-m", "pyd4j.cli", "profile", "--json", "--no-report", "--out", "run",
                        "--python", str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(p.stdout)
    assert doc["run_dir"] == "run" and "hello from the script" in p.stderr


def test_profile_python_script_that_fails(tmp_path):
    """A failing --python script: exit 1, the error (not a traceback) on stderr, the profile kept."""
    script = tmp_path / "train.py"
    script.write_text("raise ZeroDivisionError('bad data')\n")
    p = subprocess.run([sys.executable, "-m", "pyd4j.cli", "profile", "--json", "--no-report", "--out", "run",
                        "--python", str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr[-3000:]
    doc = json.loads(p.stdout)
    assert doc["ok"] is False and "ZeroDivisionError: bad data" in doc["error"]
    assert "ZeroDivisionError" in (tmp_path / "run" / "script-traceback.txt").read_text()


def test_report_on_a_partial_timeline_keeps_what_is_sound(tmp_path):
    """Good samples among malformed lines: the report is written from the good ones (exit 0) and
    says what was skipped and why."""
    run = tmp_path / "run"
    run.mkdir()
    good = [json.dumps({"type": "sample", "t": 1000 + 100 * i, "rss": (50 + i) << 20, "heap_used": 10 << 20})
            for i in range(5)]
    bad = ['{"type": "sample", "rss": 1}', '{"type": "sample", "t": 1, "rss": NaN}', "[1, 2]", '{"type": "samp']
    (run / "timeline.jsonl").write_text("\n".join([*good[:2], *bad, *good[2:]]) + "\n")
    p = subprocess.run([sys.executable, "-m", "pyd4j.cli", "report", "--json", str(run)], capture_output=True,
                       text=True, timeout=600, cwd=tmp_path)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-3000:]
    doc = json.loads(p.stdout)
    assert doc["samples"] == 6  # five good, and the NaN one kept without its rss
    assert doc["peaks"]["rss"] == 54 << 20
    assert doc["skipped"] == {"sample without a time": 1, "values not finite numbers": 1, "not a JSON object": 1,
                              "torn or not JSON": 1}
    assert (run / "report.html").stat().st_size > 0
