"""What this machine has: physical RAM, the cgroup memory limit, CPUs and their features, GPUs.

Pure Python (reads /proc and /sys), so the flag generator and `make setup` can use it without a JVM.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_SELF_CGROUP = Path("/proc/self/cgroup")
_CGROUP_UNLIMITED = 1 << 62  # cgroup v1 reports "no limit" as a huge page-aligned number


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_bytes: int


@dataclass(frozen=True)
class Machine:
    physical_bytes: int
    cgroup_limit_bytes: int | None
    cpu_count: int
    cpu_features: tuple[str, ...]
    nd4j_classifier: str
    gpus: tuple[Gpu, ...] = field(default_factory=tuple)

    @property
    def usable_bytes(self) -> int:
        """The memory a process here may really use: the cgroup limit when lower than RAM."""
        if self.cgroup_limit_bytes is None:
            return self.physical_bytes
        return min(self.physical_bytes, self.cgroup_limit_bytes)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["usable_bytes"] = self.usable_bytes
        return d


def physical_bytes() -> int:
    """Total physical RAM in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def cgroup_limit_bytes(root: Path = CGROUP_ROOT, proc_self: Path = PROC_SELF_CGROUP) -> int | None:
    """The memory limit of this process's cgroup (v2 `memory.max` or v1 `memory.limit_in_bytes`), or None."""
    v1, v2 = own_cgroup_paths(proc_self)
    candidates = []
    if v2 is not None:
        candidates.append(root / v2.lstrip("/") / "memory.max")
    if v1 is not None:
        candidates.append(root / "memory" / v1.lstrip("/") / "memory.limit_in_bytes")
    candidates += [root / "memory.max", root / "memory" / "memory.limit_in_bytes"]  # a limit on the whole mount
    for path in candidates:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text == "max":
            return None
        try:
            value = int(text)
        except ValueError:
            continue
        return None if value >= _CGROUP_UNLIMITED else value
    return None


def own_cgroup_paths(proc_self: Path = PROC_SELF_CGROUP) -> tuple[str | None, str | None]:
    """This process's (v1 memory, v2 unified) cgroup paths from /proc/self/cgroup; None where absent."""
    try:
        lines = proc_self.read_text().splitlines()
    except OSError:
        return None, None
    v1 = v2 = None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
        elif "memory" in parts[1].split(","):
            v1 = parts[2]
    return v1, v2


def cpu_features(cpuinfo: Path = Path("/proc/cpuinfo")) -> tuple[str, ...]:
    """The CPU flags that matter for choosing an nd4j-native build."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return ()
    flags: set[str] = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[1].split())
            break
    wanted = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq")
    return tuple(f for f in wanted if f in flags)


def best_nd4j_classifier(features: tuple[str, ...] | None = None) -> str:
    """The nd4j-native Maven classifier that runs fastest on this CPU (x86_64 Linux)."""
    features = cpu_features() if features is None else features
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= set(features):
        return "linux-x86_64-avx512"
    if {"avx2", "fma"} <= set(features):
        return "linux-x86_64-avx2"
    return "linux-x86_64"


def gpus() -> tuple[Gpu, ...]:
    """NVIDIA GPUs as nvidia-smi reports them; empty where there is none."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return ()
    try:
        out = subprocess.run(
            [smi, "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    found = []
    for line in out.strip().splitlines():
        name, _, mib = line.rpartition(",")
        try:
            found.append(Gpu(name.strip(), int(float(mib)) * 1024 * 1024))
        except ValueError:
            continue
    return tuple(found)


def probe() -> Machine:
    """Read everything about this machine once."""
    features = cpu_features()
    return Machine(
        physical_bytes=physical_bytes(),
        cgroup_limit_bytes=cgroup_limit_bytes(),
        cpu_count=os.cpu_count() or 1,
        cpu_features=features,
        nd4j_classifier=best_nd4j_classifier(features),
        gpus=gpus(),
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Print facts about this machine.")
    parser.add_argument("--nd4j-classifier", action="store_true", help="print only the best nd4j-native classifier")
    args = parser.parse_args()
    if args.nd4j_classifier:
        print(best_nd4j_classifier())
    else:
        import json
        print(json.dumps(probe().to_dict(), indent=2))
