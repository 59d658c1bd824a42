"""The Kafka sink with valueFormat json-schema: rows written as JSON documents in the registry's
wire format, exactly once, read back (and validated against the registered schema) by
Confluent's JSONDeserializer and by our source; a row the schema refuses goes to the dead
letters under the batch's decision."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.support import pg_util
from tests.support.kafka_sink import open_transactions, prefix_of, read_all, run
from tests.support.kafka_util import create_topic
from tests.support.pg_util import write_json_files

pytestmark = [pytest.mark.spark, pytest.mark.services]

VALUE = ("named_struct('id', id, 'v', IF(id % 4 = 0, NULL, concat(v, '\"\\\\\\n', 'é')), "
         "'amount', CAST(id / 100 AS DECIMAL(12, 2)), 'f', CAST(id / 8 AS FLOAT), 'd', id / 3, "
         "'tags', array(v, IF(id % 2 = 0, NULL, 'x')), 'attrs', map('n', CAST(id AS INT)), "
         "'at', timestamp_micros(id * 1000003 - 500000000), "
         "'day', date_add(DATE'1969-12-25', CAST(id AS INT)), "
         "'inner', IF(id % 5 = 0, NULL, named_struct('ok', id % 2 = 0)), 'raw', unhex(hex(id))) AS value")


def _expected(i: int) -> dict:
    """The document Spark's to_json writes for row ``i`` (nulls left out), as JSON reads it."""
    at = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=i * 1000003 - 500000000)
    raw = bytes.fromhex(f"{i:X}".zfill(len(f"{i:X}") + len(f"{i:X}") % 2))
    d: dict = {"id": i, "v": f"v{i}\"\\\né", "amount": float(decimal.Decimal(i).scaleb(-2)), "f": i / 8,
               "d": i / 3, "tags": [f"v{i}", None if i % 2 == 0 else "x"], "attrs": {"n": i},
               "at": at.strftime("%Y-%m-%dT%H:%M:%S") + (f".{at.microsecond:06d}" if at.microsecond else "")
               + "Z",
               "day": (dt.date(1969, 12, 25) + dt.timedelta(days=i)).isoformat(), "inner": {"ok": i % 2 == 0},
               "raw": base64.b64encode(raw).decode()}
    if i % 4 == 0:
        del d["v"]
    if i % 5 == 0:
        del d["inner"]
    return d


def test_rows_written_as_json_read_back_by_confluents_deserializer_and_our_source(spark, services, tmp_path):
    topic = create_topic(services.kafka_bootstrap, 3, "jsonsink")
    write_json_files(tmp_path / "src", [200, 300, 7])
    q = run(spark, tmp_path / "src", tmp_path / "ckpt", services.kafka_bootstrap, topic, (VALUE,),
            valueFormat="json-schema", **{"schemaRegistry.url": services.registry_url})
    assert q.awaitTermination(180), "still running after 180 s"
    assert q.exception() is None, q.exception()
    registered = SchemaRegistryClient({"url": services.registry_url}).get_latest_version(f"{topic}-value")
    assert registered.schema.schema_type == "JSON"
    # Confluent's deserializer validates every document against the registered schema.
    de = JSONDeserializer(registered.schema.schema_str, conf={"validate": True})
    ctx = SerializationContext(topic, MessageField.VALUE)
    got = sorted((de(m.value, ctx) for m in read_all(services.kafka_bootstrap, topic)),
                 key=lambda d: d["id"])
    assert got == [_expected(i) for i in range(507)]  # each once, every field
    assert open_transactions(services.kafka_bootstrap, prefix_of(tmp_path / "ckpt")) == []

    # Our source reads the documents back (a second topic: it does not read maps yet).
    topic2 = create_topic(services.kafka_bootstrap, 3, "jsonsinkback")
    q = run(spark, tmp_path / "src", tmp_path / "ckpt2", services.kafka_bootstrap, topic2,
            (VALUE.replace("'attrs', map('n', CAST(id AS INT)), ", ""),), valueFormat="json-schema",
            **{"schemaRegistry.url": services.registry_url})
    assert q.awaitTermination(180), "still running after 180 s"
    assert q.exception() is None, q.exception()
    back = (spark.read.format("hzsource").option("connector", "kafka")
            .option("kafka.bootstrap.servers", services.kafka_bootstrap).option("subscribe", topic2)
            .option("valueFormat", "json-schema").option("schemaRegistry.url", services.registry_url).load()
            .select("value.id", "value.v", "value.d", "value.tags", "value.inner.ok", "value.at")
            .orderBy("id").collect())
    assert [tuple(r) for r in back] == [
        (i, None if i % 4 == 0 else f"v{i}\"\\\né", i / 3, [f"v{i}", None if i % 2 == 0 else "x"],
         None if i % 5 == 0 else i % 2 == 0, _expected(i)["at"]) for i in range(507)]


SCHEMA = json.dumps({"$schema": "http://json-schema.org/draft-07/schema#", "title": "jsonshop.Pay",
                     "type": "object", "properties": {"id": {"type": "integer"}, "kind": {"type": "string"}},
                     "required": ["id", "kind"], "additionalProperties": False})
REQUIRED_VALUE = "named_struct('id', id, 'kind', IF(id % 50 = 7, NULL, 'CARD')) AS value"


def test_a_row_the_schema_refuses_goes_to_the_dead_letters_with_the_batch(spark, services, tmp_path):
    """A given schema: a null where it requires the property is a row error, decided with the
    good rows."""
    topic = create_topic(services.kafka_bootstrap, 2, "jsonreq")
    dlq = pg_util.table_name("json_dead")
    write_json_files(tmp_path / "src", [120, 80])
    q = run(spark, tmp_path / "src", tmp_path / "ckpt", services.kafka_bootstrap, topic, (REQUIRED_VALUE,),
            valueFormat="json-schema", valueSchema=SCHEMA, subjectNameStrategy="record", **{
                "schemaRegistry.url": services.registry_url, "deadLetter.connector": "jdbc",
                "deadLetter.url": services.postgres_url, "deadLetter.dbtable": dlq,
                "deadLetter.createTable": "true"})
    assert q.awaitTermination(180), "still running after 180 s"
    assert q.exception() is None, q.exception()
    good = [json.loads(m.value[5:]) for m in read_all(services.kafka_bootstrap, topic)]
    assert sorted(d["id"] for d in good) == [i for i in range(200) if i % 50 != 7]
    assert all(d["kind"] == "CARD" for d in good)
    bad = pg_util.query(services.postgres_url, f"SELECT error_class, error_message, row FROM {dlq}")
    assert sorted(json.loads(r)["value"]["id"] for _, _, r in bad) == [i for i in range(200) if i % 50 == 7]
    assert {c for c, _, _ in bad} == {"SerializationError"}
    assert all("value.kind is null, and the schema requires it" in m for _, m, _ in bad)
    sr = SchemaRegistryClient({"url": services.registry_url})
    assert sr.get_latest_version("jsonshop.Pay").schema.schema_type == "JSON"  # the record strategy's subject


@pytest.mark.parametrize(("value", "opts", "error"), [
    ("named_struct('id', v, 'kind', v) AS value", {"valueSchema": SCHEMA},
     r"value\.id is string, and the schema writes it as integer"),
    ("named_struct('id', id, 'kind', v, 'extra', v) AS value", {"valueSchema": SCHEMA},
     r"value has field\(s\) \['extra'\], which the schema's object does not allow"),
    ("named_struct('id', id, 'i', INTERVAL '1' DAY) AS value", {},
     r"field 'i' is interval day, which has no JSON type here"),
    ("CAST(id AS STRING) AS value", {}, r"a JSON document is written from a struct column"),
])
def test_a_column_the_schema_cannot_write_is_refused_at_start(spark, services, tmp_path, value, opts, error):
    topic = create_topic(services.kafka_bootstrap, 1, "jsonbadcol")
    write_json_files(tmp_path / "src", [5])
    q = run(spark, tmp_path / "src", tmp_path / "ckpt", services.kafka_bootstrap, topic, (value,),
            valueFormat="json-schema", **opts, **{"schemaRegistry.url": services.registry_url})
    with pytest.raises(Exception, match=error):
        q.awaitTermination(180)
    assert read_all(services.kafka_bootstrap, topic) == []
