"""`pyd4j doctor`: is this machine ready to run ND4J from Python, and on what?

It finds Java and pyd4j's classpath, starts ND4J in this process (JPype), runs a small matrix
product against numpy and a zero-copy numpy <-> ND4J round trip, and reports what ND4J runs on.
Exit status 0 when every check passes, 1 otherwise.

`--json` prints one JSON document on stdout (ND4J's own output, if any, goes to stderr) whose
keys are nested objects; a dotted name such as `java.version` means `doc["java"]["version"]`:

    ok                          bool: every check passed
    checks                      list of {name, ok, detail}
    java.version / .major / .path / .home
    classpath.found / .jars / .helper_jar / .nd4j_native_classifiers / .error
    nd4j.version                e.g. "1.0.0-M2.1" (from the nd4j-api jar on the classpath)
    nd4j.expected_version       the version pyd4j's Maven build pins
    nd4j.backend                "CPU" or "CUDA"
    nd4j.backend_class / .default_dtype / .omp_threads / .native_build_info / .optimal_cpu_build
    blas.vendor / .threads      e.g. "OPENBLAS"
    cpu.count / .features / .best_classifier
    memory.physical_bytes       physical RAM
    memory.cgroup_limit_bytes   this process's cgroup memory limit (null: none)
    memory.usable_bytes / .jvm_max_heap_bytes / .javacpp_max_bytes / .javacpp_max_physical_bytes
    gpu.count / .devices        [{name, memory_bytes}]
    interop.mmul_matches_numpy / .zero_copy
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from pyd4j.output import emit_json, human_bytes, print_table, stdout_to_stderr


def _check(checks: list[dict], name: str, ok: bool, detail: str) -> bool:
    checks.append({"name": name, "ok": bool(ok), "detail": detail})
    return bool(ok)


def diagnose() -> dict[str, Any]:
    """Everything `pyd4j doctor` reports, as one nested dict (see the module doc for keys)."""
    import numpy as np  # noqa: PLC0415

    import pyd4j.jvm  # noqa: PLC0415
    from pyd4j.memory import machine as machine_mod  # noqa: PLC0415

    checks: list[dict] = []
    doc: dict[str, Any] = {"ok": False, "checks": checks}

    machine = machine_mod.probe()
    doc["cpu"] = {"count": machine.cpu_count, "features": list(machine.cpu_features),
                  "best_classifier": machine.nd4j_classifier}
    doc["memory"] = {"physical_bytes": machine.physical_bytes, "cgroup_limit_bytes": machine.cgroup_limit_bytes,
                     "usable_bytes": machine.usable_bytes}
    doc["gpu"] = {"count": len(machine.gpus),
                  "devices": [{"name": g.name, "memory_bytes": g.memory_bytes} for g in machine.gpus]}

    try:
        java = pyd4j.jvm.find_java()
        doc["java"] = {"version": java.version, "major": java.major, "path": str(java.java), "home": str(java.home)}
        java_ok = _check(checks, "java", True, f"Java {java.version} at {java.java}")
    except pyd4j.jvm.JavaNotFoundError as err:
        doc["java"] = {"version": None, "error": str(err)}
        java_ok = _check(checks, "java", False, str(err))

    try:
        cp = pyd4j.jvm.classpath()
        classifiers = sorted({_classifier(j) for j in cp if _classifier(j)})
        doc["classpath"] = {"found": True, "jars": len(cp), "helper_jar": cp[0], "nd4j_native_classifiers": classifiers}
        cp_ok = _check(checks, "classpath", True, f"{len(cp)} jars; nd4j-native builds: {', '.join(classifiers) or 'none'}")
        if machine.nd4j_classifier not in classifiers:
            _check(checks, "cpu build", True,
                   f"warning: the best nd4j-native build for this CPU, {machine.nd4j_classifier}, is not on the "
                   f"classpath; run `make setup` to fetch it")
    except pyd4j.jvm.ClasspathError as err:
        doc["classpath"] = {"found": False, "error": str(err)}
        cp_ok = _check(checks, "classpath", False, str(err))

    doc["nd4j"] = {"version": None, "backend": None}
    doc["blas"] = {"vendor": None}
    doc["interop"] = {}
    if java_ok and cp_ok:
        try:
            with stdout_to_stderr():
                _probe_nd4j(doc, checks, np)
        except Exception as err:  # noqa: BLE001  (the doctor reports every failure as a check)
            _check(checks, "nd4j", False, f"{type(err).__name__}: {err}")

    doc["ok"] = all(c["ok"] for c in checks)
    return doc


def _classifier(jar: str) -> str | None:
    """'.../nd4j-native-1.0.0-M2.1-linux-x86_64-avx2.jar' -> 'linux-x86_64-avx2'."""
    name = os.path.basename(jar)
    if not name.startswith("nd4j-native-") or name.startswith(("nd4j-native-api", "nd4j-native-preset")):
        return None
    rest = name[len("nd4j-native-"):-len(".jar")]
    parts = rest.split("-", 3)  # 1.0.0, M2.1, linux, x86_64[-avx2]
    return "-".join(parts[2:]) if len(parts) > 2 else None


def _probe_nd4j(doc: dict, checks: list[dict], np) -> None:
    import pyd4j.jvm  # noqa: PLC0415
    import pyd4j.nd as nd  # noqa: PLC0415

    pyd4j.jvm.info()
    import jpype  # noqa: PLC0415

    with pyd4j.jvm.java_errors():
        facts = {str(k): str(v) for k, v in jpype.JClass("org.pyd4j.Nd4jInfo").describe().items()}
        product = np.array(list(jpype.JClass("org.pyd4j.Nd4jInfo").smokeMmul())).reshape(2, 2)
    version, expected = facts.get("nd4j.version"), facts.get("nd4j.built_against")
    doc["nd4j"] = {
        "version": version,
        "expected_version": expected,
        "backend": facts.get("nd4j.backend"),
        "backend_class": facts.get("nd4j.backend_class"),
        "default_dtype": facts.get("nd4j.default_dtype"),
        "omp_threads": _int(facts.get("omp.threads")),
        "native_build_info": facts.get("native.build_info"),
        "optimal_cpu_build": facts.get("native.optimal_requirements_met") == "true",
    }
    doc["blas"] = {"vendor": facts.get("blas.vendor"), "threads": _int(facts.get("blas.threads"))}
    doc["memory"].update({
        "jvm_max_heap_bytes": _int(facts.get("jvm.max_heap_bytes")),
        "javacpp_max_bytes": _int(facts.get("javacpp.max_bytes")),
        "javacpp_max_physical_bytes": _int(facts.get("javacpp.max_physical_bytes")),
    })
    _check(checks, "nd4j version", version == expected and version not in (None, "unknown"),
           f"ND4J {version} (pyd4j is built for {expected})")
    backend = facts.get("nd4j.backend")
    _check(checks, "nd4j backend", backend in ("CPU", "CUDA"),
           f"{backend} ({facts.get('nd4j.backend_class')}), BLAS {facts.get('blas.vendor')}")
    if facts.get("native.optimal_requirements_met") == "false":
        _check(checks, "cpu build", True, "warning: ND4J's native build does not use every feature of this CPU")

    a = np.arange(1, 7, dtype=np.float64).reshape(2, 3)
    b = np.arange(1, 7, dtype=np.float64).reshape(3, 2)
    mmul_ok = bool(np.allclose(product, a @ b))
    doc["interop"]["mmul_matches_numpy"] = mmul_ok
    _check(checks, "nd4j mmul", mmul_ok, f"ND4J 2x3 @ 3x2 = {product.tolist()} (numpy: {(a @ b).tolist()})")

    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = nd.from_numpy(data)
    x.addi(1.0)
    back = nd.to_numpy(x)
    zero_copy = bool(np.shares_memory(back, data) and np.array_equal(data, np.arange(1, 13).reshape(3, 4)))
    doc["interop"]["zero_copy"] = zero_copy
    _check(checks, "zero-copy", zero_copy, "numpy -> ND4J -> numpy shares memory; ND4J's addi seen by numpy")


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text not in (None, "") else None
    except ValueError:
        return None


@click.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="print one JSON document instead of tables")
def command(as_json: bool) -> None:
    """Check Java, the ND4J classpath, ND4J itself (version, backend, BLAS) and this machine."""
    doc = diagnose()
    if as_json:
        emit_json(doc)
    else:
        _print(doc)
    sys.exit(0 if doc["ok"] else 1)


def _print(doc: dict) -> None:
    nd4j, mem, cpu = doc["nd4j"], doc["memory"], doc["cpu"]
    java = doc.get("java", {})
    rows = [
        ("Java", f"{java.get('version')} ({java.get('path', '-')})"),
        ("Classpath", f"{doc['classpath'].get('jars', 0)} jars" if doc["classpath"].get("found") else "not found"),
        ("ND4J", f"{nd4j.get('version')} on {nd4j.get('backend')}"),
        ("BLAS", f"{doc['blas'].get('vendor')}, {doc['blas'].get('threads')} threads"),
        ("CPU", f"{cpu['count']} cores; {' '.join(cpu['features']) or '-'}; best build {cpu['best_classifier']}"),
        ("RAM", human_bytes(mem["physical_bytes"])),
        ("cgroup limit", human_bytes(mem["cgroup_limit_bytes"]) if mem["cgroup_limit_bytes"] else "none"),
        ("JVM heap max", human_bytes(mem.get("jvm_max_heap_bytes"))),
        ("JavaCPP maxbytes", human_bytes(mem.get("javacpp_max_bytes"))),
        ("GPU", ", ".join(f"{g['name']} ({human_bytes(g['memory_bytes'])})" for g in doc["gpu"]["devices"]) or "none"),
    ]
    print_table("pyd4j doctor", ["", "value"], rows)
    print_table("checks", ["check", "ok", "detail"],
                [(c["name"], "yes" if c["ok"] else "NO", c["detail"]) for c in doc["checks"]])
    print_table("overall", ["ok"], [("yes" if doc["ok"] else "NO",)])
