"""Real container memory limits: a fresh cgroup per run, OOM kills reported as such, groups always removed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pyd4j.memory import container
from pyd4j.memory.container import ContainerError, ContainerUnavailable, leftover_groups, run_limited
# Imported at collection: pytest rewrites test modules with ast.parse, which CPython 3.11 can refuse
# ("AST constructor recursion depth mismatch") when it first happens mid-session after JVM callbacks.
from tests.memory.test_flags import hand_estimate, with_g1

MiB = 1024**2
CAN, WHERE = container.available()
needs_cgroup = pytest.mark.skipif(not CAN, reason=f"no writable memory cgroup here: {WHERE}")

# touch every page, so the memory is really charged (bytearray of zeros may stay untouched)
ALLOC = "import sys; n = int(sys.argv[1]) * 1024 * 1024; b = bytearray(n); b[::4096] = b'x' * len(b[::4096]); print(n)"


@pytest.fixture(autouse=True)
def no_leftovers():
    before = leftover_groups()
    yield
    assert leftover_groups() == before, "a cgroup was left behind"


@needs_cgroup
def test_over_the_limit_is_oom_killed():
    r = run_limited([sys.executable, "-c", ALLOC, "200"], 64 * MiB, timeout=60)
    assert r.exit_code == -9 and r.killed_signal == 9
    assert r.oom_killed and not r.ok
    assert r.oom_kill_count >= 1 or r.failcnt >= 1
    assert r.peak_bytes is not None and r.peak_bytes <= 64 * MiB + 4096  # the kernel holds it at the limit
    assert r.describe().startswith("memory exhausted") and "64 MiB" in r.describe()


@needs_cgroup
def test_through_a_shell_137_is_still_an_oom_kill():
    r = run_limited(["sh", "-c", f"{sys.executable} -c \"{ALLOC}\" 200; exit $?"], 64 * MiB, timeout=60)
    assert r.exit_code == 137 and r.killed_signal == 9 and r.oom_killed


@needs_cgroup
def test_under_the_limit_succeeds_with_peak_measured():
    r = run_limited([sys.executable, "-c", ALLOC, "40"], 256 * MiB, timeout=60)
    assert r.ok and r.exit_code == 0 and r.oom_kill_count == 0
    assert r.stdout.strip() == str(40 * MiB)
    # peak covers the 40 MiB touched (plus the interpreter), and stays far below the limit
    assert 40 * MiB <= r.peak_bytes < 256 * MiB
    assert r.describe().startswith("ok under the 256 MiB")


@needs_cgroup
def test_non_oom_failure_is_not_called_memory():
    r = run_limited([sys.executable, "-c", "raise SystemExit(3)"], 128 * MiB, timeout=60)
    assert r.exit_code == 3 and not r.oom_killed and not r.ok
    assert "not an OOM kill" in r.describe()


@needs_cgroup
def test_timeout_kills_and_removes_the_group():
    r = run_limited([sys.executable, "-c", "import time; time.sleep(60)"], 128 * MiB, timeout=0.5)
    assert r.timed_out and not r.ok and not r.oom_killed and r.exit_code != 0  # killed, not finished


@needs_cgroup
def test_ctrl_c_kills_the_child_and_removes_the_group(monkeypatch):
    started = []
    real = subprocess.Popen.communicate

    def interrupted(self, *args, **kwargs):
        started.append(self)
        raise KeyboardInterrupt

    monkeypatch.setattr(subprocess.Popen, "communicate", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_limited([sys.executable, "-c", "import time; time.sleep(60)"], 128 * MiB)
    monkeypatch.setattr(subprocess.Popen, "communicate", real)
    assert started and started[0].poll() is not None  # the child is dead, not orphaned


@needs_cgroup
def test_bad_limit_and_command():
    with pytest.raises(ContainerError, match="at least"):
        run_limited(["true"], 1000)
    with pytest.raises(ContainerError, match="integer"):
        run_limited(["true"], "1g")  # type: ignore[arg-type]
    with pytest.raises(ContainerError, match="command not found: 'no-such-binary-xyz'"):
        run_limited(["no-such-binary-xyz"], 64 * MiB)


def test_unavailable_names_the_path_and_the_fix(tmp_path):
    proc_self = tmp_path / "cgroup"
    proc_self.write_text("4:memory:/job\n0::/job\n")
    (tmp_path / "memory").mkdir()  # a v1 mount point without a memory hierarchy in it
    with pytest.raises(ContainerUnavailable) as info:
        run_limited(["true"], 64 * MiB, root=tmp_path, proc_self=proc_self)
    assert "needs root or a delegated cgroup" in str(info.value)
    assert "--memory" in str(info.value)
    ok, why = container.available(root=tmp_path, proc_self=proc_self)
    assert not ok and str(tmp_path) in why


def test_unwritable_v1_group_is_reported_with_its_path(tmp_path):
    proc_self = tmp_path / "cgroup"
    proc_self.write_text("4:memory:/job\n")
    mem = tmp_path / "memory"
    (mem / "job").mkdir(parents=True)
    (mem / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    # a plain directory accepts mkdir, but the child has no memory.limit_in_bytes the kernel would create
    with pytest.raises(ContainerUnavailable) as info:
        container.create_group(64 * MiB, root=tmp_path, proc_self=proc_self)
    assert [p for p, _ in info.value.tried] == [str(mem / "job"), str(mem)]
    assert not any(p.name.startswith("pyd4j-limit-") for p in (mem / "job").iterdir())  # cleaned up


# ----------------------------------------------------------------------------- pyd4j flags --verify

def fake_java(tmp_path, body: str):
    """A stand-in `java` (no JVM needed): answers `-version` (verify asks it first whether it takes the flags),
    else prints its arguments, then runs `body` in Python."""
    path = tmp_path / "java"
    path.write_text(f"#!/bin/sh\nfor a; do last=$a; done\n[ \"$last\" = -version ] && exit 0\n"
                    f"echo \"ARGS $*\"\nexec {sys.executable} -c \"{body}\"\n")
    path.chmod(0o755)
    return str(path)


@needs_cgroup
def test_verify_passes_inserts_flags_and_fails_on_oom(tmp_path, capsys):
    import json

    from pyd4j.commands.flags import _verify, verify_command
    from pyd4j.memory.flags import flags

    fs = flags(hand_estimate(1), total="8g")
    # the job's own -Xmx goes, its arguments stay (java itself may be resolved to a full path)
    assert verify_command(fs, ["java", "-Xmx9g", "-cp", "a.jar", "Main", "-Xmx1g"])[1:] == \
        [*fs.args(), "-cp", "a.jar", "Main", "-Xmx1g"]
    _verify(fs, [fake_java(tmp_path, "print(1)"), "-cp", "a.jar", "Main"], 60, as_json=True)
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] and doc["verify"]["kind"] == "ok" and doc["verify"]["container_limit_bytes"] == fs.container_bytes

    hog = f"b = bytearray({fs.container_bytes + 256 * MiB}); b[::4096] = bytes(len(b[::4096]))"
    with pytest.raises(SystemExit) as info:
        _verify(fs, [fake_java(tmp_path, hog), "Main"], 60, as_json=True)
    assert info.value.code == 4
    doc = json.loads(capsys.readouterr().out)
    assert not doc["ok"] and doc["verify"]["kind"] == "container_oom_kill" and doc["verify"]["memory_exhausted"]
    assert "OOM killer" in doc["verify"]["diagnosis"]


@needs_cgroup
def test_fake_java_verify_starts_the_job_with_the_flags_environment(tmp_path, capsys, monkeypatch):
    """The fit() model assumes glibc's mmap threshold fixed: `flags --verify` must start the job with it."""
    import dataclasses
    import json

    from pyd4j.commands.flags import _verify
    from pyd4j.memory.flags import flags

    malloc = {"MALLOC_MMAP_THRESHOLD_": "131072"}
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    job = [fake_java(tmp_path, "import os, sys; sys.exit(0 if os.environ.get('MALLOC_MMAP_THRESHOLD_') == '131072' else 7)"),
           "Main"]
    fs = flags(dataclasses.replace(hand_estimate(1), environment=malloc), total="8g")
    _verify(fs, job, 60, as_json=True)
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] and doc["environment"] == malloc
    # the same job under flags without the environment fails: the job really reads it
    with pytest.raises(SystemExit) as info:
        _verify(flags(hand_estimate(1), total="8g"), job, 60, as_json=True)
    assert info.value.code == 4 and json.loads(capsys.readouterr().out)["verify"]["exit_code"] == 7


def test_diagnose_reads_java_out_of_memory_errors():
    from pyd4j.memory.container import ContainerResult, diagnose

    def ended(stdout="", stderr="", code=1):
        return ContainerResult(command=("java",), limit_bytes=512 * MiB, cgroup_version=1, exit_code=code,
                               oom_kill_count=0, failcnt=0, peak_bytes=300 * MiB, seconds=1.0, stdout=stdout,
                               stderr=stderr)

    d = diagnose(ended(stdout='{"status": "failed", "error_class": "java.lang.OutOfMemoryError", "error": '
                              '"Cannot allocate new LongPointer(6): totalBytes = 256, physicalBytes = 785M"}'))
    assert d.kind == "JavaCppOutOfMemoryError" and d.memory_exhausted and "maxphysicalbytes" in d.message
    d = diagnose(ended(stderr='Exception in thread "main" java.lang.OutOfMemoryError: Java heap space\n'))
    assert d.kind == "JavaOutOfMemoryError" and "-Xmx" in d.message
    d = diagnose(ended(stderr="java.lang.OutOfMemoryError: Direct buffer memory\n"))
    assert d.kind == "DirectBufferOutOfMemoryError" and "MaxDirectMemorySize" in d.message
    d = diagnose(ended(stderr="Exception in thread main java.lang.IllegalStateException: bad\n"))
    assert d.kind == "failed" and not d.memory_exhausted
    killed = ContainerResult(command=("java",), limit_bytes=512 * MiB, cgroup_version=1, exit_code=-9,
                             oom_kill_count=1, failcnt=3, peak_bytes=512 * MiB, seconds=1.0)
    assert diagnose(killed).kind == "container_oom_kill" and diagnose(killed).memory_exhausted
    assert diagnose(ended(code=0)).kind == "ok"


@needs_cgroup
@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_fake_jvm_without_c2_verify_names_the_refused_pinned_option_and_the_fix(tmp_path, capsys, as_json):
    """A JVM without HotSpot's C2 (a minimal VM, OpenJ9) refuses -XX:MaxNodeLimit: verify asks it first and
    ends 4 naming the option and --no-pin, without starting the job; with pin_jvm=False it runs."""
    import json

    from pyd4j.commands.flags import _verify
    from pyd4j.memory.flags import flags

    path = tmp_path / "java"   # answers like HotSpot's launcher does when an -XX option is unknown to its VM
    path.write_text("#!/bin/sh\nfor a; do case $a in -XX:MaxNodeLimit=*) "
                    "echo \"Unrecognized VM option 'MaxNodeLimit=20000'\" >&2; "
                    "echo 'Error: Could not create the Java Virtual Machine.' >&2; exit 1;; esac; done\n"
                    f"for a; do last=$a; done\n[ \"$last\" = -version ] && exit 0\ntouch {tmp_path / 'ran'}\n")
    path.chmod(0o755)
    pinned = flags(with_g1(hand_estimate(1), 256 * MiB), total="8g")
    assert pinned.pinned_args() == ["-XX:MaxNodeLimit=20000", "-XX:+UseSerialGC"]
    with pytest.raises(SystemExit) as info:
        _verify(pinned, [str(path), "-cp", "a.jar", "Main"], 60, as_json=as_json)
    assert info.value.code == 4 and not (tmp_path / "ran").exists()
    out, err = capsys.readouterr()
    message = json.loads(out)["error"] if as_json else err
    assert "-XX:MaxNodeLimit=20000" in message and "Unrecognized VM option" in message and "--no-pin" in message
    if as_json:
        assert json.loads(out)["refused_options"] == ["-XX:MaxNodeLimit=20000"]
    unpinned = flags(with_g1(hand_estimate(1), 256 * MiB), total="8g", pin_jvm=False)
    assert unpinned.pinned_args() == [] and unpinned.container_bytes > pinned.container_bytes
    _verify(unpinned, [str(path), "-cp", "a.jar", "Main"], 60, as_json=True)
    assert json.loads(capsys.readouterr().out)["ok"] and (tmp_path / "ran").exists()
