"""Flag arithmetic against hand-worked numbers, every output format, bad inputs. No JVM."""

from __future__ import annotations

import dataclasses
import shlex
import subprocess
import sys

import pytest

from pyd4j.memory.estimate import Estimate, EstimateError, Term
from pyd4j.memory.jvm_overhead import jvm_native_bytes, jvm_native_terms
from pyd4j.memory.flags import BudgetError, flags, largest_batch, measured_estimate

MiB = 1024**2


def hand_estimate(batch: int = 100) -> Estimate:
    """off-heap 100 MiB + 1 MiB/sample, heap 256 MiB, JVM native 280 MiB."""
    terms = (
        Term("parameters", "offheap", "dl4j-report", 100 * MiB, 0, "hand"),
        Term("activations", "offheap", "dl4j-report", 0, 1 * MiB, "hand"),
        Term("java_heap", "heap", "estimate", 256 * MiB, 0, "hand"),
        Term("jvm_native", "native", "estimate", 280 * MiB, 0, "hand"),
    )
    return Estimate(model="hand", model_kind="MultiLayerNetwork", batch=batch, dtype="float32", mode="train",
                    inputs=(), parameter_count=0, layer_count=2, terms=terms, workspace_overallocation=0.0,
                    prefetch_queue=2)


def test_hand_worked_flags():
    # batch 100: off-heap 200 MiB -> maxbytes 230 MiB; native 280 x 1.15 = 322 MiB;
    # budget = 230 + 256 (heap) + 16 (direct) + 322 = 824 MiB; margin max(16, ceil(41.2)) = 42 -> container 866 MiB.
    # maxphysicalbytes: the budget less the JVM's 45 MiB of file-backed pages, which JavaCPP does not count: 779 MiB
    fs = flags(hand_estimate(100), total="4g", headroom=0.15)
    assert fs.maxbytes == 230 * MiB
    assert fs.heap_bytes == 256 * MiB
    assert fs.max_direct_bytes == 16 * MiB
    assert fs.maxphysicalbytes == 779 * MiB
    assert fs.container_bytes == fs.total_bytes == 866 * MiB
    assert fs.args() == ["-Xms256m", "-Xmx256m", "-XX:MaxDirectMemorySize=16m",
                         f"-Dorg.bytedeco.javacpp.maxbytes={230 * MiB}",
                         f"-Dorg.bytedeco.javacpp.maxphysicalbytes={779 * MiB}"]
    assert all(f.reason for f in fs.flags)
    assert "NIO" in fs.flags[2].reason or "nio" in fs.flags[2].reason


def test_jvm_native_hand_worked():
    # 2 CPUs, 3 layers: base 100 + 160 KiB x 3 = 0.46875 + 4 x 2 CPUs = 8  ->  108.46875 MiB
    assert jvm_native_bytes(2, 3) == int(108.46875 * MiB)
    # 16 CPUs, 175 layers: 100 + 27.34375 + 64 = 191.34375 MiB
    assert jvm_native_bytes(16, 175) == int(191.34375 * MiB)
    # what a long run holds beyond the base (48 MiB under the JDK's C2) and G1's tables (5% of the heap) are terms
    # of their own
    native, long_run, g1 = jvm_native_terms(416 * MiB, 2, 175)
    assert native.bytes_at(1) == jvm_native_bytes(2, 175) and long_run.bytes_at(1) == 48 * MiB
    assert g1.name == "g1_tables" and g1.bytes_at(1) == int(20.8 * MiB)


def with_g1(est: Estimate, heap: int) -> Estimate:
    """`est` with pyd4j's JVM native terms for `heap` in place of its hand-written one (2 CPUs, 3 layers)."""
    terms = tuple(t for t in est.terms if t.name != "jvm_native") + tuple(jvm_native_terms(heap, 2, 3))
    return dataclasses.replace(est, terms=terms, cpu_count=2)


def test_small_container_pins_serial_and_leaves_g1s_tables_out():
    # batch 100: off-heap 200 MiB -> 230; heap 256; native (108.47 + 40 for a long run under the pinned C2 node
    # limit) x 1.15 = 170.74 -> 171 MiB (G1's 12.8 MiB left out); budget 230 + 256 + 16 + 171 = 673, margin 34
    # -> container 707 MiB, under the JVM's 1792 MiB line
    fs = flags(with_g1(hand_estimate(100), 256 * MiB), total="8g")
    assert fs.collector == "Serial" and fs.args()[-2:] == ["-XX:MaxNodeLimit=20000", "-XX:+UseSerialGC"]
    assert fs.container_bytes == 707 * MiB and "g1_tables" not in fs.breakdown
    assert fs.breakdown["long_run_native"] == 40 * MiB
    assert "1792 MiB" in fs.flags[-1].reason
    assert fs.sized.breakdown() == fs.breakdown   # what `pyd4j flags` prints as the terms is what it sized
    # --no-pin: native (108.47 + 48 without the node limit + 12.8 G1) x 1.15 = 194.7 -> 195; budget 230 + 256 + 16
    # + 195 = 697, margin ceil(34.85) = 35 -> 732 MiB, and no HotSpot option
    free = flags(with_g1(hand_estimate(100), 256 * MiB), total="8g", pin_jvm=False)
    assert free.container_bytes == 732 * MiB and free.collector is None and free.pinned_args() == []
    assert free.breakdown["long_run_native"] == 48 * MiB and "g1_tables" in free.breakdown
    assert not any(a.startswith("-XX:MaxNodeLimit") or a.endswith("GC") for a in free.args())


def test_large_container_pins_g1_and_counts_its_tables():
    # batch 1500: off-heap 1600 MiB -> 1840; heap 256; native (108.47 + 40 + 12.8) x 1.15 = 185.46 -> 186;
    # budget 1840 + 256 + 16 + 186 = 2298, margin ceil(114.9) = 115 -> container 2413 MiB
    fs = flags(with_g1(hand_estimate(1500), 256 * MiB), total="8g")
    assert fs.collector == "G1" and "-XX:+UseG1GC" in fs.args() and "-XX:+UseSerialGC" not in fs.args()
    assert fs.container_bytes == 2413 * MiB and fs.breakdown["g1_tables"] == int(12.8 * MiB)


def test_one_cpu_runs_serial_however_large():
    est = dataclasses.replace(with_g1(hand_estimate(1500), 256 * MiB), cpu_count=1)
    assert flags(est, total="8g").collector == "Serial"


def test_largest_batch_follows_the_collector_across_the_line():
    # the batch where the container crosses 1792 MiB switches to G1 and its tables: largest_batch sizes each batch
    # as flags() would
    est = with_g1(hand_estimate(1), 256 * MiB)
    best = largest_batch(est, total="2g")
    assert flags(est.at_batch(best), total="2g").container_bytes <= 2048 * MiB
    with pytest.raises(BudgetError):
        flags(est.at_batch(best + 1), total="2g")
    assert flags(est.at_batch(best), total="2g").collector == "G1"


def test_measured_estimates_pin_no_collector():
    # measured peaks hold whatever the job's collector and compiler took: nothing to pin
    fs = flags(measured_estimate(100 * MiB, 200 * MiB, 150 * MiB), total="8g")
    assert fs.collector is None and not any("GC" in a or "MaxNodeLimit" in a for a in fs.args())


def test_maxphysicalbytes_is_the_budget_less_the_jvms_file_pages():
    # 1 GiB of parameters, a 600 MiB activation workspace at batch 100; heap 256, native 280 MiB.
    # budget = ceil(1624 x 1.15 = 1867.6) = 1868 + 256 + 16 + 322 = 2462 MiB; container + ceil(123.1) = 124 -> 2586 MiB.
    # maxphysicalbytes = 2462 - 45 = 2417 MiB, however large the workspace: JavaCPP counts resident memory less
    # file-backed pages, so it collects when RSS reaches the budget
    terms = (
        Term("parameters", "offheap", "estimate", 1024 * MiB, 0, "hand"),
        Term("activations", "offheap", "estimate", 0, 6 * MiB, "hand"),
        Term("java_heap", "heap", "estimate", 256 * MiB, 0, "hand"),
        Term("jvm_native", "native", "estimate", 280 * MiB, 0, "hand"),
    )
    est = dataclasses.replace(hand_estimate(100), terms=terms)
    fs = flags(est, total="8g")
    assert fs.container_bytes == 2586 * MiB and fs.maxphysicalbytes == 2417 * MiB
    assert "file-backed" in fs.flags[4].reason and "45 MiB" in fs.flags[4].reason


def test_zero_headroom_and_heap_rounding():
    est = hand_estimate(100)
    terms = tuple(Term(t.name, t.region, t.source, 300 * MiB, 0, "") if t.name == "java_heap" else t for t in est.terms)
    fs = flags(Estimate(**{**est.__dict__, "terms": terms}), total="8g", headroom=0.0)
    assert fs.maxbytes == 200 * MiB
    assert fs.heap_bytes == 304 * MiB  # 300 MiB rounded up to 16 MiB (19 x 16)
    assert fs.maxphysicalbytes == (200 + 304 + 16 + 280 - 45) * MiB


def test_largest_batch_hand_worked():
    # M(b) = ceil(115 + 1.15 b) + 256 + 16 + 322; container = M + ceil(0.05 M) <= 1024  ->  M <= 975
    # (975 + 49 = 1024, 976 + 49 = 1025)  ->  ceil(115 + 1.15 b) <= 381  ->  b <= 231.3  ->  b = 231
    est = hand_estimate(1)
    assert largest_batch(est, total="1g") == 231
    assert flags(est.at_batch(231), total="1g").container_bytes == 1024 * MiB
    with pytest.raises(BudgetError):
        flags(est.at_batch(232), total="1g")


def test_refusal_names_need_term_and_batch():
    with pytest.raises(BudgetError) as info:
        flags(hand_estimate(400), total="1g")
    err = info.value
    assert err.largest_batch == 231
    assert err.biggest_term == "activations"  # 400 MiB at batch 400, above native 280 and heap 256
    # ceil(500 x 1.15) = 575; + heap 256 + direct 16 + native 322 = 1169; margin max(16, ceil(58.45)) = 59
    assert err.needed_bytes == (ceil_mib(500 * 1.15) + 256 + 16 + 322 + 59) * MiB == 1228 * MiB
    assert "largest minibatch that fits is 231" in str(err)


def ceil_mib(x: float) -> int:
    import math
    return math.ceil(x - 1e-9)


def test_refusal_when_nothing_fits():
    with pytest.raises(BudgetError) as info:
        flags(hand_estimate(1), total="512m")
    assert info.value.largest_batch == 0
    assert "no minibatch fits" in str(info.value)


def test_gpu_budget():
    # device need = ceil(off-heap x 1.15) + 512 MiB CUDA context; batch 100: 230 + 512 = 742 MiB
    fs = flags(hand_estimate(100), total="8g", gpu_mem="1g")
    assert fs.gpu_need_bytes == 742 * MiB
    # 1 GiB device: ceil(115 + 1.15 b) + 512 <= 1024 -> 1.15 b <= 397 -> b = 345
    assert largest_batch(hand_estimate(1), gpu_mem="1g") == 345
    with pytest.raises(BudgetError) as info:
        flags(hand_estimate(400), total="8g", gpu_mem="1g")
    assert info.value.largest_batch == 345 and "GPU memory" in str(info.value)


def test_measured_estimate():
    fs = flags(measured_estimate(100 * MiB, 512 * MiB, 200 * MiB), total="4g", headroom=0.1)
    assert fs.maxbytes == 110 * MiB and fs.heap_bytes == 512 * MiB
    assert fs.maxphysicalbytes == (110 + 512 + 16 + 220 - 45) * MiB


# ----------------------------------------------------------------------------- formats

@pytest.fixture
def fs():
    return flags(hand_estimate(100), total="4g")


def test_format_args_and_env(fs):
    assert fs.render("args").split() == fs.args()
    env = fs.render("env")
    assert env.startswith("export JAVA_TOOL_OPTIONS=")
    assert shlex.split(env.split("=", 1)[1]) == [" ".join(fs.args())]


def test_format_maven(fs):
    out = fs.render("maven")
    assert f"<argLine>{' '.join(fs.args())}</argLine>" in out
    for arg in fs.args():
        assert f"<argument>{arg}</argument>" in out
    assert "MAVEN_OPTS" in out


def test_format_gradle(fs):
    out = fs.render("gradle")
    assert "[" + ", ".join(f"'{a}'" for a in fs.args()) + "]" in out
    assert "jvmArgs" in out


def test_format_k8s(fs):
    out = fs.render("k8s")
    assert out.count('memory: "866Mi"') == 2
    assert "JAVA_TOOL_OPTIONS" in out


MALLOC = {"MALLOC_MMAP_THRESHOLD_": "131072"}


@pytest.fixture
def fs_env():
    """Flags of an estimate that assumes an environment (as the fit() model's do): every format carries it."""
    kept = Term("kept_by_glibc", "offheap", "estimate", 0, MiB, "hand")
    return flags(dataclasses.replace(hand_estimate(100), environment=MALLOC, without_environment=kept), total="4g")


def test_environment_in_every_format(fs_env):
    import xml.etree.ElementTree as ET

    import yaml

    assert fs_env.environment == MALLOC and "100 MiB more" in fs_env.environment_reason
    # env: one export per variable, then the JVM options, as a shell reads them
    lines = [shlex.split(line) for line in fs_env.render("env").splitlines()]
    assert lines[0] == ["export", "MALLOC_MMAP_THRESHOLD_=131072"]
    assert lines[1] == ["export", "JAVA_TOOL_OPTIONS=" + " ".join(fs_env.args())]
    # maven: both plugins' <environmentVariables>, in well-formed XML
    root = ET.fromstring(f"<plugins>{fs_env.render('maven')}</plugins>")
    found = [{e.tag: e.text for e in block} for block in root.iter("environmentVariables")]
    assert found == [MALLOC, MALLOC]
    # gradle: the map, given to Test and JavaExec tasks
    gradle = fs_env.render("gradle")
    assert "def nd4jEnvironment = ['MALLOC_MMAP_THRESHOLD_': '131072']" in gradle
    assert gradle.count("environment nd4jEnvironment") == 2
    # k8s: a container env entry beside JAVA_TOOL_OPTIONS
    spec = yaml.safe_load(fs_env.render("k8s"))
    assert {e["name"]: e["value"] for e in spec["env"]} == {**MALLOC, "JAVA_TOOL_OPTIONS": " ".join(fs_env.args())}
    # args: the JVM options alone (the CLI prints the environment above them)
    assert fs_env.render("args").split() == fs_env.args()
    assert fs_env.to_dict()["environment"] == MALLOC


def test_no_environment_no_trace(fs):
    assert fs.environment == {}
    assert "environmentVariables" not in fs.render("maven") and "nd4jEnvironment" not in fs.render("gradle")
    assert fs.render("env").count("export") == 1


def test_unknown_format(fs):
    with pytest.raises(ValueError, match="unknown format 'xml'"):
        fs.render("xml")


# ----------------------------------------------------------------------------- bad inputs

def test_bad_budget():
    with pytest.raises(EstimateError, match="12 parsecs"):
        flags(hand_estimate(), total="12 parsecs")
    with pytest.raises(EstimateError, match="more than 0"):
        flags(hand_estimate(), total=0)


@pytest.mark.parametrize("batch", [0, -3, 1.5, True])
def test_bad_batch(batch):
    with pytest.raises(EstimateError, match="minibatch size"):
        hand_estimate().at_batch(batch)


def test_bad_headroom():
    with pytest.raises(EstimateError, match="headroom"):
        flags(hand_estimate(), total="4g", headroom=-0.1)


def test_flags_is_pure_python():
    """flags.py must import and run with jpype unavailable."""
    code = ("import sys; sys.modules['jpype'] = None; sys.modules['py4j'] = None\n"
            "from tests.memory.test_flags import hand_estimate\n"
            "from pyd4j.memory.flags import flags\n"
            "print(flags(hand_estimate(), total='4g').args()[1])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "-Xmx256m"
