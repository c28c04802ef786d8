"""CUDA side-agent benchmark: one prepared script, under 10 minutes on one GPU.

1. Bandwidth: the agent's offload (device -> pinned host) and prefetch (host -> device) as a
   ratio to a plain cudaMemcpyAsync on pinned memory measured in the same run
   (`pyd4j_agent_bench_plain_copy`: same sizes, same number of copies, one stream, one sync).
   Target: ratio >= 0.8.
2. Overlap: offloads issued while the compute stream runs matrix products; the agent's
   overlap statistic (copy time spent while compute ran) over the copy time.
3. Training under a budget: a ResNet-style network trained for a few steps with the
   SuperNeurons plan under a device budget below its baseline peak, on the `native` and `cupy`
   backends: measured peak vs planned (target <= 1.1x), gradients and parameters equal to an
   unconstrained run of the same backend, time overhead vs unconstrained.

Writes benchmarks/results/agent_gpu.json. Without a GPU it says so (in the JSON too) and exits
0; `--host` runs the same pipeline on the host build (a smoke test of the script; figures are
memcpy speeds, written to agent_host.json).

Needs Python, numpy and, on a GPU, CuPy for CUDA 12 or 13 (`pip install cupy-cuda13x`) plus
cmake and nvcc to build native/ (a system CUDA toolkit, or `pip install nvidia-cuda-nvcc
nvidia-cuda-runtime nvidia-cuda-crt`); no Java: nothing on this path imports the JVM. Where the
CUDA build cannot be made, the CuPy parts still run and the JSON says why the rest did not.

    .venv/bin/python benchmarks/agent_gpu.py            # on a GPU machine
    .venv/bin/python benchmarks/agent_gpu.py --host     # anywhere
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from harness import RESULTS, ROOT, Recorder

CUDA_BUILD = ROOT / "native" / "build-cuda"
DEADLINE_S = 540  # leave a minute of the 10 for setup and writing
T0 = time.monotonic()


def left() -> float:
    return DEADLINE_S - (time.monotonic() - T0)


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:6.1f}s] {msg}", flush=True)


def gpu_present() -> tuple[bool, str]:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False, "nvidia-smi not found"
    try:
        out = subprocess.run([smi, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"nvidia-smi failed: {e}"
    if out.returncode != 0 or not out.stdout.strip():
        return False, f"nvidia-smi found no GPU: {out.stderr.strip() or out.stdout.strip()}"
    return True, out.stdout.strip().splitlines()[0]


def ensure_cuda_library() -> Path:
    """A CUDA build of native/ (built here with nvcc when the default build is host-only)."""
    lib = CUDA_BUILD / "libpyd4j_agent.so"
    if not lib.is_file():
        log("building native/ with nvcc ...")
        if not shutil.which("cmake"):
            raise RuntimeError("cmake not found (pip install cmake, or apt-get install cmake)")
        cfg = ["cmake", "-S", str(ROOT / "native"), "-B", str(CUDA_BUILD), "-DCMAKE_BUILD_TYPE=Release",
               "-DPYD4J_AGENT_TESTS=OFF"]
        nvcc = find_nvcc()
        if nvcc is None:
            raise RuntimeError("nvcc not found (on PATH, $CUDA_HOME/bin, /usr/local/cuda/bin or the "
                               "nvidia-cuda-nvcc wheel)")
        cfg.append(f"-DCMAKE_CUDA_COMPILER={nvcc}")
        subprocess.run(cfg, check=True)
        subprocess.run(["cmake", "--build", str(CUDA_BUILD), "-j"], check=True)
    return lib


def find_nvcc() -> str | None:
    """nvcc on PATH, under CUDA_HOME or /usr/local/cuda, or from the nvidia-cuda-nvcc wheel (which
    ships libcudart.so.N only: the unversioned name CMake links against is added beside it)."""
    for candidate in (shutil.which("nvcc"), os.path.join(os.environ.get("CUDA_HOME", "/nonexistent"), "bin", "nvcc"),
                      "/usr/local/cuda/bin/nvcc"):
        if candidate and Path(candidate).is_file():
            return candidate
    import site

    for base in site.getsitepackages() + [site.getusersitepackages()]:
        for nvcc in sorted(Path(base).glob("nvidia/cu1*/bin/nvcc"), reverse=True):
            lib = nvcc.parent.parent / "lib"
            versioned = sorted(lib.glob("libcudart.so.*"))
            if versioned and not (lib / "libcudart.so").exists():
                (lib / "libcudart.so").symlink_to(versioned[-1].name)
            return str(nvcc)
    return None


# -- 1. bandwidth --------------------------------------------------------------------------------
def bandwidth(native, size: int, count: int, reps: int) -> dict:
    from pyd4j.device.native import DEVICE_TO_HOST, HOST_TO_DEVICE, Agent

    total = size * count
    agent = Agent(total + (1 << 20), total + (1 << 20))
    try:
        bufs = [agent.alloc(size) for _ in range(count)]
        best_off = best_pre = float("inf")
        for r in range(reps + 1):  # first round warms up (page mapping, driver)
            t = time.perf_counter()
            for b in bufs:
                agent.offload(b, release=True)
            agent.synchronize()
            t_off = time.perf_counter() - t
            t = time.perf_counter()
            for b in bufs:
                agent.prefetch(b)
            agent.synchronize()
            t_pre = time.perf_counter() - t
            if r:
                best_off, best_pre = min(best_off, t_off), min(best_pre, t_pre)
        plain_d2h = min(agent.bench_plain_copy(size, DEVICE_TO_HOST, count) for _ in range(reps))
        plain_h2d = min(agent.bench_plain_copy(size, HOST_TO_DEVICE, count) for _ in range(reps))
    finally:
        agent.close()
    gbps = lambda s: total / s / 1e9  # noqa: E731
    return {
        "buffer_bytes": size,
        "buffers": count,
        "offload_GBps": gbps(best_off),
        "prefetch_GBps": gbps(best_pre),
        "plain_d2h_GBps": gbps(plain_d2h),
        "plain_h2d_GBps": gbps(plain_h2d),
        "offload_ratio": plain_d2h / best_off,
        "prefetch_ratio": plain_h2d / best_pre,
        "target_ratio": 0.8,
    }


# -- 2. overlap ---------------------------------------------------------------------------------
def overlap(size: int, count: int, gpu: bool) -> dict:
    from pyd4j.device.native import STREAM_COMPUTE, Agent

    agent = Agent(size * count + (1 << 20), size * count + (1 << 20))
    try:
        bufs = [agent.alloc(size) for _ in range(count)]
        agent.reset_stats()
        if gpu:
            import cupy as cp

            stream = cp.cuda.ExternalStream(agent.stream_handle(STREAM_COMPUTE))
            with stream:
                a = cp.random.random((4096, 4096), dtype=cp.float32)
                with agent.compute():
                    for b in bufs:
                        agent.offload(b, release=True)
                    for _ in range(40):
                        a = a @ a
                        a /= cp.abs(a).max() + 1
            stream.synchronize()
        else:
            import numpy as np

            a = np.random.default_rng(0).random((700, 700))
            with agent.compute():
                for b in bufs:
                    agent.offload(b, release=True)
                for _ in range(20):
                    a = a @ a
                    a /= abs(a).max() + 1
        agent.synchronize()
        s = agent.stats()
    finally:
        agent.close()
    return {
        "copy_busy_s": s["copy_busy_seconds"],
        "compute_s": s["compute_seconds"],
        "overlap_s": s["overlap_seconds"],
        "overlap_fraction_of_copies": s["overlap_seconds"] / s["copy_busy_seconds"] if s["copy_busy_seconds"] else 0.0,
    }


# -- 3. training under a budget ------------------------------------------------------------------
def network(gpu: bool):
    from pyd4j.sched import zoo

    if gpu:
        return zoo.small_resnet(batch=64, image=32, classes=10, blocks=6)
    return zoo.small_resnet(batch=8, image=16, blocks=3)


def train(backend_name: str, steps: int, gpu: bool) -> dict:
    import numpy as np

    from pyd4j.device.executor import execute, init_params, random_batch
    from pyd4j.sched.policies import make_plan
    from pyd4j.sched.simulator import simulate

    if backend_name == "cupy":
        from pyd4j.device.cupy_backend import CupyBackend as make
    else:
        from pyd4j.device.native import NativeBackend as make

    g = network(gpu)
    base_plan = make_plan(g, "baseline")
    base = simulate(base_plan)
    plan = make_plan(g, "superneurons")
    sim = simulate(plan)
    p_free = init_params(g)
    p_plan = {k: v.copy() for k, v in p_free.items()}
    t_free = t_plan = 0.0
    exact = True
    max_diff = 0.0
    measured_peak = 0
    high_water = 0
    for step in range(steps + 1):  # step 0 warms up kernels, not timed
        x, labels = random_batch(g, seed=step)
        b = make(budget_bytes=None)
        t = time.perf_counter()
        ref = execute(base_plan, b, x, labels, p_free)
        b.synchronize()
        dt_free = time.perf_counter() - t
        b.close()
        if backend_name == "cupy":  # the budget is on CuPy's pool bytes
            from pyd4j.commands.plan import cupy_budget

            b = make(budget_bytes=cupy_budget(sim.arena_peak_bytes))
        else:
            b = make(budget_bytes=sim.device_peak_bytes, arena_bytes=sim.arena_peak_bytes)
        t = time.perf_counter()
        run = execute(plan, b, x, labels, p_plan)
        b.synchronize()
        dt_plan = time.perf_counter() - t
        measured_peak = max(measured_peak, run.stats.peak_bytes)
        high_water = max(high_water, run.stats.arena_peak_bytes)
        b.close()
        for k in ref.grads:
            same = np.array_equal(ref.grads[k], run.grads[k]) and np.array_equal(ref.params[k], run.params[k])
            exact &= bool(same)
            max_diff = max(max_diff, float(np.max(np.abs(ref.grads[k] - run.grads[k]))))
        p_free, p_plan = ref.params, run.params
        if step:
            t_free += dt_free
            t_plan += dt_plan
        if left() < 60:
            log(f"{backend_name}: stopping after step {step}: time budget")
            steps = step
            break
    return {
        "network": g.name,
        "layers": len(g.layers),
        "batch": g.batch if hasattr(g, "batch") else None,
        "steps_timed": steps,
        "baseline_peak_bytes": base.device_peak_bytes,
        "budget_bytes": sim.device_peak_bytes,
        "planned_peak_bytes": sim.device_peak_bytes,
        "measured_peak_bytes": measured_peak,
        "arena_high_water_bytes": high_water,
        "simulated_arena_high_water_bytes": sim.arena_peak_bytes,
        "peak_ratio": measured_peak / sim.device_peak_bytes,
        "peak_target_ratio": 1.1,
        "bytes_offloaded_per_step": sim.bytes_offloaded,
        "bytes_prefetched_per_step": sim.bytes_prefetched,
        "grads_equal_unconstrained": exact,
        "max_abs_grad_diff": max_diff,
        "unconstrained_s_per_step": t_free / max(steps, 1),
        "planned_s_per_step": t_plan / max(steps, 1),
        "time_overhead": (t_plan / t_free - 1.0) if t_free else None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", action="store_true", help="run on the host build (no GPU needed)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None, help="JSON to write (default benchmarks/results/)")
    args = ap.parse_args()
    out_path = args.out or RESULTS / ("agent_host.json" if args.host else "agent_gpu.json")
    rec = Recorder("agent_gpu")
    result = rec.doc

    gpu = False
    if not args.host:
        gpu, what = gpu_present()
        result["gpu"] = what if gpu else None
        if not gpu:
            result["status"] = f"no GPU: {what}; nothing measured"
            rec.write(out_path, indent=2)
            print(f"no GPU ({what}): nothing measured; wrote {out_path}")
            return 0
    native_ok = True
    if gpu:
        try:
            os.environ["PYD4J_NATIVE_LIB"] = str(ensure_cuda_library())
        except (OSError, RuntimeError, subprocess.CalledProcessError) as e:
            native_ok = False
            result["native"] = f"CUDA build of native/ not made: {e}; the CuPy parts still run"
            log(result["native"])

    if native_ok:
        from pyd4j.device import native

        lib = native.load_library()
        result["library"] = lib.pyd4j_agent_build_kind().decode()
        if gpu and result["library"] != "cuda":
            raise SystemExit("the side-agent library is not the CUDA build; check nvcc and rerun")

        size, count = ((256 << 20), 8) if gpu else ((16 << 20), 4)
        log(f"bandwidth: {count} x {size >> 20} MiB")
        result["bandwidth"] = bandwidth(native, size, count, reps=3)
        log(json.dumps(result["bandwidth"]))
        log("overlap")
        result["overlap"] = overlap(size, count, gpu)
        log(json.dumps(result["overlap"]))
    result["training"] = {}
    for name in (["native", "cupy"] if gpu else ["native"]):
        if name == "native" and not native_ok:
            result["training"][name] = {"status": "skipped: no CUDA build"}
            continue
        if left() < 90:
            result["training"][name] = {"status": "skipped: time budget"}
            continue
        log(f"training under a budget: {name}")
        try:
            result["training"][name] = train(name, args.steps, gpu)
        except Exception as e:  # noqa: BLE001 - record and go on with the other backend
            result["training"][name] = {"status": f"failed: {type(e).__name__}: {e}"}
        log(json.dumps(result["training"][name]))
    result["status"] = "ok"
    result["seconds"] = time.monotonic() - T0
    rec.write(out_path, indent=2)
    print(f"wrote {out_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
