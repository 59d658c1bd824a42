"""Bench case ``kafka_write``: our Kafka sink vs Spark's built-in one, same data, same run.

``BENCH_KAFKA_WRITE_ROWS`` rows (default 1M; key ``acct-<n % 1000>``, a ~100-byte value)
are staged once as Parquet (2 files, so 2 tasks on local[2]) and streamed in one
micro-batch (``Trigger.AvailableNow``) into a fresh 4-partition topic by: our sink with
``exactly_once`` (the BENCH figure), Spark's built-in Kafka sink (the baseline, at least
once, its defaults), our ``at_least_once`` (idempotent producer; the cost of 2PC is eo /
alo), and our ``exactly_once`` with a dead-letter table in PostgreSQL and no record
refused (``dl``: what configuring dead letters costs, the routing sink's plan and
decision and the topic's rules checked on every record), and ``exactly_once`` again with
the metrics exporter serving and scraped every half second (``mon``), and a Python sink
that reads every row and writes nothing (``floor``, ``bench.scaling.floor``). ``BENCH_ROUNDS``
rounds (default 6, at least 5), every variant once a round in that order; rows/s are
the rows over the median wall-clock seconds (``start()`` to termination) of the warm
rounds 1..n-1, round 0 (the session's first queries) printed apart as ``cold_ratio``, the
warm rounds' paired ratios as ``spread`` (``bench.common.Rounds``). ``equal``: read back with
``read_committed``, our topic holds every (key, value) of the baseline's exactly once
(``exceptAll`` both ways, distinct values = rows).

What stops the ratio: the machine's CPU seconds and the broker's are read around ``eo`` and
``floor`` (warm medians). With both cores busy, a Kafka sink whose own Python work cost
nothing would still take the floor's time plus the broker's CPU for the records, so
``bound`` = ``floor_vs_builtin`` x ``cpu_floor`` / (``cpu_floor`` + ``broker_eo``) is the
highest ratio any Python data source sink can reach here (as ``kafka_tasks``'s ``bound_t``).
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from bench.common import (
    RESULTS_DIR,
    BenchError,
    Result,
    Rounds,
    broker_pid,
    committed_records,
    machine_cpu_s,
    process_cpu_s,
    round_count,
    run_sql,
    services_env,
    spark_session,
    timed_parquet_stream,
)
from bench.scaling.floor import FORMAT as FLOOR
from bench.scaling.floor import register as register_floor

PARTITIONS = 4


def _stage(spark: Any, rows: int, path: str) -> None:
    from pyspark.sql import functions as F

    (spark.range(rows).select(
        F.concat(F.lit("acct-"), (F.col("id") % 1000).cast("string")).alias("key"),
        F.concat(F.col("id").cast("string"), F.lit(" "), F.sha1(F.col("id").cast("string")),
                 F.lit(" payment-event-padding-to-about-one-hundred-bytes-")).alias("value"),
    ).repartition(2).write.mode("overwrite").parquet(path))


def _topic(admin: AdminClient, name: str) -> str:
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(timeout=60)
    return name



@contextlib.contextmanager
def _monitored(spark: Any) -> Iterator[None]:
    """The metrics exporter serving, scraped every half second, while the query runs."""
    import threading
    import urllib.request

    from spark_ext import monitoring

    exporter = monitoring.serve(spark, port=0)
    done = threading.Event()

    def scrape() -> None:
        while not done.wait(0.5):
            urllib.request.urlopen(exporter.url, timeout=10).read()

    t = threading.Thread(target=scrape, daemon=True)
    t.start()
    try:
        yield
    finally:
        done.set()
        t.join(10)
        exporter.stop()


def run() -> Result:
    rows = int(os.environ.get("BENCH_KAFKA_WRITE_ROWS", "1000000"))
    timed = Rounds("kafka_write", round_count())
    bootstrap = services_env()["KAFKA_BOOTSTRAP_SERVERS"]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    spark = spark_session()
    register_floor(spark)
    broker = broker_pid("kafka_write")
    run_id = uuid.uuid4().hex[:8]
    made: list[str] = []

    url = services_env()["POSTGRES_URL"]
    dead = f"bench_kafka_dead_{run_id}"
    dl = {"deadLetter.connector": "jdbc", "deadLetter.url": url, "deadLetter.dbtable": dead,
          "deadLetter.createTable": "true"}

    def ours(guarantee: str, **opts: str) -> Any:
        def sink(w: Any, topic: str) -> Any:
            w = (w.format("hzsink").option("connector", "kafka").option("guarantee", guarantee)
                 .option("kafka.bootstrap.servers", bootstrap).option("topic", topic))
            for k, v in opts.items():
                w = w.option(k, v)
            return w
        return sink

    def builtin(w: Any, topic: str) -> Any:
        return w.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)

    def floor(w: Any, topic: str) -> Any:
        return w.format(FLOOR)

    last: dict[str, str] = {}
    cpu: dict[str, list[float]] = {"floor": [], "eo": [], "broker_eo": []}
    with tempfile.TemporaryDirectory() as tmp:
        src = f"{tmp}/src"
        _stage(spark, rows, src)
        sinks = (("spark", builtin), ("eo", ours("exactly_once")), ("alo", ours("at_least_once")),
                 ("dl", ours("exactly_once", **dl)), ("mon", ours("exactly_once")), ("floor", floor))
        for i in timed:
            for name, sink in sinks:
                topic = f"bench-write-{name}-{run_id}-{i}"
                if name != "floor":  # writes nowhere
                    made.append(_topic(admin, topic))
                m0, b0 = machine_cpu_s(), process_cpu_s(broker)
                with _monitored(spark) if name == "mon" else contextlib.nullcontext():
                    n, dt = timed_parquet_stream(spark, "kafka_write", src, f"{tmp}/ck-{name}-{i}",
                                                 lambda w, s=sink, t=topic: s(w, t))
                if i > 0 and name in ("eo", "floor"):  # warm rounds
                    cpu[name].append(machine_cpu_s() - m0)
                    if name == "eo":
                        cpu["broker_eo"].append(process_cpu_s(broker) - b0)
                if n != rows:
                    raise BenchError(f"kafka_write {name}: read {n} rows, expected {rows}")
                timed.add(name, i, n, dt)
                last[name] = topic
    ours_df, base_df = (committed_records(spark, bootstrap, last[name]) for name in ("eo", "spark"))
    equal = (ours_df.count() == rows and ours_df.select("value").distinct().count() == rows
             and ours_df.exceptAll(base_df).count() == 0 and base_df.exceptAll(ours_df).count() == 0)
    rates = {name: timed.rate(name) for name, _sink in sinks}  # warm medians
    extra = {"at_least_once_rows_per_s": rates["alo"],
             "exactly_once_vs_at_least_once": rates["eo"] / rates["alo"],
             "at_least_once_vs_builtin": rates["alo"] / rates["spark"],
             "dead_letters_vs_exactly_once": rates["dl"] / rates["eo"],
             "monitored_vs_exactly_once": rates["mon"] / rates["eo"],
             "floor_vs_builtin": rates["floor"] / rates["spark"]}
    med = {k: statistics.median(v) for k, v in cpu.items()}
    extra.update({f"cpu_{k}": v for k, v in med.items()})
    extra["bound"] = extra["floor_vs_builtin"] * med["floor"] / (med["floor"] + med["broker_eo"])
    print(f"[bench] kafka_write extra {json.dumps(extra)}", file=sys.stderr)
    RESULTS_DIR.mkdir(exist_ok=True)
    (Path(RESULTS_DIR) / "kafka_write_extra.json").write_text(json.dumps(extra, indent=2))
    for f in admin.delete_topics(made).values():
        f.result(timeout=60)
    run_sql(url, f"DROP TABLE IF EXISTS {dead}")
    return timed.result("eo", ["spark"], equal)
