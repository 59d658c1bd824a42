"""valueFormat json-schema: documents produced by Confluent's JSONSerializer through the real
schema registry read by our source as Confluent's JSONDeserializer reads them."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.support.kafka_util import create_topic

pytestmark = [pytest.mark.spark, pytest.mark.services]

V1: dict = {"$schema": "http://json-schema.org/draft-07/schema#", "title": "Payment", "type": "object",
      "properties": {
          "id": {"type": "integer"}, "amount": {"type": "number"}, "note": {"type": ["null", "string"]},
          "tags": {"type": "array", "items": {"type": "string"}},
          "card": {"$ref": "#/definitions/Card"}, "ok": {"type": "boolean"}},
      "required": ["id", "amount"], "additionalProperties": False,
      "definitions": {"Card": {"type": "object", "properties": {"last4": {"type": "string"},
                                                                "expiry": {"type": "integer"}}}}}
# An optional property added to a closed content model: BACKWARD compatible (v1's documents lack it).
V2 = {**V1, "properties": {**V1["properties"], "channel": {"type": "string"}}}


def _doc(i: int, v2: bool) -> dict:
    d: dict = {"id": i, "amount": i * 1.25, "note": None if i % 3 else f"n{i}",
               "tags": [f"t{j}" for j in range(i % 3)]}
    if i % 4:
        d["card"] = {"last4": f"{i:04d}", "expiry": 2030 + i % 5}
    if i % 2:
        d["ok"] = i % 5 == 0
    if v2:
        d["channel"] = "app" if i % 2 else "web"
    return d


def _produce(services, topic: str, schema: dict, docs: list[dict]) -> None:
    sr = SchemaRegistryClient({"url": services.registry_url})
    ser = JSONSerializer(json.dumps(schema), sr)
    ctx = SerializationContext(topic, MessageField.VALUE)
    p = Producer({"bootstrap.servers": services.kafka_bootstrap})
    for d in docs:
        p.produce(topic, value=ser(d, ctx), partition=0)
    assert p.flush(30) == 0


def _norm(x):
    if hasattr(x, "asDict"):
        return {k: _norm(v) for k, v in x.asDict().items()}
    if isinstance(x, list):
        return [_norm(v) for v in x]
    return x


def test_two_schema_versions_read_as_confluents_json_deserializer_reads_them(spark, services):
    topic = create_topic(services.kafka_bootstrap, 1, "jsonschema")
    _produce(services, topic, V1, [_doc(i, False) for i in range(40)])
    _produce(services, topic, V2, [_doc(i, True) for i in range(40, 90)])
    df = (spark.read.format("hzsource").option("connector", "kafka")
          .option("kafka.bootstrap.servers", services.kafka_bootstrap).option("subscribe", topic)
          .option("valueFormat", "json-schema").option("schemaRegistry.url", services.registry_url).load())
    assert df.schema["value"].dataType.simpleString() == (
        "struct<id:bigint,amount:double,note:string,tags:array<string>,card:struct<last4:string,expiry:bigint>,"
        "ok:boolean,channel:string>")
    got = {r.offset: _norm(r.value) for r in df.select("offset", "value").collect()}

    de = JSONDeserializer(None, schema_registry_client=SchemaRegistryClient({"url": services.registry_url}))
    c = Consumer({"bootstrap.servers": services.kafka_bootstrap, "group.id": "json-ref",
                  "enable.auto.commit": False, "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0, 0)])
    fields = ("id", "amount", "note", "tags", "card", "ok", "channel")
    want = {}
    while True:
        m = c.poll(10)
        assert m is not None
        if m.error():
            break
        d = de(m.value(), SerializationContext(topic, MessageField.VALUE))
        want[m.offset()] = {f: d.get(f) for f in fields}  # what the reader's properties hold
    c.close()
    assert len(want) == 90
    assert got == want


def test_a_document_of_the_wrong_shape_fails_naming_its_offset(spark, services):
    topic = create_topic(services.kafka_bootstrap, 1, "jsonbad")
    _produce(services, topic, V1, [_doc(i, False) for i in range(3)])
    sid = SchemaRegistryClient({"url": services.registry_url}).get_latest_version(f"{topic}-value").schema_id
    assert sid is not None
    p = Producer({"bootstrap.servers": services.kafka_bootstrap})
    p.produce(topic, value=b"\0" + sid.to_bytes(4, "big") + b'{"id": "seven", "amount": 1}', partition=0)
    assert p.flush(30) == 0
    df = (spark.read.format("hzsource").option("connector", "kafka")
          .option("kafka.bootstrap.servers", services.kafka_bootstrap).option("subscribe", topic)
          .option("valueFormat", "json-schema").option("schemaRegistry.url", services.registry_url).load())
    why = rf"offset 3 of {topic}-0 cannot be read as json-schema \(the document does not fit the reader"
    with pytest.raises(Exception, match=why):
        df.collect()
