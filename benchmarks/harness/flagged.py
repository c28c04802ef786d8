"""A training job under the JVM flags `pyd4j flags` generates, inside a memory cgroup (`flags --verify`'s
run): the runs of the flags benchmarks."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from pyd4j.jvm import JvmOptions, examples_jar, java_command
from pyd4j.memory.container import diagnose, run_limited
from pyd4j.memory.flags import JIT_FLAG, FlagSet


def options_for(fs: FlagSet, extra: tuple[str, ...] = ()) -> JvmOptions:
    """`fs`'s heap, direct memory, JavaCPP limits, collector and JIT cap, the heap pre-touched (the whole
    heap resident from the start: the worst case for RSS), then `extra`."""
    return JvmOptions.of(heap_initial=fs.heap_bytes, heap_max=fs.heap_bytes, max_direct_memory=fs.max_direct_bytes,
                         javacpp_maxbytes=fs.maxbytes, javacpp_maxphysicalbytes=fs.maxphysicalbytes,
                         extra=[*(f.arg for f in fs.flags if f.name in ("collector", JIT_FLAG)), "-XX:+AlwaysPreTouch",
                                *extra])


def train(fs: FlagSet, config: Path, batch: int, iterations: int, limit: int, timeout: float = 900,
          extra_jvm: tuple[str, ...] = (), env: dict[str, str] | None = None) -> dict[str, Any]:
    """TrainSynthetic with `fs`'s flags and environment (and `extra_jvm`, and `env` added to them) in a cgroup
    limited to `limit` bytes (`config`'s inputs in its .input.json)."""
    env = {**fs.environment, **(env or {})}
    cmd = java_command(options_for(fs, extra_jvm), "org.pyd4j.examples.TrainSynthetic",
                       [str(config), str(batch), str(iterations)], extra_classpath=[examples_jar()])
    with tempfile.TemporaryDirectory() as scratch:  # DL4J writes its OOM crash dumps into the job's cwd
        c = run_limited(cmd, limit, timeout=timeout, cwd=scratch, env={**os.environ, **env} if env else None)
    line = next((l for l in reversed(c.stdout.splitlines()) if l.startswith("{")), None)
    result = json.loads(line) if line else {"status": "killed" if c.oom_killed else "crashed", "error_class": "",
                                            "error": c.stderr[-500:]}
    d = diagnose(c)
    if not c.ok and result.get("status") == "ok":
        result["status"] = "failed"
    result.update(exit_code=c.exit_code, wall_seconds=round(c.seconds, 1), container_limit_bytes=limit,
                  cgroup_peak_bytes=c.peak_bytes, cgroup_oom_kills=c.oom_kill_count, cgroup_failcnt=c.failcnt,
                  failure=d.kind, memory_exhausted=d.memory_exhausted, diagnosis=d.message)
    return result


def need_of(r: dict) -> int | None:
    """What the run really needed: peak RSS, or the cgroup's peak charge when higher (page tables, kernel)."""
    values = [v for v in (r.get("peak_rss_bytes"), r.get("cgroup_peak_bytes")) if v]
    return max(values) if values else None
