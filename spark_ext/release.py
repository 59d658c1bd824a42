"""This release: its version, and the JVM companion jar of the same version (the windows'
fold). ``pyproject.toml`` and ``jvm/pom.xml`` carry the same version; a test checks them."""

from __future__ import annotations

from pathlib import Path

VERSION = "0.1.0"
GROUP = "dev.sparkext"
ARTIFACT = "spark-ext-native_2.13"


def coordinate() -> str:
    """The jar's Maven coordinate for ``spark-submit --packages``."""
    return f"{GROUP}:{ARTIFACT}:{VERSION}"


def jar_path() -> Path:
    """Where the wheel ships the jar (built into the source tree by ``make jvm``)."""
    return Path(__file__).resolve().parent / "jars" / f"{ARTIFACT}-{VERSION}.jar"
