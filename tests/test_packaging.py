"""What the package ships: every third-party import is declared in pyproject.toml (a wheel install
brings it), and the agent jar carries ASM relocated inside it, never as is on a job's classpath."""

from __future__ import annotations

import re
import sys
import tomllib
import zipfile
from pathlib import Path

import grimp

from pyd4j.jvm.classpath import HELPER_JAR, JAVA_TARGET

ROOT = Path(__file__).resolve().parents[1]
# import name -> distribution name, where they differ
DISTRIBUTION = {"jpype": "jpype1", "yaml": "PyYAML", "cupy": "cupy-cuda13x", "prometheus_client": "prometheus-client"}
NOT_PYTHON = {"org"}  # `from org.deeplearning4j import ...`: Java packages through JPype's import hook


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = [*project["dependencies"], *(s for extra in project["optional-dependencies"].values() for s in extra)]
    return {re.split(r"[<>=!~\[; ]", s, maxsplit=1)[0].lower() for s in specs}


def test_every_third_party_import_is_declared():
    graph = grimp.build_graph("pyd4j", include_external_packages=True)
    third_party = {m for m in graph.modules if "." not in m and m != "pyd4j"} - set(sys.stdlib_module_names) - NOT_PYTHON
    missing = sorted(m for m in third_party if DISTRIBUTION.get(m, m).lower() not in _declared())
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"
    assert "scipy" in third_party  # the leak check's trend, which a wheel install once lacked


def test_asm_is_relocated_inside_the_agent_jar():
    with zipfile.ZipFile(HELPER_JAR) as jar:
        names = jar.namelist()
        manifest = jar.read("META-INF/MANIFEST.MF").decode()
    assert any(n.startswith("org/pyd4j/shaded/asm/ClassVisitor") for n in names)
    assert not [n for n in names if n.startswith("org/objectweb/")], "unrelocated ASM in the agent jar"
    assert "Class-Path" not in manifest and "Premain-Class: org.pyd4j.agent.Agent" in manifest
    assert not list((JAVA_TARGET / "lib").glob("asm-*.jar")), "ASM as is in the runtime classpath"
