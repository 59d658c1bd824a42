"""What ``scale_partitions`` and ``scale_record_size`` share: filled topics, a timed read
point and a timed write point, ours against Spark's own ``kafka`` format in one session.

A point reads a topic into Parquet with ``Trigger.AvailableNow`` (``bench.kafka_read``'s
reader) by both sources, then streams the same records, staged as key/value Parquet with
one file per topic partition, into a fresh topic of as many partitions by both sinks
(``bench.common.timed_parquet_stream``). Rates are the best of the rounds
(``BENCH_ROUNDS``, default 2), wall clock from ``start()`` to termination; the ``BENCH``
write cases report the median of warm rounds instead (``bench.common.Rounds``).
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.common import (
    BenchError,
    rounds,
    same_parquet_rows,
    spark_session,
    timed_parquet_stream,
    timed_parquet_write,
)
from bench.kafka_read import _reader
from bench.scaling.curves import scale_quick

quick = scale_quick


def xs(values: Sequence[int]) -> list[int]:
    return list(values[:2] if quick() else values)


def n_rounds() -> int:
    """One round when quick, else ``BENCH_ROUNDS`` (best of each: the first pays warm-up)."""
    return 1 if quick() else rounds()


def session() -> Any:
    """``bench.common.spark_session`` with every Parquet file its own task, so a staged
    input of P files is written by P tasks (Spark otherwise packs small files into about
    one task per core)."""
    spark = spark_session()
    spark.conf.set("spark.sql.files.openCostInBytes", str(1 << 30))
    return spark


def _holds(admin: AdminClient, bootstrap: str, name: str, partitions: int, rows: int) -> bool:
    """Whether topic ``name`` exists with ``partitions`` partitions holding ``rows`` records
    (it is filled without transactions, so offsets count records)."""
    md = admin.list_topics(timeout=30)
    if name not in md.topics:
        return False
    if len(md.topics[name].partitions) != partitions:
        return False
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench"})
    try:
        marks = [c.get_watermark_offsets(TopicPartition(name, p), timeout=30) for p in range(partitions)]
        # all of it still there: retention may have deleted the oldest records since
        return all(low == 0 for low, _high in marks) and sum(high for _low, high in marks) == rows
    finally:
        c.close()


# Kafka writes a partition's first offset- and time-index entry once 4,096 bytes
# (index.interval.bytes) have gone in since the segment began: the first write into its
# preallocated, memory-mapped index files. On this machine that costs 5-40 ms a partition,
# once per new partition: the second transaction of 16 KB or more into a new 64-partition
# topic took 0.3-2.6 s at the broker (its request log: local time 339 ms in one), and the
# same after a producer's two 5 KB batches per partition 11-22 ms.
INDEX_INTERVAL_BYTES = 4096


def warm_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Take a new topic past its partitions' first index entries, in a transaction that is
    aborted, so no ``read_committed`` reader sees a record of it: a case that times a sink
    against one that writes nothing (``kafka_tasks``) then times the sink, not a new
    topic's one-off set-up, which any Kafka producer meets on its second batch to each new
    partition."""
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-warm-{uuid.uuid4().hex}",
                  "linger.ms": 0})
    p.init_transactions(30)
    p.begin_transaction()
    for _ in range(2):  # the second batch to a partition is the one that writes its first entries
        for q in range(partitions):
            p.produce(topic, b"w" * (INDEX_INTERVAL_BYTES + 100), partition=q)
        p.flush(60)
    p.abort_transaction(60)


def fill_topic(bootstrap: str, name: str, partitions: int, rows: int, value_bytes: int,
               config: dict[str, str] | None = None) -> str:
    """Create and fill ``name`` once (as ``bench.kafka_read._topic``, for any partition count
    and value size); later runs reuse it when it is complete. Record ``i``: key
    ``k<i % 1000>``, a ``value_bytes`` value ending in ``i``, partition ``i % partitions``."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if _holds(admin, bootstrap, name, partitions, rows):
        return name
    if name in admin.list_topics(timeout=30).topics:
        admin.delete_topics([name])[name].result(timeout=60)
        deadline = time.monotonic() + 60
        while name in admin.list_topics(timeout=30).topics:  # deletion is asynchronous
            if time.monotonic() > deadline:
                raise BenchError(f"topic {name} still exists a minute after its deletion")
            time.sleep(0.2)
    admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(timeout=60)
    big = max(2 * value_bytes, 1 << 20)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
                  "queue.buffering.max.messages": 1_000_000, "compression.type": "none",
                  "message.max.bytes": big + 4096, "batch.size": big})
    pad = b"x" * (value_bytes - 12)
    t0 = time.monotonic()
    for i in range(rows):
        while True:
            try:
                p.produce(name, value=pad + b"%012d" % i, key=b"k%d" % (i % 1000), partition=i % partitions)
                break
            except BufferError:
                p.poll(0.05)
        if i % 5000 == 0:
            p.poll(0)
    if p.flush(300) != 0:
        raise BenchError(f"could not fill {name}: records left unsent")
    print(f"[bench] produced {rows} records of {value_bytes} B to {name} in {time.monotonic() - t0:.1f} s",
          file=sys.stderr)
    return name


@dataclass
class Point:
    """One x of a curve: best records/s per side, and whether every output held the input."""

    rates: dict[str, float] = field(default_factory=dict)
    equal: bool = True
    why: list[str] = field(default_factory=list)

    def best(self, side: str, rate: float) -> None:
        self.rates[side] = max(self.rates.get(side, 0.0), rate)

    def differs(self, why: str) -> None:
        self.equal = False
        self.why.append(why)
        print(f"[bench] NOT EQUAL: {why}", file=sys.stderr)


def read_point(spark: Any, case: str, bootstrap: str, topic: str, rows: int, tmp: str,
               opts: dict[str, str] | None = None) -> tuple[Point, str]:
    """Both sources read ``topic`` into Parquet, alternating, ``n_rounds()`` times each;
    ``opts`` go to both. Returns the point and the last output of Spark's source (one file
    per topic partition, one task per partition), which the write point stages from."""
    pt = Point()
    outs: dict[bool, str] = {}
    for i in range(n_rounds()):
        for ours in (False, True):
            out = f"{tmp}/read-{ours}-{i}"
            side = "ours" if ours else "spark"
            n, dt = timed_parquet_write("scale read", _reader(spark, side, bootstrap, topic, opts or {}), out,
                                        f"{tmp}/ck-read-{ours}-{i}")
            print(f"[bench] {case} {topic} read {side} round {i}: {n} rows in {dt:.2f} s", file=sys.stderr)
            if n != rows:
                pt.differs(f"{case} {topic}: {side} read {n} rows, the topic holds {rows}")
            pt.best(side, n / dt)
            outs[ours] = out
    if not same_parquet_rows(spark, outs[True], outs[False], rows):
        pt.differs(f"{case} {topic}: the sources' outputs differ (or do not hold all {rows} rows)")
    return pt, outs[False]


def count_committed(spark: Any, bootstrap: str, topic: str, opts: dict[str, str] | None = None) -> int:
    """Records of ``topic`` a ``read_committed`` consumer sees, read by Spark's own source."""
    r = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
         .option("kafka.isolation.level", "read_committed").option("startingOffsets", "earliest"))
    for k, v in (opts or {}).items():
        r = r.option(k, v)
    return int(r.load().count())


def write_point(spark: Any, case: str, bootstrap: str, read_out: str, rows: int, partitions: int,
                tmp: str, topic_config: dict[str, str] | None = None,
                spark_sink_opts: dict[str, str] | None = None,
                read_opts: dict[str, str] | None = None, floor: bool = False) -> Point:
    """Stage ``read_out``'s key/value as Parquet (one file per topic partition, so one task
    each), then stream it into a fresh ``partitions``-partition topic by our sink
    (``exactly_once``) and Spark's (at least once), alternating. Each written topic is
    counted with ``read_committed`` and deleted. ``floor``: also the same input into a
    Python data source sink that writes nothing (``bench.scaling.floor``), side ``floor``."""
    src = f"{tmp}/stage"
    spark.read.parquet(read_out).select("key", "value").write.mode("overwrite").parquet(src)
    tasks = spark.read.parquet(src).rdd.getNumPartitions()
    if tasks != partitions:
        print(f"[bench] {case}: staged input has {tasks} tasks, not {partitions}", file=sys.stderr)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    run_id = uuid.uuid4().hex[:8]

    def ours(w: Any, topic: str) -> Any:
        return (w.format("hzsink").option("connector", "kafka").option("guarantee", "exactly_once")
                .option("kafka.bootstrap.servers", bootstrap).option("topic", topic))

    def builtin(w: Any, topic: str) -> Any:
        w = w.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
        for k, v in (spark_sink_opts or {}).items():
            w = w.option(k, v)
        return w

    pt = Point()
    made: list[str] = []
    if floor:
        from bench.scaling.floor import FORMAT, register

        register(spark)
    try:
        for i in range(n_rounds()):
            if floor:
                n, dt = timed_parquet_stream(spark, case, src, f"{tmp}/ck-write-floor-{i}",
                                             lambda w: w.format(FORMAT))
                print(f"[bench] {case} write floor p={partitions} round {i}: {n} rows in {dt:.2f} s",
                      file=sys.stderr)
                if n != rows:
                    pt.differs(f"{case}: the floor sink read {n} staged rows, expected {rows}")
                pt.best("floor", n / dt)
            for side, sink in (("spark", builtin), ("ours", ours)):
                topic = f"bench-{case.replace('_', '-')}-w-{side}-p{partitions}-{run_id}-{i}"
                new = NewTopic(topic, partitions, 1, config=topic_config or {})
                admin.create_topics([new])[topic].result(timeout=60)
                made.append(topic)
                n, dt = timed_parquet_stream(spark, case, src, f"{tmp}/ck-write-{side}-{i}",
                                             lambda w, s=sink, t=topic: s(w, t))
                print(f"[bench] {case} write {side} p={partitions} round {i}: {n} rows in {dt:.2f} s",
                      file=sys.stderr)
                if n != rows:
                    pt.differs(f"{case}: {side} sink read {n} staged rows, expected {rows}")
                pt.best(side, n / dt)
                have = count_committed(spark, bootstrap, topic, read_opts)
                if have != rows:
                    pt.differs(f"{case}: {side} sink's topic {topic} holds {have} committed records, "
                               f"expected {rows}")
    finally:
        if made:
            for f in admin.delete_topics(made).values():
                f.result(timeout=60)
    return pt


def ratios(curve: Any, ours: str, theirs: str, x_values: Sequence[float]) -> str:
    """ours/spark per x, two decimals, ``-`` where a point is missing."""
    out = []
    for x in x_values:
        a, b = curve.at(ours, x), curve.at(theirs, x)
        out.append(f"{a / b:.2f}" if a is not None and b else "-")
    return " ".join(out)
