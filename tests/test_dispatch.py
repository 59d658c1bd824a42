"""``hzsource`` / ``hzsink`` are found by Spark, dispatch on ``connector``, and reject bad
options on the driver at query start with a message naming the value and the choices."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.spark


def _read_error(spark, **options) -> str:
    reader = spark.readStream.format("hzsource")
    for k, v in options.items():
        reader = reader.option(k, v)
    with pytest.raises(Exception) as e:
        reader.load()
    return str(e.value)


def _write_error(spark, tmp_path, **options) -> str:
    """Start a streaming write and return the error it terminates with (driver side)."""
    writer = spark.readStream.format("rate").option("rowsPerSecond", 1).load().writeStream.format("hzsink")
    writer = writer.option("checkpointLocation", str(tmp_path / "ckpt"))
    for k, v in options.items():
        writer = writer.option(k, v)
    query = writer.start()
    try:
        with pytest.raises(Exception) as e:
            assert query.awaitTermination(120), "still running after 120 s"
        return str(e.value)
    finally:
        query.stop()


def _assert_no_executor_trace(msg: str) -> None:
    # The failure is raised while the driver builds the source/sink, before any task ran.
    assert "TaskSetManager" not in msg and "Lost task" not in msg


def test_unknown_source_connector_names_value_and_choices(spark):
    msg = _read_error(spark, connector="kafkaa")
    assert "UnknownConnectorError: unknown connector 'kafkaa' for hzsource (did you mean 'kafka'?)" in msg
    assert "valid connectors: jms, kafka" in msg
    _assert_no_executor_trace(msg)


def test_missing_source_connector_option(spark):
    msg = _read_error(spark)
    assert "MissingOptionError: hzsource needs option 'connector'" in msg
    assert "jms, kafka" in msg


def test_built_source_checks_its_options_at_load(spark):
    msg = _read_error(spark, connector="kafka")
    assert "MissingOptionError: hzsource connector 'kafka' needs option 'kafka.bootstrap.servers'" in msg
    _assert_no_executor_trace(msg)
    msg = _read_error(spark, connector="jms")
    assert "MissingOptionError: hzsource connector 'jms' needs option 'destination'" in msg


def test_register_registers_both_formats(spark):
    import spark_ext

    registered: list[str] = []

    class Recorder:  # stands in for spark.dataSource: what register() hands to Spark
        def register(self, cls) -> None:
            registered.append(cls.name())

    class Conf:  # no spark.sparkext.metrics.port: register starts no exporter
        def get(self, key: str, default: str | None = None) -> str | None:
            return default

    class Session:
        dataSource = Recorder()
        conf = Conf()

    spark_ext.register(Session())  # type: ignore[arg-type]
    assert registered == ["hzsource", "hzsink"]
    spark_ext.register(spark)  # and on a real session, idempotent next to the pyspark_* lookup
    msg = _read_error(spark, connector="nope")
    assert "unknown connector 'nope' for hzsource" in msg


def test_sink_as_source_is_a_clear_error(spark):
    with pytest.raises(Exception, match="'hzsink' is a sink; to read a stream use format\\('hzsource'\\)"):
        spark.readStream.format("hzsink").load()


def test_unknown_sink_connector(spark, tmp_path):
    msg = _write_error(spark, tmp_path, connector="postgres")
    assert ("UnknownConnectorError: unknown connector 'postgres' for hzsink; "
            "valid connectors: jdbc, jms, kafka") in msg
    _assert_no_executor_trace(msg)


def test_missing_sink_connector(spark, tmp_path):
    msg = _write_error(spark, tmp_path)
    assert "MissingOptionError: hzsink needs option 'connector'" in msg


def test_unknown_guarantee(spark, tmp_path):
    msg = _write_error(spark, tmp_path, connector="kafka", guarantee="exactly_twice")
    assert "UnknownGuaranteeError: unknown guarantee 'exactly_twice'" in msg
    assert "exactly_once, at_least_once, none" in msg
    _assert_no_executor_trace(msg)


def test_kafka_sink_checks_its_options_at_start(spark, tmp_path):
    msg = _write_error(spark, tmp_path, connector="kafka", guarantee="at_least_once")
    assert "MissingOptionError: hzsink connector 'kafka' needs option 'kafka.bootstrap.servers'" in msg
    _assert_no_executor_trace(msg)


def test_built_sink_checks_its_options_at_start(spark, tmp_path):
    msg = _write_error(spark, tmp_path, connector="jdbc", guarantee="at_least_once")
    assert "MissingOptionError: hzsink connector 'jdbc' needs option 'dbtable'" in msg
    _assert_no_executor_trace(msg)
