"""The Kafka sink with valueFormat avro: rows encoded in the registry's wire format, exactly
once, read back by Confluent's deserializer and by our source; a row the writer schema
refuses goes to the dead letters under the batch's decision, or fails the query."""

from __future__ import annotations

import datetime as dt
import decimal
import json

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.support import pg_util
from tests.support.kafka_sink import open_transactions, prefix_of, read_all, run
from tests.support.kafka_util import create_topic
from tests.support.pg_util import write_json_files

pytestmark = [pytest.mark.spark, pytest.mark.services]

VALUE = ("named_struct('id', id, 'v', v, 'amount', CAST(id / 100 AS DECIMAL(12, 2)), "
         "'tags', array(v, 'x'), 'attrs', map('n', CAST(id AS INT)), 'at', timestamp_millis(id * 1000 + 7), "
         "'maybe', IF(id % 3 = 0, NULL, id * 2), 'inner', named_struct('f', CAST(id AS FLOAT), "
         "'ok', id % 2 = 0)) AS value")


def _expected(i: int) -> dict:
    return {"id": i, "v": f"v{i}", "amount": decimal.Decimal(i).scaleb(-2), "tags": [f"v{i}", "x"],
            "attrs": {"n": i}, "at": dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
            + dt.timedelta(milliseconds=i * 1000 + 7), "maybe": None if i % 3 == 0 else i * 2,
            "inner": {"f": float(i), "ok": i % 2 == 0}}


def _deserialized(services, topic: str, field: MessageField = MessageField.VALUE) -> list[dict]:
    de = AvroDeserializer(SchemaRegistryClient({"url": services.registry_url}))
    ctx = SerializationContext(topic, field)
    return [de(m.value if field == MessageField.VALUE else m.key, ctx)
            for m in read_all(services.kafka_bootstrap, topic)]


def test_rows_written_as_avro_read_back_by_confluents_deserializer_and_our_source(spark, services, tmp_path):
    topic = create_topic(services.kafka_bootstrap, 3, "avrosink")
    write_json_files(tmp_path / "src", [200, 300, 7])
    q = run(spark, tmp_path / "src", tmp_path / "ckpt", services.kafka_bootstrap, topic,
            ("named_struct('account', CAST(id % 7 AS STRING)) AS key", VALUE), valueFormat="avro",
            keyFormat="avro", **{"schemaRegistry.url": services.registry_url})
    assert q.awaitTermination(180), "still running after 180 s"
    assert q.exception() is None, q.exception()
    got = sorted(_deserialized(services, topic), key=lambda d: d["id"])
    assert got == [_expected(i) for i in range(507)]  # each once, every field
    keys = _deserialized(services, topic, MessageField.KEY)
    assert sorted(k["account"] for k in keys) == sorted(str(i % 7) for i in range(507))
    assert open_transactions(services.kafka_bootstrap, prefix_of(tmp_path / "ckpt")) == []

    registered = SchemaRegistryClient({"url": services.registry_url}).get_latest_version(f"{topic}-value")
    fields = {f["name"]: f["type"] for f in json.loads(registered.schema.schema_str or "")["fields"]}
    assert fields["maybe"] == ["null", "long"]  # nullable: Confluent's optional-field shape

    spark.conf.set("spark.sql.session.timeZone", "UTC")
    back = (spark.read.format("hzsource").option("connector", "kafka")
            .option("kafka.bootstrap.servers", services.kafka_bootstrap).option("subscribe", topic)
            .option("valueFormat", "avro").option("keyFormat", "avro")
            .option("schemaRegistry.url", services.registry_url).load()
            .select("key.account", "value.*").orderBy("id").collect())
    assert len(back) == 507
    for row in back[:40]:
        want = _expected(row.id)
        d = row.asDict(recursive=True)
        assert d == {"account": str(row.id % 7), **want, "at": want["at"].replace(tzinfo=None)}


ENUM_SCHEMA = json.dumps({"type": "record", "name": "Pay", "fields": [
    {"name": "id", "type": "long"},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["CARD", "BANK"]}}]})
ENUM_VALUE = ("named_struct('id', id, 'kind', IF(id % 50 = 7, 'CASH', IF(id % 2 = 0, 'CARD', 'BANK'))) "
              "AS value")


def test_a_row_the_schema_refuses_goes_to_the_dead_letters_with_the_batch(spark, services, tmp_path):
    """Exactly-once dead letters are decided with the good rows in PostgreSQL."""
    topic = create_topic(services.kafka_bootstrap, 2, "avroenum")
    dlq = pg_util.table_name("avro_dead")
    write_json_files(tmp_path / "src", [120, 80])
    q = run(spark, tmp_path / "src", tmp_path / "ckpt", services.kafka_bootstrap, topic, (ENUM_VALUE,),
            valueFormat="avro", valueSchema=ENUM_SCHEMA, **{
                "schemaRegistry.url": services.registry_url, "deadLetter.connector": "jdbc",
                "deadLetter.url": services.postgres_url, "deadLetter.dbtable": dlq,
                "deadLetter.createTable": "true"})
    assert q.awaitTermination(180), "still running after 180 s"
    assert q.exception() is None, q.exception()
    good = sorted(d["id"] for d in _deserialized(services, topic))
    bad = pg_util.query(services.postgres_url, f"SELECT error_class, error_message, row FROM {dlq}")
    refused = sorted(json.loads(r)["value"]["id"] for _, _, r in bad)
    assert refused == [i for i in range(200) if i % 50 == 7]  # each once
    assert good == [i for i in range(200) if i % 50 != 7]
    assert {c for c, _, _ in bad} == {"SerializationError"}
    assert all("value.kind is not one of the enum's symbols" in m for _, m, _ in bad)


def test_without_dead_letters_a_refused_row_fails_the_query_and_nothing_is_committed(spark, services,
                                                                                     tmp_path):
    """One task, so the failing task's own abort is the batch's whole story: with several, a
    task still writing when the job fails can open its transaction after the driver aborted
    the sink's, and it stays open until the query's next start fences it."""
    topic = create_topic(services.kafka_bootstrap, 1, "avroenumfail")
    write_json_files(tmp_path / "src", [60])
    df = spark.readStream.schema("id long, v string").json(str(tmp_path / "src"))
    q = (df.repartition(1).selectExpr(ENUM_VALUE).writeStream.format("hzsink").option("connector", "kafka")
         .option("kafka.bootstrap.servers", services.kafka_bootstrap).option("topic", topic)
         .option("valueFormat", "avro").option("valueSchema", ENUM_SCHEMA)
         .option("schemaRegistry.url", services.registry_url)
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    refused = r"value\.kind is not one of the enum's symbols \(schema id \d+, subject"
    with pytest.raises(Exception, match=refused):
        q.awaitTermination(180)
    assert read_all(services.kafka_bootstrap, topic) == []
    assert open_transactions(services.kafka_bootstrap, prefix_of(tmp_path / "ckpt")) == []


def test_a_column_the_schema_cannot_write_is_refused_at_start(spark, services, tmp_path):
    topic = create_topic(services.kafka_bootstrap, 1, "avrobadcol")
    write_json_files(tmp_path / "src", [5])
    q = run(spark, tmp_path / "src", tmp_path / "ckpt", services.kafka_bootstrap, topic,
            ("named_struct('id', v) AS value",), valueFormat="avro", valueSchema=ENUM_SCHEMA,
            **{"schemaRegistry.url": services.registry_url})
    with pytest.raises(Exception, match=r"value\.id is string, and the schema writes it as long"):
        q.awaitTermination(180)
