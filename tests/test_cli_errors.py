"""Bad input to every `pyd4j` subcommand: a clear message (the value, the limit, the fix), no
traceback, a non-zero exit, and with `--json` one JSON document `{"ok": false, "error": ...}` on
stdout. Errors in arguments are found before any JVM starts.

Each case runs the command in a child Python that reports, on exit, whether it started a JVM.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LENET = str(ROOT / "examples" / "networks" / "lenet.json")

_RUN = """
import atexit, sys
def _report():
    jpype = sys.modules.get("jpype")
    sys.stderr.write("\\nJVM-STARTED=%s\\n" % bool(jpype and jpype.isJVMStarted()))
atexit.register(_report)
from pyd4j.cli import main
main(sys.argv[1:], prog_name="pyd4j")
"""


def pyd4j(*args: str, cwd: Path | None = None) -> tuple[int, str, str, bool]:
    """(exit status, stdout, stderr without the JVM marker, whether a JVM started)."""
    p = subprocess.run([sys.executable, "-c", _RUN, *args], capture_output=True, text=True,
                       cwd=cwd or ROOT, timeout=300)
    err, _, marker = p.stderr.rpartition("\nJVM-STARTED=")
    return p.returncode, p.stdout, err, marker.strip() == "True"


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("bad")
    (d / "bad.json").write_text("not json{")
    (d / "other.json").write_text('{"a": 1}')
    (d / "emptyrun").mkdir()
    return {"bad": str(d / "bad.json"), "other": str(d / "other.json"), "emptyrun": str(d / "emptyrun"),
            "missing": str(d / "missing.json")}


def _fill(args: tuple[str, ...], files: dict[str, str]) -> list[str]:
    return [a.format(**files, lenet=LENET) for a in args]


def check(args: list[str], code: int, words: tuple[str, ...], as_json: bool, jvm_allowed: bool = False) -> None:
    rc, out, err, jvm = pyd4j(*args)
    assert rc == code, (args, rc, out, err)
    assert "Traceback" not in err, err
    if not jvm_allowed:
        assert not jvm, f"{args} started a JVM to refuse a bad argument"
    if as_json:
        doc = json.loads(out)  # exactly one document: json.loads refuses anything after it
        assert doc["ok"] is False
        message = doc["error"]
    else:
        assert out.strip() == "", out
        message = err
    for word in words:
        assert word in message, (word, message)


# (arguments, exit status, words the message must hold: the bad value, the limit or accepted forms, the fix)
CASES = {
    "estimate": [
        (("estimate", "--model", "{missing}", "--batch", "4"), 2, ("missing.json", "No such file", "conf.toJson()")),
        (("estimate", "--model", "{bad}", "--batch", "4"), 2, ("bad.json", "not valid JSON", "toJson()")),
        (("estimate", "--model", "{other}", "--batch", "4"), 2, ("other.json", "not a DL4J network", "toJson()")),
        (("estimate", "--model", "{lenet}", "--batch", "0"), 2, ("'0'", ">=1", "--batch 32")),
        (("estimate", "--model", "{lenet}", "--batch", "-3"), 2, ("'-3'", ">=1", "--batch 32")),
        (("estimate", "--model", "{lenet}", "--batch", "4", "--dtype", "int4"), 2, ("int4", "float32", "float16")),
        (("estimate", "--model", "{lenet}", "--batch", "4", "--mode", "foo"), 2, ("foo", "train", "infer")),
    ],
    "flags": [
        (("flags", "--model", "{lenet}", "--batch", "4", "--format", "xml"), 2, ("xml", "args", "k8s")),
        (("flags", "--model", "{lenet}", "--batch", "4", "--total", "12 parsecs"), 2, ("12 parsecs", "'4g'")),
        (("flags", "--model", "{lenet}", "--batch", "4", "--headroom", "-1"), 2, ("-1", ">=0 and <=4")),
        (("flags", "--model", "{lenet}", "--batch", "4", "--verify"), 2, ("--verify needs", "-- java")),
    ],
    "batch": [
        (("batch", "--model", "{lenet}", "--total", "12 parsecs"), 2, ("12 parsecs", "'4g'")),
        (("batch", "--model", "{lenet}", "--total", "0"), 2, ("'0'", "more than 0 bytes", "'8g'")),
        (("batch", "--model", "{lenet}", "--gpu-mem", "5x"), 2, ("5x", "'512m'")),
    ],
    "plan": [
        (("plan", "--model", "resnet-7"), 2, ("--model", "7", "N % 3 == 2")),
        (("plan", "--device", "nosuch"), 2, ("nosuch", "k40c", "h100")),
        (("plan", "--budget", "0"), 2, ("--budget", "'0'", "more than 0 bytes", "8g")),
        (("plan", "--budget", "12 parsecs"), 2, ("12 parsecs", "'4g'")),
        (("plan", "--batch", "0"), 2, ("--batch", "0", ">=1")),
        (("plan", "--batch", "-3"), 2, ("--batch", "-3", ">=1")),
        (("plan", "--image", "0"), 2, ("--image", "0", ">=1")),
        (("plan", "--model", "resnet", "--depth", "0"), 2, ("--depth", "0", ">=1")),
        (("plan", "--network", "{bad}"), 2, ("--network", "bad.json", "conf.toJson()")),
        (("plan", "--network", "{other}"), 2, ("--network", "other.json", "no 'confs'", "conf.toJson()")),
        (("plan", "--network", "{missing}"), 2, ("--network", "missing.json", "No such file")),
    ],
    "report": [
        (("report", "/nonexistent-run-dir"), 2, ("/nonexistent-run-dir", "does not exist")),
        (("report", "{bad}"), 2, ("bad.json", "is a file")),
        (("report", "{emptyrun}"), 1, ("timeline.jsonl", "`pyd4j profile` printed")),
    ],
    "profile": [
        (("profile", "--", "nosuchbinary"), 2, ("nosuchbinary", "not on PATH", "after `--`", "mvn")),
        (("profile",), 2, ("no job command", "after `--`")),
        (("profile", "--", "java", "-Xmx1g"), 2, ("no main class", "-jar")),
    ],
    "tune": [
        (("tune", "--", "nosuchbinary"), 2, ("nosuchbinary", "not on PATH", "after `--`", "mvn")),
        (("tune",), 2, ("no job command", "after `--`")),
        (("tune", "--total", "12 parsecs", "--", "java", "-cp", "x", "Main"), 2, ("12 parsecs", "'4g'")),
        (("tune", "--total", "0", "--", "java", "-cp", "x", "Main"), 2, ("--total", "'0'", "more than 0 bytes")),
        (("tune", "--headroom", "-1", "--", "java", "-cp", "x", "Main"), 2, ("--headroom", "-1", ">=0 and <=4")),
    ],
    "tune-prefetch": [
        (("tune-prefetch", "--model", "nosuch"), 2, ("nosuch", "digits-mlp")),
        (("tune-prefetch", "--model", "{other}"), 2, ("other.json", "not a DL4J network", "toJson()")),
        (("tune-prefetch", "--depths", "a,b"), 2, ("a,b", "comma-separated ints", "1,2,4,8")),
        (("tune-prefetch", "--depths", "0,2"), 2, ("0,2", ">= 1", "1,2,4,8")),
        (("tune-prefetch", "--batch", "0"), 2, ("--batch", "0", ">=1")),
        (("tune-prefetch", "--data", "{missing}"), 2, ("missing.json", "No such file")),
        (("tune-prefetch", "--data", "{bad}"), 2, ("bad.json", ".npz with arrays x and y")),
        (("tune-prefetch", "--shape", "3,3"), 2, ("'3,3'", "(64,)", "1,8,8")),
    ],
    "doctor": [
        (("doctor", "--bogus"), 2, ("--bogus",)),
    ],
}


@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
@pytest.mark.parametrize(("args", "code", "words"),
                         [pytest.param(*case, id=" ".join(case[0])[:60]) for cases in CASES.values() for case in cases])
def test_bad_argument(files, args, code, words, as_json):
    argv = _fill(args, files)
    if as_json:
        cut = argv.index("--") if "--" in argv else len(argv)
        argv = [*argv[:cut], "--json", *argv[cut:]]
    check(argv, code, words, as_json)


def test_json_after_the_separator_belongs_to_the_job():
    """`--json` after `--` is the job's argument, not pyd4j's: the error stays human text."""
    rc, out, err, _ = pyd4j("profile", "--", "nosuchbinary", "--json")
    assert rc == 2 and out == "" and "not on PATH" in err


@pytest.mark.jvm
@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_budget_too_small(as_json):
    """Budgets are checked against the estimate (which starts a JVM): exit 3, the need and the fix."""
    check(["batch", "--model", LENET, "--total", "1k", *(["--json"] if as_json else [])], 3,
          ("--total 1 KiB", "batch 1 needs", "raise the budget"), as_json, jvm_allowed=True)
    check(["flags", "--model", LENET, "--batch", "4", "--total", "1k", *(["--json"] if as_json else [])], 3,
          ("1 KiB", "needs", "raise the budget"), as_json, jvm_allowed=True)


@pytest.mark.jvm
@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_job_that_cannot_start(tmp_path, as_json):
    """A java command that dies before its first iteration: profile exits with the job's status and
    shows why; tune refuses to recommend flags from it and says what to fix."""
    json_flag = ["--json"] if as_json else []
    rc, out, err, _ = pyd4j("profile", *json_flag, "--no-report", "--out", str(tmp_path / "p"), "--",
                            "java", "-cp", str(tmp_path), "NoSuchMain")
    assert rc == 1, (out, err)
    assert "Traceback" not in err
    if as_json:
        doc = json.loads(out)
        assert doc["exit_code"] == 1
        assert any("NoSuchMain" in e for f in doc["findings"] for e in f["evidence"]), doc["findings"]
    check(["tune", *json_flag, "--out", str(tmp_path / "t"), "--",
           "java", "-cp", str(tmp_path), "NoSuchMain"], 1,
          ("exited with code 1 before its first iteration", "NoSuchMain", "stderr.log", "fix the java command"),
          as_json, jvm_allowed=True)
    assert not (tmp_path / "t" / "after").exists()  # no second run of a job that cannot start
