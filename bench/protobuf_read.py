"""Bench case ``protobuf_read``: our source with ``valueFormat=protobuf`` against Spark's
``kafka`` source followed by protobuf's own Python parser in ``mapInArrow`` (one message
object per record: what a job does without the spark-protobuf jar, which this machine's
Maven mirror does not serve), same topic, same run. Our source reading the same records
raw (``valueFormat=raw``) runs too, as the floor: what decoding costs on top of the read.

A topic of ``BENCH_PROTOBUF_READ_ROWS`` records (default 1M, a payment message of ten
fields: int64, string, double, optional string, enum, Timestamp, repeated string, map,
nested message, int32; registered as ``.proto`` text, 4 partitions) is read into Parquet
with ``Trigger.AvailableNow`` by each, in turn, in ``BENCH_ROUNDS`` rounds
(``bench.common.Rounds``). ``equal``: every round's outputs of ours and of the parser hold
the same rows (``exceptAll`` both ways, maps as their sorted entries).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.common import (
    BenchError,
    Result,
    Rounds,
    round_count,
    same_parquet_rows,
    services_env,
    spark_session,
    timed_parquet_write,
)

PARTITIONS = 4
PROTO = """syntax = "proto3";
package bench;
import "google/protobuf/timestamp.proto";
enum Kind { CARD = 0; BANK = 1; CASH = 2; }
message Inner { bool ok = 1; int32 code = 2; }
message Payment {
  int64 id = 1;
  string account = 2;
  double amount = 3;
  optional string note = 4;
  Kind kind = 5;
  google.protobuf.Timestamp at = 6;
  repeated string tags = 7;
  map<string, int32> attrs = 8;
  Inner inner = 9;
  int32 count = 10;
}
"""


def _classes() -> Any:
    """The Payment class, compiled from PROTO by protoc (grpcio-tools) into a pool of its own."""
    import importlib.resources

    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as d:
        with open(f"{d}/pay.proto", "w") as f:
            f.write(PROTO)
        include = str(importlib.resources.files("grpc_tools") / "_proto")
        if protoc.main(["protoc", f"-I{d}", f"-I{include}", f"--descriptor_set_out={d}/set", "pay.proto"]):
            raise BenchError("protoc could not compile the bench's .proto")
        with open(f"{d}/set", "rb") as f:
            fds = descriptor_pb2.FileDescriptorSet.FromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    for fdp in fds.file:
        pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("bench.Payment"))


def _topic(bootstrap: str, registry: str, rows: int) -> str:
    """Create and fill the topic once (and register its schema); reused when complete."""
    import requests

    name = f"bench-protobuf-read-{rows}"
    r = requests.post(f"{registry}/subjects/{name}-value/versions", json={"schemaType": "PROTOBUF",
                                                                          "schema": PROTO}, timeout=60)
    if r.status_code != 200:
        raise BenchError(f"the registry refused the bench's schema: {r.status_code} {r.text}")
    sid = int(r.json()["id"])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if name in admin.list_topics(timeout=30).topics:
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench"})
        have = sum(c.get_watermark_offsets(TopicPartition(name, p), timeout=30)[1] for p in range(PARTITIONS))
        c.close()
        if have == rows:
            return name
        admin.delete_topics([name])[name].result(timeout=60)
        time.sleep(2)
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(timeout=60)
    payment = _classes()
    header = b"\0" + sid.to_bytes(4, "big") + b"\x02\x02"  # Payment: the file's second message
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
                  "queue.buffering.max.messages": 1_000_000, "compression.type": "none"})
    t0 = time.monotonic()
    for i in range(rows):
        m = payment(id=i, account=f"acct-{i % 5000:05d}", amount=(i % 100000) / 100, kind=i % 3,
                    tags=["a", "bb"][: i % 3], count=i % 1000)
        if i % 3 == 0:
            m.note = f"note {i}"
        m.at.seconds, m.at.nanos = 1_760_000_000 + i // 1000, (i % 1000) * 1_000_000
        if i % 2:
            m.attrs["n"] = i % 7
        if i % 5:
            m.inner.ok, m.inner.code = bool(i % 2), i % 11
        while True:
            try:
                p.produce(name, value=header + m.SerializeToString(), partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.05)
        if i % 20000 == 0:
            p.poll(0)
    assert p.flush(120) == 0
    print(f"[bench] produced {rows} protobuf records to {name} in {time.monotonic() - t0:.1f} s",
          file=sys.stderr)
    return name


_payment: Any = None


def _parser(arrow: Any) -> Any:
    """mapInArrow's function: each value parsed by protobuf's parser, one message object per
    record, into the columns Spark's from_protobuf gives (``arrow``)."""
    return lambda batches: _parse_batches(batches, arrow)


def _parse_batches(batches: Any, arrow: Any) -> Any:
    import pyarrow as pa

    global _payment
    if _payment is None:
        _payment = _classes()
    payment = _payment
    kinds = {0: "CARD", 1: "BANK", 2: "CASH"}
    for b in batches:
        rows = []
        for part, off, v in zip(b.column(0).to_pylist(), b.column(1).to_pylist(), b.column(2).to_pylist(),
                                strict=True):
            m = payment.FromString(v[7:])
            rows.append({"partition": part, "offset": off, "id": m.id or None, "account": m.account or None,
                         "amount": m.amount or None, "note": m.note if m.HasField("note") else None,
                         "kind": kinds.get(m.kind) if m.kind else None,
                         "at": (m.at.seconds * 1_000_000 + m.at.nanos // 1000) if m.HasField("at") else None,
                         "tags": list(m.tags), "attrs": list(m.attrs.items()),
                         "inner": {"ok": m.inner.ok or None, "code": m.inner.code or None}
                         if m.HasField("inner") else None, "count": m.count or None})
        yield pa.RecordBatch.from_pylist(rows, schema=arrow)


def _frame(spark: Any, variant: str, bootstrap: str, registry: str, topic: str, schema: Any) -> Any:
    r = spark.readStream
    r = r.format("kafka") if variant == "parser" else r.format("hzsource").option("connector", "kafka")
    r = r.option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic).option("startingOffsets",
                                                                                          "earliest")
    if variant == "ours":
        return (r.option("valueFormat", "protobuf").option("valueMessage", "bench.Payment")
                .option("schemaRegistry.url", registry).load().select("partition", "offset", "value.*"))
    if variant == "raw":
        return r.load().select("partition", "offset", "value")
    from spark_ext import compat

    return r.load().select("partition", "offset", "value").mapInArrow(_parser(compat.to_arrow_schema(schema)),
                                                                        schema)


def run() -> Result:
    env = services_env()
    rows = int(os.environ.get("BENCH_PROTOBUF_READ_ROWS", "1000000"))
    topic = _topic(env["KAFKA_BOOTSTRAP_SERVERS"], env["SCHEMA_REGISTRY_URL"], rows)
    spark = spark_session()
    probe = (spark.read.format("hzsource").option("connector", "kafka")
             .option("kafka.bootstrap.servers", env["KAFKA_BOOTSTRAP_SERVERS"]).option("subscribe", topic)
             .option("valueFormat", "protobuf").option("valueMessage", "bench.Payment")
             .option("schemaRegistry.url", env["SCHEMA_REGISTRY_URL"])
             .load().select("partition", "offset", "value.*"))
    schema = probe.schema  # the parser's output: exactly our columns' types
    timed = Rounds("protobuf_read", round_count())
    equal = True
    with tempfile.TemporaryDirectory() as tmp:
        for i in timed:
            for variant in ("parser", "raw", "ours"):
                df = _frame(spark, variant, env["KAFKA_BOOTSTRAP_SERVERS"], env["SCHEMA_REGISTRY_URL"], topic,
                            schema)
                n, dt = timed_parquet_write(f"protobuf_read {variant}", df, f"{tmp}/out-{variant}-{i}",
                                            f"{tmp}/ck-{variant}-{i}")
                timed.add(variant, i, n, dt)
            equal = equal and same_parquet_rows(spark, f"{tmp}/out-ours-{i}", f"{tmp}/out-parser-{i}", rows,
                                                maps=("attrs",))
            for variant in ("parser", "raw", "ours"):
                shutil.rmtree(f"{tmp}/out-{variant}-{i}")
    print(f"[bench] protobuf_read ours / raw (what decoding costs on top of the read): warm "
          f"{timed.ratio('ours', 'raw'):.2f}, cold {timed.cold_ratio('ours', 'raw'):.2f}", file=sys.stderr)
    return timed.result("ours", ["parser"], equal)
