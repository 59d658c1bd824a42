"""valueFormat / keyFormat avro: records produced by Confluent's serializers through the real
schema registry read by our source exactly as Confluent's deserializers read them."""

from __future__ import annotations

import datetime as dt
import decimal
import json

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from spark_ext.errors import InvalidOptionError
from tests.support import pg_util
from tests.support.kafka_util import create_topic, unique_topic

pytestmark = [pytest.mark.spark, pytest.mark.services]

INNER = {"type": "record", "name": "Inner", "fields": [
    {"name": "f", "type": "float"}, {"name": "ok", "type": "boolean"}]}

V1: dict = {"type": "record", "name": "Payment", "namespace": "dev.sparkext.test", "fields": [
    {"name": "id", "type": "long"},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}},
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "attrs", "type": {"type": "map", "values": ["null", "int"]}},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["CARD", "BANK", "CASH"]}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "inner", "type": ["null", INNER]},
    {"name": "choice", "type": ["null", "int", "string"], "default": None},
    {"name": "count", "type": "int"},
    {"name": "dropped", "type": "string", "default": ""},
]}

# BACKWARD-compatible: a field added with a default, one removed, an int widened to long.
V2 = {**V1, "fields": [f for f in V1["fields"] if f["name"] not in ("dropped", "count")] + [
    {"name": "count", "type": "long"},
    {"name": "channel", "type": "string", "default": "web"},
    {"name": "score", "type": ["null", "double"], "default": None},
]}


def _v1(i: int) -> dict:
    return {"id": i, "amount": decimal.Decimal(i * 137 - 5000).scaleb(-2), "note": None if i % 3 else f"n{i}",
            "tags": [f"t{j}" for j in range(i % 4)],
            "attrs": {f"k{j}": None if j == 1 else j for j in range(i % 3)},
            "kind": ("CARD", "BANK", "CASH")[i % 3],
            "at": dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=1013 * i),
            "day": dt.date(2026, 1, 1) + dt.timedelta(days=i), "inner": None if i % 5 == 0 else
            {"f": i / 4, "ok": i % 2 == 0}, "choice": (None, i, f"s{i}")[i % 3], "count": i * 7,
            "dropped": "x" * (i % 3)}


def _v2(i: int) -> dict:
    d = {k: v for k, v in _v1(i).items() if k != "dropped"}
    return {**d, "channel": ("app", "web")[i % 2], "score": None if i % 2 else i * 1.5}


def _spark_view(d):
    """A datum as Spark's from_avro shows it: the general union as a struct of members."""
    if d is None:
        return None
    choice: object = d["choice"]
    return {**d, "choice": None if choice is None else
            {"member0": choice if isinstance(choice, int) else None,
             "member1": choice if isinstance(choice, str) else None},
            "at": d["at"].astimezone(dt.UTC).replace(tzinfo=None)}


def _norm(x):
    if hasattr(x, "asDict"):
        return {k: _norm(v) for k, v in x.asDict().items()}
    if isinstance(x, dict):
        return {k: _norm(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_norm(v) for v in x]
    if isinstance(x, bytearray):
        return bytes(x)
    if isinstance(x, float):
        return round(x, 5)
    return x


def _produce(services, topic: str, subject: str, schema: dict, rows) -> int:
    sr = SchemaRegistryClient({"url": services.registry_url})
    ser = AvroSerializer(sr, json.dumps(schema), conf={"auto.register.schemas": True})
    p = Producer({"bootstrap.servers": services.kafka_bootstrap})
    for part, datum in rows:
        ctx = SerializationContext(topic, MessageField.VALUE)
        p.produce(topic, value=None if datum is None else ser(datum, ctx), partition=part)
    assert p.flush(30) == 0
    sid = sr.get_latest_version(subject).schema_id
    assert sid is not None
    return sid


def test_two_schema_versions_read_as_confluents_deserializer_reads_them(spark, services):
    topic = create_topic(services.kafka_bootstrap, 2, "avro")
    subject = f"{topic}-value"
    first = [(i % 2, _v1(i)) for i in range(60)] + [(0, None)]  # a tombstone too
    id1 = _produce(services, topic, subject, V1, first)
    second = [(i % 2, _v2(i)) for i in range(60, 130)]
    id2 = _produce(services, topic, subject, V2, second)
    assert id1 != id2

    df = (spark.read.format("hzsource").option("connector", "kafka")
          .option("kafka.bootstrap.servers", services.kafka_bootstrap).option("subscribe", topic)
          .option("valueFormat", "avro").option("schemaRegistry.url", services.registry_url).load())
    assert df.schema["value"].dataType.simpleString() == (
        "struct<id:bigint,amount:decimal(12,2),note:string,tags:array<string>,attrs:map<string,int>,"
        "kind:string,at:timestamp,day:date,inner:struct<f:float,ok:boolean>,"
        "choice:struct<member0:int,member1:string>,count:bigint,channel:string,score:double>")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    rows = df.select("partition", "offset", "value").collect()
    got = {(r.partition, r.offset): _norm(r.value) for r in rows}

    # Confluent's deserializer with the latest schema as its reader schema, record by record.
    from confluent_kafka import Consumer, TopicPartition

    sr = SchemaRegistryClient({"url": services.registry_url})
    de = AvroDeserializer(sr, json.dumps(V2))
    c = Consumer({"bootstrap.servers": services.kafka_bootstrap, "group.id": "avro-ref",
                  "enable.auto.commit": False, "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
    want: dict = {}
    eof: set[int] = set()
    while len(eof) < 2:
        m = c.poll(10)
        assert m is not None
        if m.error():
            eof.add(m.partition() or 0)
            continue
        v = m.value()
        want[(m.partition(), m.offset())] = _norm(_spark_view(
            None if v is None else de(v, SerializationContext(topic, MessageField.VALUE))))
    c.close()
    assert len(want) == 131
    assert got == want


def test_a_record_that_does_not_decode_fails_naming_partition_and_offset(spark, services):
    topic = create_topic(services.kafka_bootstrap, 1, "avrobad")
    _produce(services, topic, f"{topic}-value", V1, [(0, _v1(i)) for i in range(5)])
    p = Producer({"bootstrap.servers": services.kafka_bootstrap})
    p.produce(topic, value=b"\x01\x00\x00\x00\x01garbage", partition=0)  # a wrong magic byte
    assert p.flush(30) == 0
    df = (spark.read.format("hzsource").option("connector", "kafka")
          .option("kafka.bootstrap.servers", services.kafka_bootstrap).option("subscribe", topic)
          .option("valueFormat", "avro").option("schemaRegistry.url", services.registry_url).load())
    with pytest.raises(Exception, match=rf"offset 5 of {topic}-0 cannot be read as avro \(its first byte "
                                         "is 1"):
        df.collect()


def test_the_subject_is_needed_and_must_exist(spark, services):
    topic = unique_topic("avronone")

    def load(**opts: str):
        r = (spark.read.format("hzsource").option("connector", "kafka")
             .option("kafka.bootstrap.servers", services.kafka_bootstrap).option("valueFormat", "avro"))
        for k, v in opts.items():
            r = r.option(k, v)
        return r.load()

    with pytest.raises(Exception, match=r"set option 'schemaRegistry\.url'"):
        load(subscribe=topic)
    with pytest.raises(Exception, match=f"subject '{topic}-value' version latest: HTTP 404"):
        load(subscribe=topic, **{"schemaRegistry.url": services.registry_url})
    with pytest.raises(Exception, match="set option 'valueSubject'"):
        load(subscribePattern="avro.*", **{"schemaRegistry.url": services.registry_url})
    assert issubclass(InvalidOptionError, ValueError)


SMALL: dict = {"type": "record", "name": "Pay", "namespace": "dev.sparkext.test", "fields": [
    {"name": "id", "type": "long"}, {"name": "amount", "type": "double"}]}


def _poisoned(services, partitions: int = 2, n: int = 90) -> tuple[str, set[int], set[tuple[int, int]]]:
    """``n`` good records and, among them, records that cannot be read: an id the registry does
    not know, a truncated datum, a wrong magic byte, fewer than 5 bytes. The good ids, and
    the (partition, offset) of every bad record."""
    from confluent_kafka import Producer

    topic = create_topic(services.kafka_bootstrap, partitions, "poison")
    sr = SchemaRegistryClient({"url": services.registry_url})
    ser = AvroSerializer(sr, json.dumps(SMALL))
    ctx = SerializationContext(topic, MessageField.VALUE)
    good, bad = set(), set()
    p = Producer({"bootstrap.servers": services.kafka_bootstrap})
    sent: list[tuple[int, bool]] = []
    for i in range(n):
        value = ser({"id": i, "amount": i / 2}, ctx)
        kind = i % 15
        if kind == 3:
            value = b"\0\x7f\xff\xff\x01" + value[5:]  # an id the registry never gave
        elif kind == 7:
            value = value[:6]  # cut inside the datum
        elif kind == 11:
            value = b"\x02" + value[1:]  # not the wire format's magic byte
        elif kind == 13:
            value = b"\0\0"
        sent.append((i, kind in (3, 7, 11, 13)))

        def done(err, msg, i=i, poisoned=kind in (3, 7, 11, 13)):
            assert err is None, err
            (bad.add((msg.partition(), msg.offset())) if poisoned else good.add(i))

        p.produce(topic, value=value, key=str(i).encode(), headers=[("trace", str(i).encode())],
                  partition=i % partitions, on_delivery=done)
    assert p.flush(30) == 0
    return topic, good, bad


def test_unreadable_records_go_to_the_dead_letters_with_the_batch(spark, services, tmp_path):
    """mode PERMISSIVE into PostgreSQL with dead letters: every readable record once in the
    table, every unreadable one once in the dead letters, raw (headers too), with its error."""
    topic, good, bad = _poisoned(services)
    table, dlq = pg_util.table_name("avro_good"), pg_util.table_name("avro_dead")
    pg_util.execute(services.postgres_url,
                    f"CREATE TABLE {table} (id bigint PRIMARY KEY, amount double precision)")
    df = (spark.readStream.format("hzsource").option("connector", "kafka")
          .option("kafka.bootstrap.servers", services.kafka_bootstrap).option("subscribe", topic)
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "30")
          .option("valueFormat", "avro").option("schemaRegistry.url", services.registry_url)
          .option("mode", "PERMISSIVE").option("includeHeaders", "true").load())
    q = (df.select("value.*", "_corrupt_record").writeStream.format("hzsink").option("connector", "jdbc")
         .option("url", services.postgres_url).option("dbtable", table)
         .option("deadLetter.connector", "jdbc").option("deadLetter.url", services.postgres_url)
         .option("deadLetter.dbtable", dlq).option("deadLetter.createTable", "true")
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    assert q.awaitTermination(180), "still running after 180 s"
    assert q.exception() is None, q.exception()
    assert sum(p["numInputRows"] for p in q.recentProgress) == 90 and len(q.recentProgress) >= 3
    ids = [r[0] for r in pg_util.query(services.postgres_url, f"SELECT id FROM {table} ORDER BY id")]
    assert ids == sorted(good)
    dead = pg_util.query(services.postgres_url, f"SELECT error_class, error_message, row FROM {dlq}")
    rows = [json.loads(r) for _, _, r in dead]
    assert sorted((r["partition"], r["offset"]) for r in rows) == sorted(bad)  # each once
    assert {c for c, _, _ in dead} == {"UndecodableRecordError"}
    messages = " ".join(m for _, m, _ in dead)
    for why in ("is not in the registry", "does not decode", "its first byte is 2", "shorter than"):
        assert why in messages
    assert all(r["topic"] == topic and r["key"] for r in rows)  # raw, key included (base64)
    assert all(r["headers"] == [{"key": "trace", "value": r["key"]}] for r in rows), rows[0]  # and headers


def test_unreadable_records_fail_a_sink_without_dead_letters_naming_the_record(spark, services, tmp_path):
    topic, _, bad = _poisoned(services, partitions=1, n=10)
    first = min(o for _, o in bad)
    df = (spark.readStream.format("hzsource").option("connector", "kafka")
          .option("kafka.bootstrap.servers", services.kafka_bootstrap).option("subscribe", topic)
          .option("startingOffsets", "earliest").option("valueFormat", "avro")
          .option("schemaRegistry.url", services.registry_url).option("mode", "PERMISSIVE").load())
    table = pg_util.table_name("avro_nodl")
    q = (df.select("value.*", "_corrupt_record").writeStream.format("hzsink").option("connector", "jdbc")
         .option("url", services.postgres_url).option("dbtable", table).option("createTable", "true")
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    with pytest.raises(Exception, match=rf"the record at offset {first} of {topic}-0 could not be read"):
        q.awaitTermination(180)


@pytest.mark.campaign
@pytest.mark.parametrize("point", ["routing.after_decision@1", "routing.mid_commit@2"])
def test_poison_stream_with_a_driver_killed_after_its_decision_lands_every_record_once(services, tmp_path,
                                                                                    point):
    """kill -9 of the driver after a batch holding unreadable records was decided (then in the
    middle of its commit), and a restart: every readable record once in the table, every
    unreadable one once in the dead letters, nothing prepared left in doubt."""
    import os
    import subprocess
    import sys

    from spark_ext.options import checkpoint_sink_id

    topic, good, bad = _poisoned(services, n=150)
    table, dlq = pg_util.table_name("avro_kill"), pg_util.table_name("avro_kill_dead")
    url = services.postgres_url
    pg_util.execute(url, f"CREATE TABLE {table} (id bigint PRIMARY KEY, amount double precision)")
    ckpt = tmp_path / "ckpt"
    log = tmp_path / "failpoints.log"

    def drive(failpoint: str) -> subprocess.CompletedProcess:
        argv = [sys.executable, "-m", "tests.drivers.avro_kafka_to_jdbc", services.kafka_bootstrap, topic,
                services.registry_url, str(ckpt), url, table, dlq, failpoint]
        return subprocess.run(argv, start_new_session=True, capture_output=True, text=True, timeout=600,
                              env={**os.environ, "SPARK_EXT_FAILPOINT_LOG": str(log)})

    crashed = drive(point)
    assert crashed.returncode != 0 and log.read_text().strip() == point, crashed.stderr[-3000:]
    committed = len(pg_util.query(url, f"SELECT id FROM {table}"))
    assert 0 < committed < len(good), "the kill must fall after a committed batch, before the end"
    done = drive("-")
    assert done.returncode == 0, done.stderr[-3000:]
    ids = [r[0] for r in pg_util.query(url, f"SELECT id FROM {table} ORDER BY id")]
    assert ids == sorted(good)
    dead = [json.loads(r[0]) for r in pg_util.query(url, f"SELECT row FROM {dlq}")]
    assert sorted((r["partition"], r["offset"]) for r in dead) == sorted(bad)  # each once
    assert pg_util.prepared(url, checkpoint_sink_id(str(ckpt))) == []


def test_an_incompatible_writer_schema_fails_naming_the_subject_the_ids_and_the_fix(spark, services):
    """A producer wrote with a schema the reader's cannot read (registered under another
    subject, which the subject's rule never saw): the query fails naming the subject, both ids
    and what to do; the pinned version still reads the records written with it."""
    import io

    import fastavro
    from confluent_kafka import Producer

    topic = create_topic(services.kafka_bootstrap, 1, "avroincompat")
    subject = f"{topic}-value"
    id1 = _produce(services, topic, subject, SMALL, [(0, {"id": i, "amount": i / 2}) for i in range(3)])
    changed = {**SMALL, "fields": [{"name": "id", "type": "string"}, SMALL["fields"][1]]}
    sr = SchemaRegistryClient({"url": services.registry_url})
    id2 = sr.register_schema(f"{topic}-other", Schema(json.dumps(changed), "AVRO"))
    buf = io.BytesIO(b"\0" + id2.to_bytes(4, "big"))
    buf.seek(5)
    fastavro.schemaless_writer(buf, fastavro.parse_schema(changed), {"id": "x", "amount": 1.0})
    p = Producer({"bootstrap.servers": services.kafka_bootstrap})
    p.produce(topic, value=buf.getvalue(), partition=0)
    assert p.flush(30) == 0

    def load(**opts: str):
        r = (spark.read.format("hzsource").option("connector", "kafka")
             .option("kafka.bootstrap.servers", services.kafka_bootstrap).option("subscribe", topic)
             .option("valueFormat", "avro").option("schemaRegistry.url", services.registry_url))
        for k, v in opts.items():
            r = r.option(k, v)
        return r.load()

    with pytest.raises(Exception) as e:
        load(valueSchemaVersion="1").collect()
    text = str(e.value)
    assert (f"written with schema id {id2} cannot be read with the reader schema, subject '{subject}' "
            f"version 1 (id {id1})") in text
    assert "field 'id' is string in the writer's schema and long in the reader's" in text
    assert "Fix the producer" in text
    ended = load(valueSchemaVersion="1", endingOffsets=json.dumps({topic: {"0": 3}}))
    assert sorted(r.value.id for r in ended.collect()) == [0, 1, 2]
