"""Shared fixtures. One in-process JVM per test session (JPype cannot restart one)."""

from __future__ import annotations

import shutil

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
