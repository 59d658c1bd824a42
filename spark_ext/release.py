"""This release: its version, and the JVM companion jar of the same version (the windows'
fold, and the metrics listener a job turns on from configuration alone). ``pyproject.toml``
and ``jvm/pom.xml`` carry the same version; a test checks them."""

from __future__ import annotations

from pathlib import Path

VERSION = "0.1.0"
#: Each release and the commit of this repository it was cut from: the upgrade test builds
#: each one's wheel from the history and finishes its in-flight batches with today's code.
RELEASES = {"0.1.0": "d8c0c27232adf4181a72b862ccc3d1797fdbe814"}
GROUP = "dev.sparkext"
ARTIFACT = "spark-ext-native_2.13"


def coordinate() -> str:
    """The jar's Maven coordinate for ``spark-submit --packages``."""
    return f"{GROUP}:{ARTIFACT}:{VERSION}"


def jar_path() -> Path:
    """Where the wheel ships the jar (built into the source tree by ``make jvm``)."""
    return Path(__file__).resolve().parent / "jars" / f"{ARTIFACT}-{VERSION}.jar"
