"""``pip install .`` ships what Spark's data source lookup needs."""

from __future__ import annotations

import re
import zipfile

from packaging.specifiers import SpecifierSet

from spark_ext import compat
from spark_ext import release as native
from tests.support.wheel import ROOT, build_wheel


def test_wheel_contains_entry_modules_and_packages(tmp_path):
    wheel = build_wheel(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    # Spark imports top-level pyspark_* modules exposing DefaultSource.
    assert {"pyspark_hzsource.py", "pyspark_hzsink.py"} <= names
    assert {"spark_ext/commit.py", "spark_ext/datasource.py", "spark_ext/connectors/__init__.py",
            "spark_ext/connectors/kafka/__init__.py"} <= names
    # the JVM companion jar, at the path Python adds to the session's jars
    assert f"spark_ext/jars/{native.jar_path().name}" in names
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert top == {"spark_ext", "pyspark_hzsource.py", "pyspark_hzsink.py"}
    meta = next(n for n in names if n.endswith("METADATA"))
    text = zipfile.ZipFile(wheel).read(meta).decode()
    assert "Name: spark-ext" in text
    # every supported PySpark release, none outside them (spark_ext/compat.py SUPPORTED)
    (pin,) = [SpecifierSet(line.split("pyspark", 1)[1].strip()) for line in text.splitlines()
              if line.startswith("Requires-Dist: pyspark") and "extra ==" not in line]
    assert all(pin.contains(f"{release}.0") for release in compat.SUPPORTED), pin
    assert not pin.contains("3.5.9") and not pin.contains("5.0.0"), pin
    assert "Requires-Python: >=3.11" in text
    # the core's own dependencies; each connector's clients only with its extra
    requires = [line.split(": ", 1)[1] for line in text.splitlines() if line.startswith("Requires-Dist:")]
    core = sorted(re.split(r"[<>=!~; ]", r)[0] for r in requires if "extra ==" not in r)
    assert core == ["mmh3", "pandas", "pyarrow", "pyspark", "rich"]
    for extra, client in (("kafka", "kafka-python"), ("postgres", "psycopg2-binary"), ("jms", "stomp.py")):
        assert f'{client}' in next(line for line in text.splitlines()
                                    if line.startswith(f"Requires-Dist: {client}")
                                    and f'extra == "{extra}"' in line)


def test_entry_modules_expose_the_two_formats():
    import pyspark_hzsink
    import pyspark_hzsource

    assert pyspark_hzsource.DefaultSource.name() == "hzsource"
    assert pyspark_hzsink.DefaultSource.name() == "hzsink"


def test_jvm_artifact_version_is_the_package_version():
    """``--packages dev.sparkext:spark-ext-native_2.13:<version>`` names the jar of this release."""
    import tomllib
    import xml.etree.ElementTree as ET

    from spark_ext import __version__

    pom = ET.parse(ROOT / "jvm" / "pom.xml").getroot()
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    assert pom.findtext("m:groupId", namespaces=ns) == native.GROUP
    assert pom.findtext("m:artifactId", namespaces=ns) == native.ARTIFACT
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert pom.findtext("m:version", namespaces=ns) == version == __version__
    assert native.coordinate() == f"dev.sparkext:spark-ext-native_2.13:{version}"
    assert native.jar_path().name == f"spark-ext-native_2.13-{version}.jar"
