"""valueFormat / keyFormat protobuf: records produced by Confluent's serializers through the real
schema registry read by our source as Confluent's deserializer reads them, in the shapes
Spark's from_protobuf gives."""

from __future__ import annotations

import datetime as dt
import json

import pytest
import requests
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.support.kafka_util import create_topic
from tests.support.protobuf_util import compile_proto, spark_view

pytestmark = [pytest.mark.spark, pytest.mark.services]

# The file holds two top-level messages (Payment is the second: its records carry message
# indexes [1]) and a nested one.
V1 = """syntax = "proto3";
package dev.sparkext.test;
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";

message Inner { float f = 1; bool ok = 2; repeated sint32 xs = 3; }
enum Kind { CARD = 0; BANK = 1; CASH = 2; }
message Payment {
  message Line { string sku = 1; fixed64 cents = 2; }
  int64 id = 1;
  string note = 2;
  optional int32 maybe = 3;
  double amount = 4;
  repeated string tags = 5;
  map<string, int64> attrs = 6;
  map<int32, Inner> by_slot = 7;
  Kind kind = 8;
  google.protobuf.Timestamp at = 9;
  google.protobuf.Duration took = 10;
  Inner inner = 11;
  repeated Line lines = 12;
  oneof choice { string text = 13; sint64 number = 14; }
  bytes raw = 15;
  uint32 count = 16;
  sfixed32 delta = 17;
  int32 dropped = 18;
}
"""

# BACKWARD-compatible as the registry rules it: a field added, an enum value added.
V2 = V1.replace("  int32 dropped = 18;\n", "  int32 dropped = 18;\n  string channel = 19;\n").replace(
    "CASH = 2; }", "CASH = 2; WIRE = 3; }")


def _fill(pb, i: int, v2: bool):
    m = pb.Payment(id=i * 1001, note="" if i % 4 == 0 else f"n{i}", amount=i / 4,
                   tags=[f"t{j}" for j in range(i % 3)],
                   kind=i % (4 if v2 else 3), count=i, delta=-i, raw=bytes(range(i % 5)), dropped=i)
    if i % 3 == 0:
        m.maybe = i % 2  # set, even to 0: it has presence
    for j in range(i % 3):
        m.attrs[f"k{j}"] = j - 1
    for j in range(i % 2 + 1):
        m.by_slot[j].f = j / 2
        m.by_slot[j].xs.extend(range(-j, j))
    m.at.FromDatetime(dt.datetime(2026, 1, 1) + dt.timedelta(seconds=17 * i, microseconds=i))
    m.took.FromTimedelta(dt.timedelta(seconds=i, microseconds=3 * i))
    if i % 5:
        m.inner.f = i / 8
        m.inner.ok = bool(i % 2)
        m.inner.xs.extend([i, -i])
    for j in range(i % 4):
        m.lines.add(sku=f"s{j}", cents=j * 100)
    if i % 3 == 1:
        m.text = f"c{i}"
    elif i % 3 == 2:
        m.number = -i
    if v2:
        m.channel = ("app", "web")[i % 2]
    return m


def norm(x):
    if hasattr(x, "asDict"):
        return {k: norm(v) for k, v in x.asDict().items()}
    if isinstance(x, dict):
        return {k: norm(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [norm(v) for v in x]
    if isinstance(x, bytearray | bytes):
        return bytes(x)
    if isinstance(x, float):
        return round(x, 5)
    if isinstance(x, dt.datetime):
        return x.replace(tzinfo=None)
    return x


def _produce(services, topic: str, message_cls, rows) -> None:
    sr = SchemaRegistryClient({"url": services.registry_url})
    ser = ProtobufSerializer(message_cls, sr, {"use.deprecated.format": False})
    p = Producer({"bootstrap.servers": services.kafka_bootstrap})
    for part, m in rows:
        p.produce(topic, value=None if m is None else ser(m, SerializationContext(topic, MessageField.VALUE)),
                  partition=part)
    assert p.flush(30) == 0


def _reference(services, topic: str, partitions: int, parse) -> dict:
    """Every record of ``topic`` parsed by ``parse``, in Spark's view."""
    c = Consumer({"bootstrap.servers": services.kafka_bootstrap, "group.id": "pb-ref",
                  "enable.auto.commit": False, "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    want: dict = {}
    eof: set[int] = set()
    while len(eof) < partitions:
        m = c.poll(10)
        assert m is not None
        if m.error():
            eof.add(m.partition() or 0)
            continue
        v = m.value()
        want[(m.partition(), m.offset())] = norm(
            None if v is None else spark_view(parse(v)))
    c.close()
    return want


def _by_offset(df) -> dict:
    rows = df.select("partition", "offset", "value").collect()
    return {(r.partition, r.offset): norm(r.value) for r in rows}


def _load(spark, services, topic: str, **opts: str):
    r = (spark.read.format("hzsource").option("connector", "kafka")
         .option("kafka.bootstrap.servers", services.kafka_bootstrap).option("subscribe", topic)
         .option("valueFormat", "protobuf").option("schemaRegistry.url", services.registry_url))
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def _register_text(services, subject: str, text: str) -> int:
    """Register .proto text, as Java's serializers do (the registry checks it against the
    subject's earlier versions)."""
    r = requests.post(f"{services.registry_url}/subjects/{subject}/versions",
                      json={"schemaType": "PROTOBUF", "schema": text}, timeout=30)
    assert r.status_code == 200, r.text
    return int(r.json()["id"])


def _produce_framed(services, topic: str, sid: int, rows) -> None:
    """Records in the registry's wire format as Java's serializer frames them: Payment is the
    file's second message, indexes [1]."""
    p = Producer({"bootstrap.servers": services.kafka_bootstrap})
    for part, m in rows:
        value = None if m is None else b"\0" + sid.to_bytes(4, "big") + b"\x02\x02" + m.SerializeToString()
        p.produce(topic, value=value, partition=part)
    assert p.flush(30) == 0


def test_two_schema_versions_as_proto_text_read_as_protobuf_reads_them(spark, services, tmp_path):
    pb1, pb2 = compile_proto(tmp_path, V1, "pay_v1"), compile_proto(tmp_path, V2, "pay_v2")
    topic = create_topic(services.kafka_bootstrap, 2, "proto")
    subject = f"{topic}-value"
    id1 = _register_text(services, subject, V1)
    first = [(i % 2, _fill(pb1, i, False)) for i in range(60)] + [(0, None)]  # a tombstone too
    _produce_framed(services, topic, id1, first)
    id2 = _register_text(services, subject, V2)
    assert id2 != id1
    second = [(i % 2, _fill(pb2, i, True)) for i in range(60, 130)]
    _produce_framed(services, topic, id2, second)
    incompatible = V2.replace("string note = 2;", "int64 note = 2;")
    r = requests.post(f"{services.registry_url}/subjects/{subject}/versions",
                      json={"schemaType": "PROTOBUF", "schema": incompatible}, timeout=30)
    assert r.status_code == 409, r.text  # the registry holds the subject to BACKWARD

    df = _load(spark, services, topic, valueMessage="dev.sparkext.test.Payment")
    assert df.schema["value"].dataType.simpleString() == (
        "struct<id:bigint,note:string,maybe:int,amount:double,tags:array<string>,attrs:map<string,bigint>,"
        "by_slot:map<int,struct<f:float,ok:boolean,xs:array<int>>>,kind:string,at:timestamp,"
        "took:interval day to second,inner:struct<f:float,ok:boolean,xs:array<int>>,"
        "lines:array<struct<sku:string,cents:bigint>>,text:string,number:bigint,raw:binary,count:int,"
        "delta:int,dropped:int,channel:string>")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    got = _by_offset(df)
    # protobuf's own parser with the newest message, record by record
    want = _reference(services, topic, 2, lambda v: pb2.Payment.FromString(v[7:]))
    assert len(want) == 131
    assert got == want

    # Pinned to the first version, the newer records' field is skipped and their new enum
    # value is named as protobuf-java names a number its enum lacks.
    old = _load(spark, services, topic, valueMessage="dev.sparkext.test.Payment", valueSchemaVersion="1")
    assert "channel" not in old.schema["value"].dataType.fieldNames()
    got = _by_offset(old)
    want = _reference(services, topic, 2, lambda v: pb1.Payment.FromString(v[7:]))
    assert sum(1 for v in want.values() if v and v["kind"] == "UNKNOWN_ENUM_VALUE_Kind_3") == 17
    assert got == want


def test_records_of_confluents_serializer_read_as_its_deserializer_reads_them(spark, services, tmp_path):
    pb1 = compile_proto(tmp_path, V1, "pay_one")
    topic = create_topic(services.kafka_bootstrap, 2, "protoconf")
    _produce(services, topic, pb1.Payment, [(i % 2, _fill(pb1, i, False)) for i in range(50)] + [(1, None)])
    de = ProtobufDeserializer(pb1.Payment, {"use.deprecated.format": False})
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    df = _load(spark, services, topic, valueMessage="dev.sparkext.test.Payment")
    got = _by_offset(df)
    want = _reference(services, topic, 2, lambda v: de(v, SerializationContext(topic, MessageField.VALUE)))
    assert len(want) == 51
    assert got == want

    with pytest.raises(Exception, match=r"holds messages dev\.sparkext\.test\.Inner, "
                                         r"dev\.sparkext\.test\.Payment: set option 'valueMessage'"):
        _load(spark, services, topic)
    with pytest.raises(Exception, match=r"option 'valueMessage' is 'Payment', which the schema does not "):
        _load(spark, services, topic, valueMessage="Payment")
    # Inner read from Payment's bytes would be a producer's mistake, not one bad record: the
    # writer's message (indexes [1]) has other types at the reader's numbers.
    with pytest.raises(Exception, match=r"cannot be read with the reader's message "
                                         r"'dev\.sparkext\.test\.Inner'.*field dev\.sparkext\.test\.Payment"
                                         r"\.f \(number 1\) is int64 in the writer's schema and float in the "
                                         r"reader's"):
        _load(spark, services, topic, valueMessage="dev.sparkext.test.Inner").collect()


def test_unreadable_records_fail_or_are_set_aside_naming_partition_and_offset(spark, services, tmp_path):
    pb1 = compile_proto(tmp_path, V1, "pay_bad")
    topic = create_topic(services.kafka_bootstrap, 1, "protobad")
    _produce(services, topic, pb1.Payment, [(0, _fill(pb1, i, False)) for i in range(4)])
    sid = SchemaRegistryClient({"url": services.registry_url}).get_latest_version(f"{topic}-value").schema_id
    assert sid is not None
    head = b"\0" + sid.to_bytes(4, "big") + b"\x02\x02"
    good = _fill(pb1, 7, False).SerializeToString()
    poison = [head + good[:-1],  # cut short inside its last field
              head + b"\x12\x02\xff\xfe",  # a note that is not UTF-8
              b"\0" + sid.to_bytes(4, "big"),  # no message indexes
              head + b"\x0a\x01\x01",  # id (an int64) written as bytes
              b"\0" + (999999).to_bytes(4, "big") + b"\x00" + good]  # an unknown schema id
    p = Producer({"bootstrap.servers": services.kafka_bootstrap})
    for v in poison:
        p.produce(topic, value=v, partition=0)
    assert p.flush(30) == 0
    with pytest.raises(Exception, match=rf"offset 4 of {topic}-0 cannot be read as protobuf"):
        _load(spark, services, topic, valueMessage="dev.sparkext.test.Payment").collect()
    rows = (_load(spark, services, topic, valueMessage="dev.sparkext.test.Payment", mode="PERMISSIVE")
            .orderBy("offset").collect())
    assert [r.value is None for r in rows] == [False] * 4 + [True] * 5
    assert [r._corrupt_record is None for r in rows] == [True] * 4 + [False] * 5
    errors = [r._corrupt_record.error for r in rows[4:]]
    assert "ends inside" in errors[0]
    assert "field 'note' is not valid UTF-8" in errors[1]
    assert "before the protobuf message indexes" in errors[2]
    assert "field 'id' is written with wire type 2" in errors[3]
    assert "schema id 999999 is not in the registry" in errors[4]
    assert [r._corrupt_record.value for r in rows[4:]] == poison
    assert all(r._corrupt_record.headers is None for r in rows[4:])  # not read without includeHeaders
    assert json.dumps([r.value.id for r in rows[:4]]) == json.dumps([None, 1001, 2002, 3003])
