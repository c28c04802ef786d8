"""ND4J's factory class, once the JVM is up: what every workspace operation starts from."""

from __future__ import annotations

from typing import Any

import pyd4j.jvm


def nd4j() -> Any:
    import jpype  # noqa: PLC0415

    pyd4j.jvm.info()
    return jpype.JClass("org.nd4j.linalg.factory.Nd4j")
