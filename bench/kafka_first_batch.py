"""Bench case ``kafka_first_batch``: a query's first batch, each in a driver process of its
own, so every figure is a true first batch of a Spark application.

``kafka_write``'s cold round is one first batch per run, beside warm rounds; this case
takes the first batch alone and asks what of it is ours. ``BENCH_FIRST_BATCH_ROWS`` rows
(default 1M; key ``acct-<n % 1000>``, a ~100-byte value, 2 Parquet files) are written in
one micro-batch (``Trigger.AvailableNow``) by three variants, each in a fresh driver
(``python -m bench.kafka_first_batch <variant> ...``: a new JVM and a new Spark session;
the session's start-up is not timed, the query is, from ``start()`` to termination):
Spark's ``kafka`` sink (the baseline), a Python data source sink that writes nothing
(``bench.scaling.floor``: what any Python sink's first batch pays, Spark's Python workers
started), and our sink with ``exactly_once``. ``BENCH_ROUNDS`` rounds (default 6, at least
5), the three in turn each round; every round is a first batch, so the figures are the
medians of all rounds. ``ratio`` = ours / Spark's (rows/s); ``ratio_floor`` = ours / the
floor's; ``floor_vs_spark`` = the floor's / Spark's: the most a Python sink's first batch
can reach. ``equal``: the last round's two topics each hold exactly the staged rows,
read_committed.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from bench.common import BenchError, Result, round_count, services_env, spark_session, timed_parquet_stream

VARIANTS = ("spark", "floor", "ours")


def _child(variant: str, src: str, topic: str, ckpt: str) -> None:
    """One first batch in this fresh process; prints ``FIRST <seconds> <rows>``."""
    bootstrap = services_env()["KAFKA_BOOTSTRAP_SERVERS"]
    spark = spark_session()
    if variant == "floor":
        from bench.scaling.floor import FORMAT, register

        register(spark)

        def sink(w: Any) -> Any:
            return w.format(FORMAT)
    elif variant == "spark":
        def sink(w: Any) -> Any:
            return w.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
    else:
        def sink(w: Any) -> Any:
            return (w.format("hzsink").option("connector", "kafka").option("guarantee", "exactly_once")
                    .option("kafka.bootstrap.servers", bootstrap).option("topic", topic))
    n, dt = timed_parquet_stream(spark, "kafka_first_batch", src, ckpt, sink)
    print(f"FIRST {dt:.4f} {n}", flush=True)
    spark.stop()


def _first(variant: str, src: str, topic: str, ckpt: str) -> tuple[float, int]:
    done = subprocess.run([sys.executable, "-m", "bench.kafka_first_batch", variant, src, topic, ckpt],
                          capture_output=True, text=True, timeout=600)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("FIRST ")]
    if done.returncode != 0 or not lines:
        raise BenchError(f"kafka_first_batch {variant}: exit {done.returncode}: {done.stderr[-2000:]}")
    _, seconds, rows = lines[-1].split()
    return float(seconds), int(rows)


def run() -> Result:
    from bench.kafka_write import _stage
    from bench.scaling.kafka_common import count_committed

    rows = int(os.environ.get("BENCH_FIRST_BATCH_ROWS", "1000000"))
    n_rounds = round_count()
    bootstrap = services_env()["KAFKA_BOOTSTRAP_SERVERS"]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    spark = spark_session()  # stages the input and counts the outputs; idle while the drivers run
    run_id = uuid.uuid4().hex[:8]
    seconds: dict[str, list[float]] = {v: [] for v in VARIANTS}
    made: list[str] = []
    last: dict[str, str] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            src = f"{tmp}/src"
            _stage(spark, rows, src)
            for i in range(n_rounds):
                for v in VARIANTS:
                    topic = f"bench-first-{v}-{run_id}-{i}"
                    if v != "floor":
                        admin.create_topics([NewTopic(topic, 4, 1)])[topic].result(timeout=60)
                        made.append(topic)
                        last[v] = topic
                    t0 = time.monotonic()
                    dt, n = _first(v, src, topic, f"{tmp}/ck-{v}-{i}")
                    if n != rows:
                        raise BenchError(f"kafka_first_batch {v}: read {n} rows, expected {rows}")
                    seconds[v].append(dt)
                    print(f"[bench] kafka_first_batch {v} round {i}: first batch {dt:.2f} s (driver process "
                          f"{time.monotonic() - t0:.1f} s)", file=sys.stderr)
            equal = all(count_committed(spark, bootstrap, last[v]) == rows for v in ("spark", "ours"))
    finally:
        if made:
            for f in admin.delete_topics(made).values():
                f.result(timeout=60)
    med = {v: statistics.median(s) for v, s in seconds.items()}
    paired = [sp / o for sp, o in zip(seconds["spark"], seconds["ours"], strict=True)]
    return Result("kafka_first_batch", rows / med["ours"], rows / med["spark"], equal,
                  spread=(min(paired), max(paired)), rounds=n_rounds,
                  figures={"ratio_floor": med["floor"] / med["ours"],
                           "floor_vs_spark": med["spark"] / med["floor"]},
                  detail={"method": f"median of {n_rounds} first batches, each in a fresh driver process",
                          "seconds": seconds, "median_s": med})


if __name__ == "__main__":
    _child(*sys.argv[1:5])
