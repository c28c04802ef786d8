"""numpy <-> ND4J interop: zero-copy cost, copy bandwidth, gateway transfer bandwidth.

    .venv/bin/python benchmarks/interop.py [--max-mib 1024] [--out benchmarks/results/interop.json]

For float32 arrays of 1 MiB ... 1 GiB (powers of 4), in one run:

- zero_copy_s: from_numpy + to_numpy (no copy) round trip time; must not grow with size.
- copy: from_numpy(copy=True) and to_numpy(copy=True) bandwidth, each as a ratio to numpy's
  own np.copyto into a fresh np.empty array measured interleaved with it (the same allocation and
  first-touch work; like the copies, the result is freed outside the timed region), and to
  np.copyto into an already-touched array (pure memcpy).
- gateway get is also timed into a preallocated `out=` array (no fresh pages to fault in).
- gateway: put (numpy -> child JVM) and get (child JVM -> numpy) bandwidth in MB/s.

Each figure is the median of several repetitions, measurements interleaved with their baseline so
that load from other processes hits both alike. Figures, not assertions: see benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time

import numpy as np

import pyd4j.jvm
import pyd4j.nd as nd
from harness import RESULTS, Recorder
from pyd4j.jvm.gateway import Gateway
from pyd4j.memory.machine import probe

MiB = 1 << 20


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def java_gc() -> None:
    import jpype  # noqa: PLC0415

    gc.collect()
    jpype.JClass("java.lang.System").gc()


def reps_for(nbytes: int) -> int:
    return 11 if nbytes <= 16 * MiB else 7 if nbytes <= 256 * MiB else 3


def bench_in_process(a: np.ndarray) -> dict:
    reps = reps_for(a.nbytes)
    for _ in range(10):                                   # warm up the JIT and JPype's caches
        nd.to_numpy(nd.from_numpy(a))
    zero = [timed(lambda: nd.to_numpy(nd.from_numpy(a))) for _ in range(101)]
    copy_in_t, copy_out_t, fresh, fresh2, warm = [], [], [], [], []
    scratch = np.empty_like(a)
    np.copyto(scratch, a)
    for rep in range(reps + 1):                           # rep 0 warms up and is not counted
        box = {}

        def copy_in() -> None:
            box["x"] = nd.from_numpy(a, copy=True)

        def baseline() -> None:                           # the result is kept: it is freed untimed
            box["f"] = np.empty_like(a)
            np.copyto(box["f"], a)

        def copy_out() -> None:
            box["b"] = nd.to_numpy(box["x"], copy=True)

        def baseline2() -> None:
            box["g"] = np.empty_like(a)
            np.copyto(box["g"], a)

        # Alternate which goes first, so that whatever the allocator has at hand favours neither.
        order = (copy_in, baseline, copy_out, baseline2) if rep % 2 else (baseline, copy_in, baseline2, copy_out)
        t = {fn.__name__: timed(fn) for fn in order}
        t_warm = timed(lambda: np.copyto(scratch, a))
        del box
        java_gc()                                         # free this rep's arrays on both sides
        if rep:
            copy_in_t.append(t["copy_in"]), fresh.append(t["baseline"]), fresh2.append(t["baseline2"])
            copy_out_t.append(t["copy_out"]), warm.append(t_warm)
    del scratch
    java_gc()
    x = nd.from_numpy(a)
    assert nd.is_shared(a, x) and np.shares_memory(nd.to_numpy(x), a)
    assert np.array_equal(nd.to_numpy(nd.from_numpy(a, copy=True)), a)
    del x
    med = {k: statistics.median(v) for k, v in
           dict(zero=zero, copy_in=copy_in_t, copy_out=copy_out_t, fresh=fresh, fresh2=fresh2, warm=warm).items()}
    mbs = {k: a.nbytes / v / 1e6 for k, v in med.items()}
    return {
        "zero_copy_s": med["zero"],
        "copy_in_MBps": mbs["copy_in"],
        "copy_out_MBps": mbs["copy_out"],
        "numpy_copyto_fresh_MBps": mbs["fresh"],
        "numpy_copyto_fresh_2_MBps": mbs["fresh2"],
        "numpy_copyto_warm_MBps": mbs["warm"],
        "copy_in_ratio_vs_copyto_fresh": mbs["copy_in"] / mbs["fresh"],
        "copy_out_ratio_vs_copyto_fresh": mbs["copy_out"] / mbs["fresh2"],
        "copy_in_ratio_vs_copyto_warm": mbs["copy_in"] / mbs["warm"],
        "reps": reps,
    }


def bench_gateway(gw: Gateway, a: np.ndarray) -> dict:
    reps = reps_for(a.nbytes)
    put, get, get_into = [], [], []
    out = np.empty_like(a)
    for rep in range(reps + 1):                           # rep 0 warms up and is not counted
        box = {}
        t_put = timed(lambda: box.setdefault("x", gw.put(a)))
        x = box["x"]
        t_get = timed(lambda: box.setdefault("b", gw.get(x)))
        t_into = timed(lambda: gw.get(x, out=out))
        assert np.array_equal(box["b"], a) and np.array_equal(out, a)
        del x, box
        gc.collect()
        if rep:
            put.append(t_put), get.append(t_get), get_into.append(t_into)
    del out
    return {
        "put_MBps": a.nbytes / statistics.median(put) / 1e6,
        "get_MBps": a.nbytes / statistics.median(get) / 1e6,
        "get_into_MBps": a.nbytes / statistics.median(get_into) / 1e6,
        "reps": reps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-mib", type=int, default=1024, help="largest array in MiB (default 1024)")
    parser.add_argument("--out", default=str(RESULTS / "interop.json"))
    args = parser.parse_args()
    rec = Recorder("interop")
    sizes = [s for s in (1, 4, 16, 64, 256, 1024) if s <= args.max_mib]

    pyd4j.jvm.start(heap_max="1g", javacpp_maxbytes="4g")
    machine = probe()
    rng = np.random.default_rng(0)
    results = {"in_process": {}, "gateway": {}}
    with Gateway(heap_max="1g", javacpp_maxbytes=f"{max(sizes) * 2 + 512}m") as gw:
        for mib in sizes:
            a = rng.random(mib * MiB // 4, dtype=np.float32)
            results["in_process"][f"{mib}MiB"] = bench_in_process(a)
            results["gateway"][f"{mib}MiB"] = g = bench_gateway(gw, a)
            g["get_ratio_vs_numpy_copyto_fresh"] = g["get_MBps"] / results["in_process"][f"{mib}MiB"]["numpy_copyto_fresh_MBps"]
            print(f"{mib:5d} MiB  in-process {json.dumps(results['in_process'][f'{mib}MiB'], default=lambda v: round(v, 6))}"
                  f"\n           gateway {json.dumps(results['gateway'][f'{mib}MiB'], default=lambda v: round(v, 1))}",
                  flush=True)
            del a
            java_gc()

    first, last = f"{sizes[0]}MiB", f"{sizes[-1]}MiB"
    ip = results["in_process"]
    summary = {
        "zero_copy_largest_over_smallest": ip[last]["zero_copy_s"] / ip[first]["zero_copy_s"],
        "zero_copy_target": "largest within 3x of smallest",
        "copy_in_ratio_vs_copyto_fresh_min": min(r["copy_in_ratio_vs_copyto_fresh"] for r in ip.values()),
        "copy_out_ratio_vs_copyto_fresh_min": min(r["copy_out_ratio_vs_copyto_fresh"] for r in ip.values()),
        "copy_ratio_target": 0.7,
    }
    if "256MiB" in results["gateway"]:
        g = results["gateway"]["256MiB"]
        summary.update({"gateway_put_256MiB_MBps": g["put_MBps"], "gateway_get_256MiB_MBps": g["get_MBps"],
                        "gateway_get_into_256MiB_MBps": g["get_into_MBps"], "gateway_target_MBps": 1000})
    rec.doc.update({
        "dtype": "float32",
        "sizes_MiB": sizes,
        "probed": {"cpu_count": machine.cpu_count, "physical_bytes": machine.physical_bytes,
                   "cgroup_limit_bytes": machine.cgroup_limit_bytes, "numpy": np.__version__},
        "results": results,
        "summary": summary,
    })
    out = rec.write(args.out, indent=2)
    print(json.dumps(summary, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
