"""What every bench case shares: the result line, the services' addresses, a Spark session."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import services as local_services
from services.env import ServicesEnvError, load_env

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "bench" / "results"


def rounds() -> int:
    """Rounds of a write case, best of each (``BENCH_ROUNDS``, default 2: the first pays JVM
    and worker warm-up; more rounds narrow the spread when two variants are compared)."""
    return max(1, int(os.environ.get("BENCH_ROUNDS", "2")))


class BenchError(Exception):
    """A bench case could not run (a query failed, a service is missing)."""


@dataclass(frozen=True)
class Result:
    case: str
    ours: float
    baseline: float
    equal: bool

    @property
    def ratio(self) -> float:
        return self.ours / self.baseline if self.baseline else float("nan")

    def line(self) -> str:
        return (f"BENCH {self.case} ours={self.ours:.0f} baseline={self.baseline:.0f} "
                f"ratio={self.ratio:.2f} equal={str(self.equal).lower()}")


def run_sql(url: str, stmt: str) -> list[tuple[Any, ...]]:
    """One statement in its own transaction on a throwaway engine; the rows, if any."""
    import sqlalchemy as sa

    eng = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with eng.begin() as c:
            res = c.execute(sa.text(stmt))
            return [tuple(r) for r in res] if res.returns_rows else []
    finally:
        eng.dispose()


def services_env() -> dict[str, str]:
    """Addresses ``make services`` wrote; environment variables of the same name win."""
    try:
        return load_env()
    except ServicesEnvError as e:
        raise BenchError(str(e)) from None


def spark_session() -> Any:
    """local[2] (the machine's two cores) with Spark's own Kafka connector on the classpath."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import spark_ext

    builder = (
        SparkSession.builder.master("local[2]").appName("spark-ext-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.memory", "4g")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.jars", ",".join(local_services.baseline_jars()))
    )
    session = spark_ext.configure(builder).getOrCreate()  # with the JVM companion jar (make jvm)
    session.sparkContext.setLogLevel("ERROR")
    return session


def timed_parquet_stream(spark: Any, case: str, src: str, ckpt: str, sink: Any) -> tuple[int, float]:
    """Stream the Parquet files at ``src`` through ``sink(writeStream)`` in one AvailableNow
    run; (rows read, wall-clock seconds from ``start()`` to termination)."""
    df = spark.readStream.schema(spark.read.parquet(src).schema).parquet(src)
    t0 = time.monotonic()
    q = sink(df.writeStream).option("checkpointLocation", ckpt).trigger(availableNow=True).start()
    q.awaitTermination()
    dt = time.monotonic() - t0
    if q.exception() is not None:
        raise BenchError(f"{case} query failed: {q.exception()}")
    return sum(p["numInputRows"] for p in q.recentProgress), dt


def read_to_end(consumer: Any, topic: str, timeout_s: float = 120) -> list[Any]:
    """Every record of ``topic`` up to its end offsets (the last stable offsets when
    ``consumer`` reads ``read_committed``), read until each position reaches its end: never
    "stop after some silence". ``consumer``: an unassigned kafka-python ``KafkaConsumer``."""
    return list(iter_to_end(consumer, topic, timeout_s))


def iter_to_end(consumer: Any, topic: str, timeout_s: float = 120) -> Iterator[Any]:
    """``read_to_end`` one record at a time, for topics too large to hold as a list."""
    from kafka import TopicPartition

    parts = consumer.partitions_for_topic(topic)
    if not parts:
        raise LookupError(f"no metadata for topic {topic}")
    tps = [TopicPartition(topic, p) for p in sorted(parts)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    end = consumer.end_offsets(tps)
    deadline = time.monotonic() + timeout_s
    while any(consumer.position(tp) < end[tp] for tp in tps):
        if time.monotonic() > deadline:
            raise TimeoutError(f"could not read {topic} to its end {end}")
        for tp, recs in consumer.poll(timeout_ms=500).items():
            yield from (r for r in recs if r.offset < end[tp])


def kafka_sink_prefix(checkpoint: object) -> str:
    """The transactional-id prefix the Kafka sink derives from ``checkpoint`` by default."""
    from spark_ext.connectors.kafka.sink.config import KafkaSinkConfig
    from spark_ext.guarantees import Guarantee
    from spark_ext.options import Options

    o = Options({"kafka.bootstrap.servers": "x:1", "topic": "t", "checkpointlocation": str(checkpoint)},
                "hzsink")
    return KafkaSinkConfig.parse(o, Guarantee.EXACTLY_ONCE).txn_prefix


def drain_queue(env: dict[str, str], queue: str, timeout_s: float = 120) -> list[str]:
    """Every message body on STOMP destination ``queue``, consumed by an independent
    stomp.py client up to a sentinel sent now (a queue is FIFO: nothing sent before the
    sentinel is left behind it)."""
    import threading
    import uuid

    import stomp

    sentinel = f"sentinel-{uuid.uuid4().hex}"
    got: list[str] = []
    done = threading.Event()

    class Listener(stomp.ConnectionListener):
        def on_message(self, frame: stomp.utils.Frame) -> None:
            if frame.body == sentinel:
                done.set()
            else:
                got.append(frame.body)

    conn = stomp.Connection12([(env["STOMP_HOST"], int(env["STOMP_PORT"]))], heartbeats=(0, 0))
    conn.connect(env["STOMP_USER"], env["STOMP_PASSWORD"], wait=True)
    try:
        conn.send(queue, sentinel, headers={"persistent": "true"})
        conn.set_listener("drain", Listener())
        conn.subscribe(queue, id="drain", ack="auto")
        if not done.wait(timeout_s):
            raise BenchError(f"{queue} not drained within {timeout_s:.0f} s")
        return got
    finally:
        # With a receipt id stomp.py waits for it: what the broker delivered (and so
        # acknowledged) after the sentinel is in ``got`` too.
        conn.disconnect(receipt="bye")
