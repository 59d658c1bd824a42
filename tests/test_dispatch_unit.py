"""Sink dispatch logic without Spark: option checks run before the connector plans."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pyspark.sql.types import StructType

from spark_ext import registry
from spark_ext.commit import Claim, Committable, NoOpCommitter, SinkWriter
from spark_ext.connector import SinkConnector
from spark_ext.datasource import HzSink
from spark_ext.errors import MissingExtraError, UnknownOptionError, UnsupportedGuaranteeError
from spark_ext.guarantees import Guarantee
from spark_ext.options import Options, OptionSpec
from spark_ext.stream import ProtocolStreamWriter
from tests.support.fakes import NullWriter, RecordingTwoPhaseCommitter
from tests.support.processes import driver_report


class EchoSink(SinkConnector[str]):
    name = "echo"
    option_spec = OptionSpec(frozenset({"topic"}), prefixes=("kafka.",))
    guarantees: ClassVar[frozenset[Guarantee]] = frozenset({Guarantee.AT_LEAST_ONCE, Guarantee.NONE})
    default_guarantee = Guarantee.AT_LEAST_ONCE

    def configure(self, options: Options, schema: StructType, guarantee: Guarantee) -> str:
        return options.get_str("topic") or ""

    def new_writer(self, config: str, claim: Claim[object] | None) -> SinkWriter[Committable]:
        return NullWriter()

    def new_committer(self, config: str) -> NoOpCommitter:
        return NoOpCommitter()


@pytest.fixture
def echo(monkeypatch):
    monkeypatch.setitem(registry._extra[registry.SINKS], "echo", "tests.test_dispatch_unit:EchoSink")


def test_sink_returns_protocol_writer_with_the_default_guarantee(echo):
    w = HzSink({"connector": "Echo", "topic": "t"}).streamWriter(StructType(), False)
    assert isinstance(w, ProtocolStreamWriter)
    assert w.plan.guarantee is Guarantee.AT_LEAST_ONCE


def test_sink_rejects_unknown_option(echo):
    with pytest.raises(UnknownOptionError, match=r"'topc'.*did you mean 'topic'"):
        HzSink({"connector": "echo", "topc": "t"}).streamWriter(StructType(), False)


def test_sink_rejects_guarantee_it_cannot_give(echo):
    with pytest.raises(UnsupportedGuaranteeError,
                       match=r"cannot give guarantee 'exactly_once'.*at_least_once, none"):
        HzSink({"connector": "echo", "guarantee": "exactly_once"}).streamWriter(StructType(), False)


class _Calls:
    log: list[str] = []


class TxnCommitter(RecordingTwoPhaseCommitter):
    def take_over(self, adopt: Any = None) -> Claim[int]:
        _Calls.log.append("take_over")
        return Claim(7)


class TxnSink(EchoSink):
    guarantees = frozenset(Guarantee)

    def validate(self, config: str, schema: StructType) -> str:
        _Calls.log.append("validate")
        return config

    def new_writer(self, config: str, claim: Claim[object] | None) -> SinkWriter[Committable]:
        _Calls.log.append(f"writer claim={claim.fence if claim else None}")
        return NullWriter()

    def new_committer(self, config: str) -> NoOpCommitter | TxnCommitter:  # type: ignore[override]
        return TxnCommitter()


@pytest.mark.parametrize(("guarantee", "prepare", "expected"), [
    (Guarantee.EXACTLY_ONCE, True, ["validate", "take_over", "writer claim=7"]),
    (Guarantee.EXACTLY_ONCE, False, ["writer claim=None"]),  # the commit runner touches nothing
    (Guarantee.AT_LEAST_ONCE, True, ["validate", "writer claim=None"]),
])
def test_plan_template_runs_step_one_in_order(guarantee, prepare, expected):
    _Calls.log = []
    plan = TxnSink().plan(Options({"topic": "t"}, "hzsink"), StructType(), guarantee, prepare=prepare)
    plan.new_writer()
    assert _Calls.log == expected
    committer = plan.new_committer()
    assert isinstance(committer, TxnCommitter) == guarantee.transactional


def test_installed_connectors_are_found_through_entry_points():
    # declared in pyproject.toml; the core imports none of them
    assert {"kafka", "jms"} <= set(registry.available(registry.SOURCES))
    assert {"kafka", "jdbc"} <= set(registry.available(registry.SINKS))
    assert "jdbc" in registry.available(registry.DOCTORS)


def test_a_connector_whose_extra_is_missing_names_the_pip_command(monkeypatch):
    # the connector's module imports a client library this Python lacks
    monkeypatch.setitem(registry._extra[registry.SINKS], "queue",
                        "spark_ext_test_absent_client:Sink [postgres]")
    with pytest.raises(MissingExtraError) as e:
        registry.load(registry.SINKS, "queue", "hzsink")
    msg = str(e.value)
    assert "'spark_ext_test_absent_client'" in msg and "pip install 'spark-ext[postgres]'" in msg


def test_a_missing_module_of_our_own_is_not_blamed_on_an_extra(monkeypatch):
    monkeypatch.setitem(registry._extra[registry.SINKS], "broken", "spark_ext.no_such_module:Sink [kafka]")
    with pytest.raises(ModuleNotFoundError):
        registry.load(registry.SINKS, "broken", "hzsink")


def test_installed_connectors_name_their_extras():
    targets = {**registry.available(registry.SOURCES), **registry.available(registry.SINKS)}
    assert targets["kafka"].endswith("[kafka]") and targets["jdbc"].endswith("[postgres]")
    assert targets["jms"].endswith("[jms]")


def test_a_lazily_exported_connector_whose_extra_is_missing_names_the_pip_command(monkeypatch, tmp_path):
    # the package names its connector through lazy_exports: the client library is imported
    # by the attribute lookup, not by the package's import
    pkg = tmp_path / "spark_ext_test_lazy_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from spark_ext.registry import lazy_exports\n"
                                     "__getattr__ = lazy_exports(__name__, {'Sink': 'sink'})\n")
    (pkg / "sink.py").write_text("import spark_ext_test_absent_client\nSink = None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(registry._extra[registry.SINKS], "lazyq", "spark_ext_test_lazy_pkg:Sink [jms]")
    with pytest.raises(MissingExtraError, match=r"pip install 'spark-ext\[jms\]'"):
        registry.load(registry.SINKS, "lazyq", "hzsink")


@pytest.mark.parametrize("side, other", [
    ("spark_ext.connectors.kafka.source.reader", "spark_ext.connectors.kafka.sink"),
    ("spark_ext.connectors.kafka.sink.writer", "spark_ext.connectors.kafka.source"),
    ("spark_ext.connectors.jms.source", "spark_ext.connectors.jms.sink"),
    ("spark_ext.connectors.jms.sink.writer", "spark_ext.connectors.jms.source"),
])
def test_a_connectors_source_and_sink_are_imported_apart(side, other):
    # every Python worker Spark starts for a query imports what it runs: a reading worker
    # that also loaded the sink paid its imports (numpy, the transaction client) for nothing
    import subprocess
    import sys

    probe = f"import sys, {side}; print({other!r} in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, driver_report(out)
    assert out.stdout.strip() == "False", f"importing {side} imported {other}"


def test_the_kafka_sources_planning_imports_no_fetcher():
    # Spark starts a new Python process to plan each query's source: the fetchers' clients
    # (kafka-python, aiokafka: about 0.2 s of imports) load only where a task reads
    import subprocess
    import sys

    probe = ("import sys, spark_ext.connectors.kafka.source.reader; "
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'kafka', 'aiokafka'}))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, driver_report(out)
    assert out.stdout.strip() == "[]", f"planning the Kafka source imported {out.stdout.strip()}"


def _archive_with_connector(tmp_path: Path) -> Path:
    """A zip on ``sys.path`` holding a package and its distribution's entry point."""
    archive = tmp_path / "conn.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("spark_ext_test_zipconn/__init__.py", "class Sink:\n    pass\n")
        info = "spark_ext_test_zipconn-1.0.dist-info"
        z.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: spark-ext-test-zipconn\nVersion: 1.0\n")
        z.writestr(f"{info}/entry_points.txt", "[spark_ext.sinks]\nzipq = spark_ext_test_zipconn:Sink\n")
    return archive


@pytest.fixture
def fresh_registry():
    registry._installed.cache_clear()
    registry._installed_in_folders.cache_clear()
    yield
    registry._installed.cache_clear()
    registry._installed_in_folders.cache_clear()


def test_our_connectors_load_without_reading_the_archives_on_the_path(monkeypatch, tmp_path, fresh_registry):
    # Spark's Python processes start with pyspark.zip and the spark-core jar on sys.path;
    # reading their listings cost each query's planning process 0.1-0.2 s.
    archive = _archive_with_connector(tmp_path)
    monkeypatch.syspath_prepend(str(archive))
    opened: list[str] = []
    real_init = zipfile.ZipFile.__init__

    def spy(self, file, *a, **k):
        opened.append(str(file))
        real_init(self, file, *a, **k)

    monkeypatch.setattr(zipfile.ZipFile, "__init__", spy)
    from spark_ext.connectors.kafka import KafkaSource

    assert registry.load(registry.SOURCES, "kafka", "hzsource") is KafkaSource
    assert str(archive) not in opened


def test_a_connector_installed_in_an_archive_is_still_found(monkeypatch, tmp_path, fresh_registry):
    monkeypatch.syspath_prepend(str(_archive_with_connector(tmp_path)))
    assert registry.load(registry.SINKS, "zipq", "hzsink").__module__ == "spark_ext_test_zipconn"
    assert "zipq" in registry.available(registry.SINKS)
