"""Bad inputs to what pyd4j added last (issue: hardening 3), each a clean error: a non-zero exit,
no traceback, a message that names the bad value (and with `--json` one `{"ok": false, ...}`
document on stdout). The kinds: conflicting `plan` options, impossible networks and budgets,
searches past their limit, a missing CuPy, timelines of absurd values, a truncated jar on
PYD4J_CLASSPATH, `python -m pyd4j.spark.cluster` with bad arguments or SPARK_HOME, and the Python
API `fit(memory=...)` with bad tiers, prefetch depths and budgets (real DL4J, no training happens).
The Java one-liner with bad plan files is tests/train/test_bad_plan_files.py; the plan schema's
bad documents are tests/test_schemas.py. All count in the corpus summary (RESULTS).

CLI cases run in this process (click's runner): no JVM and no job starts for any of them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

from pyd4j.cli import main
from tests.test_cli_corpus import RESULTS

ROOT = Path(__file__).resolve().parents[1]
NETS = ROOT / "examples" / "networks"
HUGE_BUDGET = "1000TiB"


def _net(d: Path, name: str, base: str, change) -> str:
    """A copy of examples/networks/<base>.json (and its sidecar) changed by `change(doc)`."""
    doc = json.loads((NETS / f"{base}.json").read_text())
    change(doc)
    (d / f"{name}.json").write_text(json.dumps(doc))
    shutil.copy(NETS / f"{base}.input.json", d / f"{name}.input.json")
    return str(d / f"{name}.json")


def _set_layer(doc: dict, i: int, key: str, value) -> None:
    doc["confs"][i]["layer"][key] = value


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("hardening")
    f = {"lenet": str(NETS / "lenet.json"), "mlp": str(NETS / "mlp.json"), "graph": str(NETS / "resnet_graph.json"),
         "out": str(d / "new.plan.json"), "png": str(d / "new.png")}
    f["nin0_dense"] = _net(d, "nin0_dense", "mlp", lambda doc: _set_layer(doc, 0, "nin", 0))
    f["nin5_dense"] = _net(d, "nin5_dense", "mlp", lambda doc: _set_layer(doc, 1, "nin", 5))
    f["nin_neg"] = _net(d, "nin_neg", "mlp", lambda doc: _set_layer(doc, 2, "nin", -256))
    f["nin0_conv"] = _net(d, "nin0_conv", "lenet", lambda doc: _set_layer(doc, 0, "nin", 0))
    f["nin3_conv"] = _net(d, "nin3_conv", "lenet", lambda doc: _set_layer(doc, 2, "nin", 3))
    f["nin_dense_lenet"] = _net(d, "nin_dense_lenet", "lenet", lambda doc: _set_layer(doc, 4, "nin", 799))
    f["out_none"] = _net(d, "out_none", "resnet_graph", lambda doc: doc.update(networkOutputs=["nowhere"]))
    f["out_empty"] = _net(d, "out_empty", "resnet_graph", lambda doc: doc.update(networkOutputs=[]))
    f["out_text"] = _net(d, "out_text", "resnet_graph", lambda doc: doc.update(networkOutputs="output"))
    f["out_extra"] = _net(d, "out_extra", "resnet_graph", lambda doc: doc.update(networkOutputs=["output", "ghost"]))
    f["out_missing"] = _net(d, "out_missing", "resnet_graph", lambda doc: doc.pop("networkOutputs"))
    for name, lines in (
            ("tl_huge_t", ['{"type": "sample", "t": 1e300, "rss": 5}', '{"type": "sample", "t": -1e300, "rss": 6}']),
            ("tl_bigint_t", ['{"type": "sample", "t": 99999999999999999999999, "rss": 5}']),
            ("tl_inf_bytes", ['{"type": "sample", "t": 1e300, "rss": 1.7e308, "heap_used": 1.7e308}']),
            ("tl_schema", ['{"type": "start", "t": 1, "schema": 2}', '{"type": "sample", "t": 2, "rss": 5}']),
            ("tl_schema_text", ['{"type": "start", "t": 1, "schema": "one"}', '{"type": "sample", "t": 2, "rss": 5}']),
            ("tl_only_iters", ['{"type": "iter", "t": 1, "n": 1e300}', '{"type": "epoch", "t": 2, "n": 3}'])):
        run = d / name
        run.mkdir()
        (run / "timeline.jsonl").write_text("\n".join(lines) + "\n")
        f[name] = str(run)
    good_jar = next((ROOT / "java" / "target" / "lib").glob("nd4j-api-*.jar"))
    data = good_jar.read_bytes()
    (d / "cut").mkdir()
    (d / "cut" / good_jar.name).write_bytes(data[: len(data) // 2])
    (d / "cut" / "empty.jar").write_bytes(b"")
    f["cut_jar"] = str(d / "cut" / good_jar.name)
    f["empty_jar"] = str(d / "cut" / "empty.jar")
    f["cut_dir"] = str(d / "cut" / "*")
    return f


P = ("plan",)
CLI: list[tuple[str, tuple[str, ...], dict[str, str], str]] = []   # (kind, args, env, a word the message holds)
for other in (("--optimum",), ("--execute",), ("--depth", "50"), ("--max-batch",), ("--emit-plan", "{out}"),
              ("--plot", "{png}"), ("--cache",)):
    CLI.append(("conflicting options", (*P, "--model", "resnet", "--max-depth", *other), {}, other[0]))
for other in (("--optimum",), ("--execute",), ("--emit-plan", "{out}"), ("--plot", "{png}"), ("--cache",)):
    CLI.append(("conflicting options", (*P, "--model", "alexnet", "--max-batch", *other), {}, other[0]))
for model in ("vgg16", "alexnet", "resnet50", "resnet152", "inception_v4", "{lenet}", "{graph}"):
    CLI.append(("--depth for a network that fixes its own", (*P, "--model", model, "--depth", "50"), {}, "--depth"))
for model in ("{lenet}", "{mlp}", "{graph}"):
    CLI.append(("--image with a JSON model", (*P, "--model", model, "--image", "64"), {}, "--image"))
CLI.append(("--image with a JSON model", (*P, "--network", "{lenet}", "--image", "64"), {}, "--image"))
for extra in ((), ("--batch", "4"), ("--budget", "1g"), ("--policy", "liveness"), ("--max-batch",)):
    CLI.append(("--model resnet without a depth", (*P, "--model", "resnet", *extra), {}, "--depth"))
for model in ("resnet50", "alexnet", "vgg16", "{lenet}", "{mlp}", "{graph}"):
    CLI.append(("a 1-byte budget", (*P, "--model", model, "--budget", "1"), {}, "1 bytes"))
for model in ("alexnet", "resnet50", "{mlp}"):
    CLI.append(("a 1-byte budget: largest batch 0", (*P, "--model", model, "--budget", "1", "--max-batch"), {}, "1 bytes"))
for layout in ("standard", "paper"):
    CLI.append(("a 1-byte budget: depth 0", (*P, "--model", "resnet", "--max-depth", "--budget", "1", "--layout", layout),
                {}, "1 bytes"))
for model in ("resnet50", "alexnet", "vgg16", "{lenet}", "{mlp}"):
    CLI.append(("batch 2^31-1 planning terabytes", (*P, "--model", model, "--batch", "2147483647"), {}, "2147483647"))
CLI += [
    ("a search past its limit", (*P, "--model", "resnet", "--max-depth", "--budget", HUGE_BUDGET, "--batch", "1"), {},
     "deepest this search builds"),
    ("a search past its limit", (*P, "--model", "{mlp}", "--max-batch", "--budget", HUGE_BUDGET), {}, "65536"),
    ("a search past its limit", (*P, "--model", "alexnet", "--max-batch", "--budget", HUGE_BUDGET), {}, "65536"),
    ("a network past what is planned", (*P, "--model", "resnet200000"), {}, "resnet200000"),
    ("a network past what is planned", (*P, "--model", "resnet" + "9" * 40), {}, "past the 100000"),
    ("--backend cupy without CuPy", (*P, "--model", "resnet50", "--batch", "1", "--image", "32", "--execute",
                                     "--backend", "cupy"), {}, "CuPy"),
    ("--backend cupy without CuPy", (*P, "--model", "alexnet", "--execute", "--backend", "cupy", "--policy",
                                     "liveness"), {}, "cupy"),
]
for name in ("nin0_dense", "nin5_dense", "nin_neg", "nin0_conv", "nin3_conv", "nin_dense_lenet"):
    CLI.append(("a layer's nIn that is not what it is fed", (*P, "--model", "{%s}" % name), {}, "nIn"))
    if name in ("nin0_dense", "nin0_conv"):
        CLI.append(("a layer's nIn that is not what it is fed", (*P, "--model", "{%s}" % name, "--emit-plan", "{out}"),
                    {}, "nIn"))
for name in ("out_none", "out_empty", "out_text", "out_extra", "out_missing"):
    CLI.append(("outputs that name no layer", (*P, "--model", "{%s}" % name), {}, "networkOutputs"))
for name, word in (("tl_huge_t", "time out of range"), ("tl_bigint_t", "time out of range"),
                   ("tl_inf_bytes", "time out of range"), ("tl_only_iters", "iter without a count")):
    CLI.append(("a timeline of absurd values", ("report", "{%s}" % name), {}, word))
for name in ("tl_schema", "tl_schema_text"):
    CLI.append(("a timeline of another schema", ("report", "{%s}" % name), {}, "timeline schema"))
for env in ({"PYD4J_CLASSPATH": "{cut_jar}"}, {"PYD4J_CLASSPATH": "{empty_jar}"}, {"PYD4J_CLASSPATH": "{cut_dir}"}):
    CLI.append(("PYD4J_CLASSPATH with a truncated jar", ("doctor",), env, "not a readable jar"))
    CLI.append(("PYD4J_CLASSPATH with a truncated jar", ("estimate", "--model", "{lenet}", "--batch", "4"), env,
                "not a readable jar"))


def _argv(args: tuple[str, ...], files: dict[str, str], as_json: bool) -> list[str]:
    argv = [a.format(**files) for a in args]
    return [*argv, "--json"] if as_json else argv


@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
@pytest.mark.parametrize(("kind", "args", "env", "word"), CLI,
                         ids=[f"{c[0]}: {' '.join(c[1])[:60]}" for c in CLI])
def test_cli_bad_input_is_a_clean_error(files, kind, args, env, word, as_json):
    argv = _argv(args, files, as_json)
    key = f"{kind} | {' '.join(argv)} | {env}"
    RESULTS[key] = False
    given = {k: v.format(**files) for k, v in env.items()}
    if "PYD4J_CLASSPATH" in given:
        # the classpath is read when a JVM starts: in a fresh process, as a user runs pyd4j (an
        # in-process run would reuse a JVM an earlier test of this session started)
        p = subprocess.run([sys.executable, "-m", "pyd4j.cli", *argv], env={**os.environ, **given},
                           capture_output=True, text=True, timeout=300)
        r = SimpleNamespace(exit_code=p.returncode, stdout=p.stdout, stderr=p.stderr, exception=None)
    else:
        r = CliRunner().invoke(main, argv, env=given, catch_exceptions=True)
    assert r.exit_code not in (0, None), (argv, r.stdout[-2000:])
    assert r.exception is None or isinstance(r.exception, SystemExit), \
        "".join(__import__("traceback").format_exception(r.exception))[-3000:]
    if as_json:
        doc = json.loads(r.stdout)  # exactly one document
        assert doc["ok"] is False, doc
        message = doc.get("error") or " ".join(c["detail"] for c in doc.get("checks", []) if not c["ok"]) \
            or " ".join(f["title"] for f in doc.get("findings", []))
    else:
        message = r.stderr + (r.stdout if args[0] in ("doctor", "report") else "")
    assert len(message.strip()) > 20 and word in message, (word, message[-2000:])
    RESULTS[key] = True


CLUSTER = [
    (("--workers", "0"), {}, "--workers 0"), (("--workers", "-3"), {}, "--workers -3"),
    (("--workers", "100000"), {}, "--workers 100000"), (("--workers", "two"), {}, "'two'"),
    (("--cores", "0"), {}, "--cores 0"), (("--cores", "99999"), {}, "--cores 99999"),
    (("--memory", "lots"), {}, "'lots'"), (("--memory", "1k"), {}, "'1k'"), (("--memory", "-1g"), {}, "--memory"),
    (("--memory", "9" * 40 + "t"), {}, "Java long"), (("--bogus",), {}, "--bogus"),
    ((), {"SPARK_HOME": "/nonexistent/spark"}, "SPARK_HOME=/nonexistent/spark"),
    ((), {"SPARK_HOME": "{lenet}"}, "bin/spark-submit"),
]


@pytest.mark.parametrize(("args", "env", "word"), CLUSTER, ids=[" ".join(c[0]) or str(c[1]) for c in CLUSTER])
def test_spark_cluster_bad_arguments_are_clean_errors(files, args, env, word):
    """`python -m pyd4j.spark.cluster`: refused before any daemon starts (exit 2, usage and the reason)."""
    key = f"spark.cluster bad arguments | {' '.join(args)} | {env}"
    RESULTS[key] = False
    environ = {**os.environ, **{k: v.format(**files) for k, v in env.items()}}
    p = subprocess.run([sys.executable, "-m", "pyd4j.spark.cluster", *args], capture_output=True, text=True,
                       env=environ, timeout=120, stdin=subprocess.DEVNULL)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert word in p.stderr and p.stdout == "", p.stderr[-2000:]
    RESULTS[key] = True


# fit(memory=...): (keyword arguments, exception type, words the message holds)
FIT = [
    (dict(memory="superneurons", tier=5), ValueError, ("tier=5", "OffloadTier")),
    (dict(memory="superneurons", tier=2.5), ValueError, ("tier=2.5",)),
    (dict(memory="superneurons", tier=["disk"]), ValueError, ("tier=['disk']",)),
    (dict(memory="superneurons", tier=None), ValueError, ("tier=None",)),
    (dict(memory="superneurons", tier="pinned"), ValueError, ("tier='pinned'", "CPU", "disk")),
    (dict(memory="superneurons", tier="gpu"), ValueError, ("tier='gpu'", "disk")),
    (dict(memory="superneurons", tier=""), ValueError, ("tier=''",)),
    (dict(memory="superneurons", prefetch=10**12), ValueError, ("prefetch=1000000000000", "1024")),
    (dict(memory="superneurons", prefetch=2**31), ValueError, ("prefetch=2147483648", "1024")),
    (dict(prefetch=10**12), ValueError, ("prefetch=1000000000000", "1024")),
    (dict(prefetch=0), ValueError, ("prefetch=0", "1 to 1024")),
    (dict(prefetch=-1), ValueError, ("prefetch=-1",)),
    (dict(prefetch=True), ValueError, ("prefetch=True",)),
    (dict(prefetch="4"), ValueError, ("prefetch='4'",)),
    (dict(prefetch=2.0), ValueError, ("prefetch=2.0",)),
    (dict(memory="fast"), ValueError, ("memory='fast'", "superneurons")),
    (dict(memory="superneurons", budget="lots"), ValueError, ("lots",)),
    (dict(memory="superneurons", budget=1), ValueError, ("budget 1 bytes", "smallest peak")),
    (dict(memory="superneurons", budget="1k"), ValueError, ("budget 1024 bytes", "smallest peak")),
    (dict(memory="superneurons", policy="fastest"), ValueError, ("fastest",)),
    (dict(budget="1g"), ValueError, ("memory='superneurons'",)),
    (dict(tier="disk"), ValueError, ("memory='superneurons'",)),
    (dict(policy="liveness"), ValueError, ("memory='superneurons'",)),
    (dict(epochs=0), ValueError, ("epochs=0",)),
]


@pytest.mark.jvm
@pytest.mark.parametrize(("kwargs", "error", "words"), FIT, ids=[repr(f[0])[:60] for f in FIT])
def test_fit_memory_bad_arguments_are_refused_before_training(jvm, kwargs, error, words):
    """The Python API on a real DL4J MultiLayerNetwork: refused with the value and the fix, the
    parameters untouched (nothing trained), no JPype overload error or wrapped Java int."""
    import jpype

    from pyd4j.data import NumpyBatches
    from pyd4j.train import fit

    key = f"fit(memory=...) bad argument | {kwargs!r}"
    RESULTS[key] = False
    text = (NETS / "mlp.json").read_text()
    net = jpype.JClass("org.deeplearning4j.nn.multilayer.MultiLayerNetwork")(
        jpype.JClass("org.deeplearning4j.nn.conf.MultiLayerConfiguration").fromJson(text))
    net.init()
    before = np.array(net.params().toDoubleVector())
    rng = np.random.default_rng(1)
    data = NumpyBatches(rng.random((8, 784), dtype=np.float32), np.eye(10, dtype=np.float32)[np.arange(8) % 10],
                        batch_size=4)
    with pytest.raises(error) as err:
        fit(net, data, progress=False, **kwargs)
    assert not isinstance(err.value, jpype.JException)
    for word in words:
        assert word in str(err.value), (word, str(err.value))
    assert np.array_equal(np.array(net.params().toDoubleVector()), before), "trained despite the refusal"
    RESULTS[key] = True
