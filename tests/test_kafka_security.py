"""The Kafka source and sink on the broker's secured listeners (SASL_SSL with SCRAM and a
locally made CA, SASL_PLAINTEXT with PLAIN), in real Spark queries; what a user sees when
the credentials, the certificate or the mechanism are wrong."""

from __future__ import annotations

import dataclasses

import pytest

from spark_ext.connectors.kafka.source.config import KafkaSourceConfig
from spark_ext.options import Options
from tests.support.kafka_sink import consume, end_offsets, open_transactions, prefix_of, run
from tests.support.kafka_source import run_available_now
from tests.support.kafka_util import create_topic, numbered, produce
from tests.support.listeners import Listener
from tests.support.pg_util import write_json_files

pytestmark = [pytest.mark.spark, pytest.mark.services]


def source(spark, lis: Listener, topic: str, **opts: str):
    r = (spark.readStream.format("hzsource").option("connector", "kafka")
         .option("kafka.bootstrap.servers", lis.bootstrap).option("subscribe", topic)
         .option("startingOffsets", "earliest"))
    for k, v in {**lis.spark_options(), **opts}.items():
        r = r.option(k, v)
    return r.load()


def test_the_source_reads_every_record_once_through_the_wire_fetcher_on_sasl_ssl(spark, services, sasl_ssl,
                                                                                 tmp_path):
    topic = create_topic(services.kafka_bootstrap, 4, "sec-src")
    produce(services.kafka_bootstrap, topic, numbered(4, 3000))
    cfg = KafkaSourceConfig.parse(Options({"kafka.bootstrap.servers": sasl_ssl.bootstrap, "subscribe": topic,
                                           **sasl_ssl.spark_options()}, "hzsource"))
    assert cfg.fetcher == "wire" and cfg.security.protocol == "SASL_SSL"  # fetcher=auto picks the fast path
    run_available_now(source(spark, sasl_ssl, topic, maxOffsetsPerTrigger="1000"), "sec_src", tmp_path / "c")
    got = sorted(r.value for r in spark.table("sec_src").collect())
    assert got == sorted(f"v-{i}".encode() for i in range(3000))  # every record, once


def test_plain_over_sasl_plaintext_from_source_to_exactly_once_sink(spark, services, sasl_plaintext,
                                                                   tmp_path):
    """Both connectors with SASL PLAIN; read back by kafka-python with the same credentials."""
    src = create_topic(services.kafka_bootstrap, 2, "plain-in")
    dst = create_topic(services.kafka_bootstrap, 2, "plain-out")
    produce(services.kafka_bootstrap, src, numbered(2, 500))
    df = source(spark, sasl_plaintext, src).selectExpr("key", "value")
    w = (df.writeStream.format("hzsink").option("connector", "kafka")
         .option("kafka.bootstrap.servers", sasl_plaintext.bootstrap).option("topic", dst)
         .option("checkpointLocation", str(tmp_path / "c")).trigger(availableNow=True))
    for k, v in sasl_plaintext.spark_options().items():
        w = w.option(k, v)
    q = w.start()
    assert q.awaitTermination(180), "still running after 180 s"
    assert q.exception() is None, q.exception()
    got = sorted(v for _, _, v in consume(sasl_plaintext, dst))
    assert got == sorted(f"v-{i}".encode() for i in range(500))
    assert open_transactions(sasl_plaintext, prefix_of(tmp_path / "c")) == []


WRONG_PASSWORD = "not-the-password-8d1f"


def _broken(lis: Listener, how: str) -> tuple[Listener, str]:
    """A listener with one thing wrong, and what the error must say."""
    if how == "password":
        return dataclasses.replace(lis, password=WRONG_PASSWORD), "refused the credentials"
    if how == "certificate":
        return dataclasses.replace(lis, ca_file=None), "is not trusted"  # the system CAs never signed it
    return dataclasses.replace(lis, mechanism="PLAIN"), "does not offer SASL mechanism PLAIN"


@pytest.mark.parametrize("how", ["password", "certificate", "mechanism"])
def test_sink_with_wrong_security_fails_at_start_writes_nothing_and_hides_the_password(
        spark, services, sasl_ssl, tmp_path, how):
    bad, expected = _broken(sasl_ssl, how)
    topic = create_topic(services.kafka_bootstrap, 1, "sec-bad")
    write_json_files(tmp_path / "src", [5])
    q = run(spark, tmp_path / "src", tmp_path / "ckpt", bad.bootstrap, topic, extra=bad.spark_options())
    with pytest.raises(Exception) as info:
        assert q.awaitTermination(120), "still running after 120 s"
    msg = str(info.value)
    assert expected in msg, msg[-3000:]
    assert WRONG_PASSWORD not in msg and str(sasl_ssl.password) not in msg
    assert end_offsets(services.kafka_bootstrap, topic) == 0


@pytest.mark.parametrize("how", ["password", "certificate", "mechanism"])
def test_source_with_wrong_security_fails_at_start_and_hides_the_password(spark, services, sasl_ssl, tmp_path,
                                                                          how):
    bad, expected = _broken(sasl_ssl, how)
    topic = create_topic(services.kafka_bootstrap, 1, "sec-bad-src")
    produce(services.kafka_bootstrap, topic, numbered(1, 5))
    q = source(spark, bad, topic).writeStream.format("noop").option(
        "checkpointLocation", str(tmp_path / "c")).start()
    with pytest.raises(Exception) as info:
        assert q.awaitTermination(120), "still running after 120 s"
    msg = str(info.value)
    assert expected in msg, msg[-3000:]
    assert WRONG_PASSWORD not in msg and str(sasl_ssl.password) not in msg


def test_the_doctor_reads_the_secured_settings_from_a_command_config_file(services, sasl_ssl, tmp_path,
                                                                          capsys):
    from spark_ext.connectors.kafka import doctor
    from tests.support.kafka_sink import prepare_batch, sink_plan

    topic = create_topic(services.kafka_bootstrap, 1, "sec-doc")
    prefix = f"doctor-{topic}"
    prepare_batch(sink_plan(sasl_ssl.bootstrap, topic, prefix, listener=sasl_ssl), 0, ["x"])  # left open
    props = tmp_path / "client.properties"
    props.write_text("".join(f"{k[len('kafka.'):]}={v}\n" for k, v in sasl_ssl.spark_options().items()))
    args = ["--bootstrap", sasl_ssl.bootstrap, "--prefix", prefix, "--topic", topic,
            "--command-config", str(props)]
    assert doctor.main(["list", *args]) == 0
    assert "1 open transaction(s)" in capsys.readouterr().out
    assert doctor.main(["resolve", *args, "--watch", "0.5"]) == 0
    assert open_transactions(sasl_ssl, prefix) == []
