"""Bench case ``peer_kafka_eo``: our exactly-once Kafka -> Kafka pipeline against the engines a
team would pick instead, same input, same interval, same run.

- ours: ``hzsource`` kafka -> ``hzsink`` kafka ``exactly_once``, ``local[2]``,
  ``Trigger.ProcessingTime(interval)``;
- Kafka Streams 4.1.1 (the broker's version), ``processing.guarantee=exactly_once_v2``,
  ``commit.interval.ms`` = interval, two stream threads;
- Flink 2.2, ``KafkaSource`` -> ``KafkaSink`` ``DeliveryGuarantee.EXACTLY_ONCE``, local
  MiniCluster, parallelism 2, checkpoint interval = interval.

``BENCH_PEER_ROWS`` records (default 1M; key ``acct-<n % 1000>``, ~100-byte values) are
produced once into a 4-partition input topic; each engine copies it to a fresh 4-partition
topic, ``BENCH_PEER_ROUNDS`` rounds (else ``BENCH_ROUNDS``; default 6, at least 5), the
engines in turn within a round. A figure is the input over the median seconds of the warm
rounds 1..n-1; round 0 (ours' first query of the session) is printed apart as
``cold_ratio``, the warm rounds' paired ratios as ``spread``, both against the peer with
the best median (``bench.common.Rounds``). Each engine is timed from its job's start (the
Spark session, the Flink MiniCluster and the JVMs already up) to the moment the last
record is committed: ours when the query's progress has counted every record (progress
is reported after the sink's commit), the peers when their own ``read_committed``
consumer has. ``equal``: every output topic, read ``read_committed``, holds every input
record (key and value) exactly once. ``BENCH_PEER_INTERVAL_MS`` (default 1000) sets the
interval.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.common import (
    RESULTS_DIR,
    BenchError,
    Result,
    Rounds,
    iter_to_end,
    round_count,
    services_env,
    spark_session,
)
from bench.peer_jobs import ENGINES, peers_jar, run_peer

PARTITIONS = 4
PAD = b" payment-event-padding-to-about-one-hundred-bytes-" + b"x" * 30


def interval_ms() -> int:
    return int(os.environ.get("BENCH_PEER_INTERVAL_MS", "1000"))


def record(seq: int, stamp_ns: int = 0) -> tuple[bytes, bytes]:
    """Key and value of input record ``seq``; the value starts with the sequence number and
    (for the latency case) the produce time in ns, so any copy can be checked and timed."""
    return b"acct-%d" % (seq % 1000), b"%012d %019d" % (seq, stamp_ns) + PAD


def parse(value: bytes) -> tuple[int, int]:
    """(sequence number, produce time in ns) from a value ``record`` made."""
    return int(value[:12]), int(value[13:32])


def make_topics(bootstrap: str, names: list[str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(n, PARTITIONS, 1) for n in names]).values():
        f.result(timeout=60)


def delete_topics(bootstrap: str, names: list[str]) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})  # held: the futures need a live handle
    for f in admin.delete_topics(names).values():
        f.result(timeout=60)


def producer(bootstrap: str, linger_ms: int) -> Any:
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, "linger.ms": linger_ms,
                     "queue.buffering.max.messages": 1_000_000})


def _fill(bootstrap: str, topic: str, rows: int) -> None:
    p = producer(bootstrap, 20)
    for i in range(rows):
        key, value = record(i)
        while True:
            try:
                p.produce(topic, value=value, key=key)
                break
            except BufferError:
                p.poll(0.05)
        if i % 20000 == 0:
            p.poll(0)
    if p.flush(120) != 0:
        raise BenchError(f"could not produce {rows} records to {topic}")


#: Spark pipelines by name: (our source?, our sink?). ``ours_source`` and ``ours_sink`` mix
#: ours with Spark's connector (at-least-once sink / plain source) to split a batch's time.
SPARK_PIPELINES = {"ours": (True, True), "spark": (False, False),
                   "ours_source": (True, False), "ours_sink": (False, True)}


def spark_copy(spark: Any, engine: str, bootstrap: str, source: str, sink: str, ckpt: str,
               interval: int) -> Any:
    """Start a Kafka -> Kafka query of ``SPARK_PIPELINES[engine]`` reading ``source`` from
    the start: ours is hzsource / hzsink ``exactly_once``; Spark's, its built-in source and
    (at-least-once) sink."""
    our_source, our_sink = SPARK_PIPELINES[engine]
    r = spark.readStream.format("hzsource").option("connector", "kafka") if our_source else \
        spark.readStream.format("kafka")
    df = (r.option("kafka.bootstrap.servers", bootstrap).option("subscribe", source)
          .option("startingOffsets", "earliest").load().select("key", "value"))
    w = df.writeStream
    w = w.format("hzsink").option("connector", "kafka").option("guarantee", "exactly_once") if our_sink else \
        w.format("kafka")
    return (w.option("kafka.bootstrap.servers", bootstrap).option("topic", sink)
            .option("checkpointLocation", ckpt).trigger(processingTime=f"{interval} milliseconds").start())


class Progress:
    """Rows the query's batches have committed, from its progress reports (kept per batch
    id: ``recentProgress`` holds only the latest reports)."""

    def __init__(self, query: Any) -> None:
        self.query = query
        self.rows: dict[int, int] = {}

    def committed(self) -> int:
        if self.query.exception() is not None:
            raise BenchError(f"query failed: {self.query.exception()}")
        for p in self.query.recentProgress:
            self.rows[p["batchId"]] = p["numInputRows"]
        return sum(self.rows.values())


def _ours_timed(spark: Any, bootstrap: str, source: str, sink: str, ckpt: str, rows: int,
                interval: int, timeout_s: float = 600) -> float:
    t0 = time.monotonic()
    q = spark_copy(spark, "ours", bootstrap, source, sink, ckpt, interval)
    progress = Progress(q)
    try:
        while progress.committed() < rows:
            if time.monotonic() - t0 > timeout_s:
                raise BenchError(f"peer_kafka_eo ours: {progress.committed()} of {rows} rows "
                                 f"in {timeout_s:.0f} s")
            time.sleep(0.05)
        return time.monotonic() - t0
    finally:
        q.stop()


def every_record_once(bootstrap: str, topic: str, rows: int) -> bool:
    """``topic`` read ``read_committed`` holds input records 0..rows-1, each once, unchanged."""
    from kafka import KafkaConsumer

    c = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                      enable_auto_commit=False, max_partition_fetch_bytes=8 << 20, fetch_max_bytes=32 << 20)
    seen = bytearray(rows)
    try:
        for r in iter_to_end(c, topic, timeout_s=600):
            seq, stamp = parse(r.value)
            if not 0 <= seq < rows or seen[seq] or (r.key, r.value) != record(seq, stamp):
                print(f"[bench] {topic}: unexpected or repeated record {seq}", file=sys.stderr)
                return False
            seen[seq] = 1
    finally:
        c.close()
    missing = rows - sum(seen)
    if missing:
        print(f"[bench] {topic}: {missing} of {rows} records missing", file=sys.stderr)
    return missing == 0


def run() -> Result:
    rows = int(os.environ.get("BENCH_PEER_ROWS", "1000000"))
    timed = Rounds("peer_kafka_eo", round_count("BENCH_PEER_ROUNDS"))
    interval = interval_ms()
    bootstrap = services_env()["KAFKA_BOOTSTRAP_SERVERS"]
    peers_jar()  # built (first use only) before anything is timed
    run_id = uuid.uuid4().hex[:8]
    source = f"peer-eo-in-{run_id}"
    make_topics(bootstrap, [source])
    made = [source]
    t = time.monotonic()
    _fill(bootstrap, source, rows)
    print(f"[bench] peer_kafka_eo: {rows} records into {source} in {time.monotonic() - t:.1f} s",
          file=sys.stderr)
    spark = spark_session()
    last: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i in timed:  # alternate engines, so drift in the machine's load hits all alike
            for engine in ("ours", *ENGINES):
                sink = f"peer-eo-{engine.replace('_', '-')}-{run_id}-{i}"
                make_topics(bootstrap, [sink])
                made.append(sink)
                if engine == "ours":
                    dt = _ours_timed(spark, bootstrap, source, sink, f"{tmp}/ck-{i}", rows, interval)
                else:
                    dt = run_peer(engine, bootstrap, source, sink, rows, interval,
                                  f"peer-{engine}-{run_id}-{i}", Path(tmp) / f"{engine}-{i}.log").seconds
                timed.add(engine, i, rows, dt, "records")
                last[engine] = sink
    equal = all([every_record_once(bootstrap, last[e], rows) for e in ("ours", *ENGINES)])
    rates = {e: timed.rate(e) for e in ("ours", *ENGINES)}  # warm medians
    for e in ENGINES:
        lo, hi = timed.spread("ours", e)
        print(f"[bench] peer_kafka_eo peer {e}={rates[e]:.0f} rec/s (warm median) ours/{e}="
              f"{rates['ours'] / rates[e]:.2f} cold {timed.cold_ratio('ours', e):.2f} "
              f"spread {lo:.2f}-{hi:.2f}", file=sys.stderr)
    # rows_per_s: warm medians; rows_per_s_by_round: every round, round 0 the cold one
    extra = {"rows": rows, "interval_ms": interval, "rounds": timed.n, "rows_per_s": rates,
             "rows_per_s_by_round": {e: [rows / dt for dt in s] for e, s in timed.seconds.items()},
             "settings": SETTINGS}
    RESULTS_DIR.mkdir(exist_ok=True)
    (Path(RESULTS_DIR) / "peer_kafka_eo_extra.json").write_text(json.dumps(extra, indent=2))
    delete_topics(bootstrap, made)
    return timed.result("ours", ENGINES, equal)


#: Each engine's settings, for the results file (the README's table quotes them).
SETTINGS = {
    "ours": "hzsource kafka -> hzsink kafka guarantee=exactly_once, local[2], ProcessingTime(interval)",
    "kafka_streams": "4.1.1, exactly_once_v2, commit.interval.ms=interval, num.stream.threads=2",
    "flink": "2.2.0 + flink-connector-kafka 5.0.0-2.2, KafkaSink EXACTLY_ONCE, MiniCluster parallelism 2, "
             "checkpoint interval=interval, transaction.timeout.ms=600000",
    "spark": "Spark's kafka source and sink (at least once), local[2], ProcessingTime(interval)",
}
