"""The Kafka sink with valueFormat protobuf: rows encoded as protobuf messages in the registry's
wire format, exactly once, read back by Confluent's deserializer (with the registered schema
compiled) and by our source; a row the message refuses goes to the dead letters under the
batch's decision, or fails the query."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.support import pg_util
from tests.support.kafka_sink import open_transactions, prefix_of, read_all, run
from tests.support.kafka_util import create_topic
from tests.support.pg_util import write_json_files
from tests.support.protobuf_util import compile_proto, spark_view

pytestmark = [pytest.mark.spark, pytest.mark.services]

VALUE = ("named_struct('id', id, 'v', v, 'n', CAST(id % 4 AS INT), 'tags', array(v, 'x'), "
         "'attrs', map('n', CAST(id AS INT)), 'at', timestamp_micros(id * 1000003 - 500000000), "
         "'maybe', IF(id % 3 = 0, NULL, id * 2), "
         "'inner', IF(id % 5 = 0, NULL, named_struct('f', CAST(id AS FLOAT), 'ok', id % 2 = 0)), "
         "'lines', array(named_struct('sku', v, 'q', CAST(id % 3 AS SMALLINT)))) AS value")


def _expected(i: int) -> dict:
    return {"id": i, "v": f"v{i}", "n": i % 4, "tags": [f"v{i}", "x"], "attrs": {"n": i},
            "at": dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=i * 1000003 - 500000000),
            "maybe": None if i % 3 == 0 else i * 2,
            "inner": None if i % 5 == 0 else {"f": float(i), "ok": i % 2 == 0},
            "lines": [{"sku": f"v{i}", "q": i % 3}]}


def _deserialized(services, topic: str, tmp_path, field: MessageField = MessageField.VALUE) -> list[dict]:
    """Every record through Confluent's deserializer, its message class compiled from the
    schema the sink registered."""
    subject = f"{topic}-{'value' if field == MessageField.VALUE else 'key'}"
    text = SchemaRegistryClient({"url": services.registry_url}).get_latest_version(subject).schema.schema_str
    assert text is not None
    pb = compile_proto(tmp_path, text, f"reg_{topic.replace('-', '_')}_{field.name.lower()}")
    de = ProtobufDeserializer(pb.topLevelRecord, {"use.deprecated.format": False})
    ctx = SerializationContext(topic, field)
    return [spark_view(de(m.value if field == MessageField.VALUE else m.key, ctx))
            for m in read_all(services.kafka_bootstrap, topic)]


def test_rows_written_as_protobuf_read_back_by_confluents_deserializer_and_our_source(spark, services,
                                                                                      tmp_path):
    topic = create_topic(services.kafka_bootstrap, 3, "protosink")
    write_json_files(tmp_path / "src", [200, 300, 7])
    q = run(spark, tmp_path / "src", tmp_path / "ckpt", services.kafka_bootstrap, topic,
            ("named_struct('account', CAST(id % 7 AS STRING)) AS key", VALUE), valueFormat="protobuf",
            keyFormat="protobuf", **{"schemaRegistry.url": services.registry_url})
    assert q.awaitTermination(180), "still running after 180 s"
    assert q.exception() is None, q.exception()
    got = sorted(_deserialized(services, topic, tmp_path), key=lambda d: d["id"])
    assert got == [_expected(i) for i in range(507)]  # each once, every field, nulls kept
    keys = _deserialized(services, topic, tmp_path, MessageField.KEY)
    assert sorted(k["account"] for k in keys) == sorted(str(i % 7) for i in range(507))
    assert open_transactions(services.kafka_bootstrap, prefix_of(tmp_path / "ckpt")) == []

    text = SchemaRegistryClient({"url": services.registry_url}).get_latest_version(f"{topic}-value").schema
    assert text.schema_type == "PROTOBUF"
    assert "optional int64 maybe = 7;" in (text.schema_str or "")  # .proto text, as Java's serializers send

    spark.conf.set("spark.sql.session.timeZone", "UTC")
    back = (spark.read.format("hzsource").option("connector", "kafka")
            .option("kafka.bootstrap.servers", services.kafka_bootstrap).option("subscribe", topic)
            .option("valueFormat", "protobuf").option("keyFormat", "protobuf")
            .option("schemaRegistry.url", services.registry_url).load()
            .select("key.account", "value.*").orderBy("id").collect())
    assert len(back) == 507
    for row in back:
        d = row.asDict(recursive=True)
        assert d == {"account": str(row.id % 7), **_expected(row.id), "attrs": {"n": row.id}}


SCHEMA = """syntax = "proto3";
package shop;
enum Kind { CARD = 0; BANK = 1; }
message Pay { int64 id = 1; Kind kind = 2; sint32 delta = 3; }
"""
ENUM_VALUE = ("named_struct('id', id, 'kind', IF(id % 50 = 7, 'CASH', IF(id % 2 = 0, 'CARD', 'BANK')), "
              "'delta', CAST(-id AS INT)) AS value")


def test_a_row_the_message_refuses_goes_to_the_dead_letters_with_the_batch(spark, services, tmp_path):
    """A given .proto: an enum name it lacks is a row error, decided with the good rows."""
    topic = create_topic(services.kafka_bootstrap, 2, "protoenum")
    dlq = pg_util.table_name("proto_dead")
    write_json_files(tmp_path / "src", [120, 80])
    q = run(spark, tmp_path / "src", tmp_path / "ckpt", services.kafka_bootstrap, topic, (ENUM_VALUE,),
            valueFormat="protobuf", valueSchema=SCHEMA, subjectNameStrategy="record", **{
                "schemaRegistry.url": services.registry_url, "deadLetter.connector": "jdbc",
                "deadLetter.url": services.postgres_url, "deadLetter.dbtable": dlq,
                "deadLetter.createTable": "true"})
    assert q.awaitTermination(180), "still running after 180 s"
    assert q.exception() is None, q.exception()
    pb = compile_proto(tmp_path, SCHEMA, "shop_pay")
    good = [pb.Pay.FromString(m.value[6:]) for m in read_all(services.kafka_bootstrap, topic)]
    assert sorted(m.id for m in good) == [i for i in range(200) if i % 50 != 7]
    assert all(m.delta == -m.id and m.kind == m.id % 2 for m in good)
    bad = pg_util.query(services.postgres_url, f"SELECT error_class, error_message, row FROM {dlq}")
    assert sorted(json.loads(r)["value"]["id"] for _, _, r in bad) == [i for i in range(200) if i % 50 == 7]
    assert {c for c, _, _ in bad} == {"SerializationError"}
    assert all("value.kind is not a name of the enum's values" in m for _, m, _ in bad)
    sr = SchemaRegistryClient({"url": services.registry_url})
    assert sr.get_latest_version("shop.Pay").schema.schema_str == SCHEMA  # the record strategy's subject


def test_without_dead_letters_a_refused_row_fails_the_query_and_nothing_is_committed(spark, services,
                                                                                     tmp_path):
    topic = create_topic(services.kafka_bootstrap, 1, "protoenumfail")
    write_json_files(tmp_path / "src", [60])
    df = spark.readStream.schema("id long, v string").json(str(tmp_path / "src"))
    q = (df.repartition(1).selectExpr(ENUM_VALUE).writeStream.format("hzsink").option("connector", "kafka")
         .option("kafka.bootstrap.servers", services.kafka_bootstrap).option("topic", topic)
         .option("valueFormat", "protobuf").option("valueSchema", SCHEMA)
         .option("schemaRegistry.url", services.registry_url)
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    refused = r"value\.kind is not a name of the enum's values \(schema id \d+, subject"
    with pytest.raises(Exception, match=refused):
        q.awaitTermination(180)
    assert read_all(services.kafka_bootstrap, topic) == []
    assert open_transactions(services.kafka_bootstrap, prefix_of(tmp_path / "ckpt")) == []


@pytest.mark.parametrize(("value", "opts", "error"), [
    ("named_struct('id', v) AS value", {"valueSchema": SCHEMA},
     r"value\.id is string, and the schema writes it as int64"),
    ("named_struct('id', id, 'extra', v) AS value", {"valueSchema": SCHEMA},
     r"value has field\(s\) \['extra'\], which message shop\.Pay has not"),
    ("named_struct('id', id) AS value", {"valueSchema": SCHEMA, "valueMessage": "Pay"},
     r"option 'valueMessage' is 'Pay', which the schema does not hold; it holds shop\.Pay"),
    ("named_struct('id', id, 'd', CAST(id AS DECIMAL(10, 2))) AS value", {},
     r"field 'd' is decimal\(10,2\), which has no protobuf type here: cast it"),
    ("CAST(id AS STRING) AS value", {}, r"a protobuf message is written from a struct column"),
])
def test_a_column_the_message_cannot_write_is_refused_at_start(spark, services, tmp_path, value, opts, error):
    topic = create_topic(services.kafka_bootstrap, 1, "protobadcol")
    write_json_files(tmp_path / "src", [5])
    q = run(spark, tmp_path / "src", tmp_path / "ckpt", services.kafka_bootstrap, topic, (value,),
            valueFormat="protobuf", **opts, **{"schemaRegistry.url": services.registry_url})
    with pytest.raises(Exception, match=error):
        q.awaitTermination(180)
    assert read_all(services.kafka_bootstrap, topic) == []
