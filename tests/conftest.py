"""Shared fixtures. One in-process JVM per test session (JPype cannot restart one)."""

from __future__ import annotations

import shutil
import sys

import pytest


def _has_nvidia_gpu() -> bool:
    return shutil.which("nvidia-smi") is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _has_nvidia_gpu():
        return
    skip_gpu = pytest.mark.skip(reason="needs an NVIDIA GPU (none found on this machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


# The options of the one in-process JVM every `jvm` test shares. Tests that need other options
# start a child process (see tests/jvm/test_start.py).
SESSION_JVM_OPTIONS = dict(heap_max="2g", javacpp_maxbytes="6g")


@pytest.fixture(scope="session")
def jvm():
    """The session's in-process JVM with real ND4J (built by `make setup`)."""
    import pyd4j.jvm

    return pyd4j.jvm.start(**SESSION_JVM_OPTIONS)


# Hypothesis: no per-example deadline anywhere (a loaded machine runs examples slowly; a test must
# not fail for that), and statistics for the examples run (`pytest --hypothesis-show-statistics`).
from hypothesis import settings  # noqa: E402

settings.register_profile("pyd4j", deadline=None)
settings.load_profile("pyd4j")


def pytest_terminal_summary(terminalreporter) -> None:
    """The CLI corpus's count of bad inputs and clean errors (tests/test_cli_corpus.py)."""
    for name, module in list(sys.modules.items()):
        results = getattr(module, "RESULTS", None) if name.endswith("test_cli_corpus") else None
        if results:
            terminalreporter.write_line(f"CLI corpus: {len(results)} bad inputs run, "
                                        f"{sum(results.values())} ended as clean errors")
