"""The Java side of the planned-training tests lives in the fixtures jar (built by `make setup`)."""

from __future__ import annotations

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
FIXTURES_JAR = PROJECT_ROOT / "tests" / "fixtures" / "java" / "target" / "pyd4j-fixtures.jar"
NETWORKS = PROJECT_ROOT / "examples" / "networks"
