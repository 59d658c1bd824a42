"""Curve ``scale_commit``: what committing one micro-batch costs against its task count.

Why: an exactly-once sink's driver finishes every task's transaction after the batch's
decision, so a commit whose steps run once per task, one round trip each, grows with the
task count; Spark's own settings, not ours, set that count (200 after any shuffle at the
defaults). Rows are kept few (20 a task) so what grows is the cost per task, not per row.

For each N in 1, 4, 16, 64, 200 and each sink (ours ``exactly_once`` into Kafka,
PostgreSQL and an Artemis queue; Spark's ``kafka`` format and its JDBC writer from
``foreachBatch``, both at least once): one streaming query reads a directory of Parquet
files (one file a batch, ``maxFilesPerTrigger`` 1) and ``repartition(N)``s it before the
sink, so exactly N tasks write each batch. One warm-up batch (it pays the query's start,
and our sinks' first-batch checks), then 3 timed batches, each a new file of 20·N rows,
waited for on the query's progress. Timed per batch: the driver's commit (ours only:
``decide_ms + commit_ms`` of the sink's metrics card, from the tasks' reports to done)
and Spark's ``addBatch`` (the tasks and the commit). The y of a point is the median over
the timed batches (``SCALE_COMMIT_TIMED`` of them, default 3). ``SCALE_QUICK=1``: N in
1, 4, 16 and one timed batch (smoke tests).

``equal``: every target, read back at the end (Kafka ``read_committed``, the table's
ids, the queue drained), holds every row written to it exactly once.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import BenchError, drain_queue, read_to_end, run_sql, services_env, spark_session
from bench.scaling.curves import Curve, scale_quick

CASE = "scale_commit"
TASKS = (1, 4, 16, 64, 200)
QUICK_TASKS = (1, 4, 16)
ROWS_PER_TASK = 20
TIMED = 3
KAFKA_PARTITIONS = 4
TRIGGER = "100 milliseconds"  # an idle query lists the source directory this often, not every 10 ms
BATCH_TIMEOUT_S = 300
SCHEMA = "id LONG, key STRING, value STRING"


quick = scale_quick


@dataclass
class Sink:
    """One measured sink: how its query writes, and what its target must hold at the end."""

    name: str  # the series' prefix
    ours: bool  # an exactly-once sink of ours (it writes metrics cards)
    start: Callable[[Any, str], Any]  # (a repartitioned DataFrame, checkpoint) -> a started query
    read_back: Callable[[], list[str]]  # the target's values, one per row it holds
    written: list[str] = field(default_factory=list)


@dataclass
class Timed:
    """One batch's figures (``commit_ms`` None for Spark's sinks, which write no card)."""

    add_batch_ms: float
    commit_ms: float | None


def _write_file(src: Path, stage: Path, n: int, batch: int, first_id: int) -> list[str]:
    """The batch's input: one Parquet file of ``ROWS_PER_TASK * n`` rows, written beside
    ``src`` and renamed into it, so the file source never lists half a file. Its values."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = ROWS_PER_TASK * n
    ids = list(range(first_id, first_id + rows))
    values = [f"n{n}-b{batch}-{i}" for i in ids]
    table = pa.table({"id": pa.array(ids, pa.int64()), "key": [f"k{i % 100}" for i in ids], "value": values})
    tmp = stage / f"n{n}-b{batch}.parquet"
    pq.write_table(table, tmp)
    os.replace(tmp, src / tmp.name)
    return values


def _progress(q: Any, batch: int) -> dict[str, Any]:
    """Batch ``batch``'s progress, once the query reports it. ``processAllAvailable`` may
    return on a trigger that listed the directory just before the file arrived, so it is
    asked again until the batch is there (each call waits for a trigger, no sleeping)."""
    deadline = time.monotonic() + BATCH_TIMEOUT_S
    while True:
        for p in reversed(q.recentProgress):
            if p["batchId"] == batch and "addBatch" in p["durationMs"]:
                return dict(p)
        if q.exception() is not None:
            raise BenchError(f"{CASE}: query {q.name} failed: {q.exception()}")
        if time.monotonic() > deadline:
            raise BenchError(f"{CASE}: query {q.name} did not run batch {batch} in {BATCH_TIMEOUT_S} s")
        q.processAllAvailable()


def _card(query_id: str, batch: int) -> dict[str, Any]:
    """Our sink's metrics card of ``batch`` (written in the driver's commit worker before
    Spark's commit log, so before the batch's progress)."""
    from spark_ext.monitoring import cards

    found = cards.read(query_id)
    if len(found) != 1:
        raise BenchError(
            f"{CASE}: {len(found)} metrics cards for query {query_id} under {cards.root()}, expected one. "
            f"Was {cards.ENV} set before Spark's JVM started? Run this case in a process of its own")
    card = found[0]
    if card.get("batch") != batch:
        raise BenchError(f"{CASE}: the card of query {query_id} is of batch {card.get('batch')}, not {batch}")
    return card


def _measure(spark: Any, sink: Sink, n: int, timed: int, root: Path, next_id: int) -> tuple[list[Timed], int]:
    """One query of ``sink`` at ``n`` tasks: a warm-up batch, then ``timed`` batches.
    Returns their figures and the next unused row id."""
    src, stage = root / f"{sink.name}-n{n}-src", root / f"{sink.name}-n{n}-stage"
    src.mkdir()
    stage.mkdir()
    df = (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(src))
          .repartition(n))
    q = sink.start(df, str(root / f"{sink.name}-n{n}-ck"))
    out: list[Timed] = []
    try:
        for b in range(timed + 1):
            sink.written += _write_file(src, stage, n, b, next_id)
            next_id += ROWS_PER_TASK * n
            p = _progress(q, b)
            if p["numInputRows"] != ROWS_PER_TASK * n:
                raise BenchError(f"{CASE}: {sink.name} n={n} batch {b} read {p['numInputRows']} rows, "
                                 f"expected {ROWS_PER_TASK * n}")
            add = float(p["durationMs"]["addBatch"])
            commit = None
            extra = ""
            if sink.ours:
                card = _card(q.id, b)
                commit = float(card["decide_ms"]) + float(card["commit_ms"])
                if card.get("transactions") != n:
                    print(f"[bench] {CASE} {sink.name} n={n} batch {b}: the card counts "
                          f"{card.get('transactions')} transactions, not {n}", file=sys.stderr)
                extra = (f" decide_ms={card['decide_ms']} commit_ms={card['commit_ms']} "
                         f"batch_ms={card.get('batch_ms')} transactions={card.get('transactions')}")
            print(f"[bench] {CASE} {sink.name} n={n} batch {b}{' (warm-up)' if b == 0 else ''}: "
                  f"addBatch_ms={add:.0f}{extra}", file=sys.stderr, flush=True)
            if b > 0:
                out.append(Timed(add, commit))
    finally:
        q.stop()
    return out, next_id


def _kafka_sinks(env: dict[str, str], tag: str, made: list[str]) -> list[Sink]:
    """Ours (``exactly_once``) and Spark's ``kafka`` format, each into a topic of its own."""
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka import KafkaConsumer

    bootstrap = env["KAFKA_BOOTSTRAP_SERVERS"]
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def topic(side: str) -> str:
        name = f"bench-scale-commit-{side}-{tag}"
        admin.create_topics([NewTopic(name, KAFKA_PARTITIONS, 1)])[name].result(timeout=60)
        made.append(name)
        return name

    def read(name: str) -> Callable[[], list[str]]:
        def values() -> list[str]:
            c = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                              enable_auto_commit=False)
            try:
                return [r.value.decode() for r in read_to_end(c, name)]
            finally:
                c.close()
        return values

    ours_topic, spark_topic = topic("ours"), topic("spark")

    def ours(df: Any, ck: str) -> Any:
        return (df.select("key", "value").writeStream.format("hzsink").option("connector", "kafka")
                .option("guarantee", "exactly_once").option("kafka.bootstrap.servers", bootstrap)
                .option("topic", ours_topic).option("checkpointLocation", ck).trigger(processingTime=TRIGGER)
                .start())

    def builtin(df: Any, ck: str) -> Any:
        return (df.select("key", "value").writeStream.format("kafka")
                .option("kafka.bootstrap.servers", bootstrap).option("topic", spark_topic)
                .option("checkpointLocation", ck).trigger(processingTime=TRIGGER).start())

    return [Sink("kafka", True, ours, read(ours_topic)),
            Sink("spark kafka", False, builtin, read(spark_topic))]


def _postgres_sinks(env: dict[str, str], tag: str, made: list[str]) -> list[Sink]:
    """Ours (``exactly_once``) and Spark's JDBC writer from ``foreachBatch``, each into a table."""
    import sqlalchemy as sa

    url = env["POSTGRES_URL"]
    u = sa.engine.make_url(url)
    jdbc_url = f"jdbc:postgresql://{u.host}:{u.port or 5432}/{u.database}"
    props = {"user": u.username or "", "password": u.password or "", "driver": "org.postgresql.Driver"}
    ours_table, spark_table = f"bench_scale_commit_ours_{tag}", f"bench_scale_commit_spark_{tag}"
    for t in (ours_table, spark_table):
        run_sql(url, f"DROP TABLE IF EXISTS {t}")
        run_sql(url, f"CREATE TABLE {t} (id bigint PRIMARY KEY, value text)")
        made.append(t)

    def read(table: str) -> Callable[[], list[str]]:
        def values() -> list[str]:
            return [str(v) for (v,) in run_sql(url, f"SELECT value FROM {table}")]
        return values

    def ours(df: Any, ck: str) -> Any:
        return (df.select("id", "value").writeStream.format("hzsink").option("connector", "jdbc")
                .option("guarantee", "exactly_once").option("url", url).option("dbtable", ours_table)
                .option("checkpointLocation", ck).trigger(processingTime=TRIGGER).start())

    def spark_jdbc(df: Any, ck: str) -> Any:
        def write(batch: Any, _batch_id: int) -> None:
            batch.write.jdbc(jdbc_url, spark_table, "append", props)

        return (df.select("id", "value").writeStream.foreachBatch(write).option("checkpointLocation", ck)
                .trigger(processingTime=TRIGGER).start())

    return [Sink("postgres", True, ours, read(ours_table)),
            Sink("spark jdbc", False, spark_jdbc, read(spark_table))]


def _queue_sink(env: dict[str, str], tag: str) -> Sink:
    """Ours (``exactly_once``) into an Artemis queue over STOMP; Spark has no queue sink."""
    dest = f"/queue/bench-scale-commit-{tag}"

    def ours(df: Any, ck: str) -> Any:
        return (df.selectExpr("value AS body").writeStream.format("hzsink").option("connector", "jms")
                .option("guarantee", "exactly_once").option("host", env["STOMP_HOST"])
                .option("port", env["STOMP_PORT"]).option("user", env["STOMP_USER"])
                .option("password", env["STOMP_PASSWORD"]).option("destination", dest)
                .option("checkpointLocation", ck).trigger(processingTime=TRIGGER).start())

    return Sink("queue", True, ours, lambda: drain_queue(env, dest, 300))


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs))


def run() -> Curve:
    tasks = QUICK_TASKS if quick() else TASKS
    timed = 1 if quick() else int(os.environ.get("SCALE_COMMIT_TIMED", str(TIMED)))
    env = services_env()
    from pyspark import SparkContext

    from spark_ext.monitoring import cards

    if SparkContext._gateway is not None:  # the JVM, and so its Python workers' environment, exists already
        print(f"[bench] {CASE}: Spark's JVM started before this case set {cards.ENV}; if its workers do not "
              "see it, no metrics card is written and the case stops", file=sys.stderr)
    metrics = Path(tempfile.mkdtemp(prefix="spark-ext-scale-commit-metrics-"))
    os.environ[cards.ENV] = str(metrics)  # before the session: the Python workers inherit it
    spark = spark_session()
    tag = uuid.uuid4().hex[:8]
    topics: list[str] = []
    tables: list[str] = []
    sinks = [*_kafka_sinks(env, tag, topics), *_postgres_sinks(env, tag, tables), _queue_sink(env, tag)]
    curve = Curve(
        CASE, "Commit cost of a micro-batch against its tasks (ours exactly_once; Spark's at least once)",
        "tasks per batch N", "ms (median of the timed batches)", log_x=True, log_y=True,
        notes=[f"local[2], one Spark session; a file-source stream, one Parquet file of {ROWS_PER_TASK}·N "
               "rows a batch, repartition(N) before the sink, so N tasks write each batch",
               f"one query per sink and N: 1 warm-up batch, then {timed} timed batch(es); y = their median",
               "'<sink> commit': the driver's commit of our exactly_once sink, decide_ms + commit_ms of its "
               "metrics card (from the tasks' reports to the batch done: checks, decision, every winner "
               "committed, the others rolled back)",
               "'<sink> addBatch': Spark's durationMs.addBatch of the batch (the tasks and the commit)",
               "baselines: Spark's kafka format and df.write.jdbc from foreachBatch (at least once, their "
               "defaults); Spark has no queue sink"])
    next_id = 0
    commits: dict[str, dict[int, float]] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for n in tasks:
                for sink in sinks:
                    got, next_id = _measure(spark, sink, n, timed, Path(tmp), next_id)
                    curve.add(f"{sink.name} addBatch", n, _median([t.add_batch_ms for t in got]))
                    if sink.ours:
                        ms = _median([t.commit_ms for t in got if t.commit_ms is not None])
                        commits.setdefault(sink.name, {})[n] = ms
                        curve.add(f"{sink.name} commit", n, ms)
        for sink in sinks:
            have, want = Counter(sink.read_back()), Counter(sink.written)
            if have != want:
                curve.equal = False
                why = (f"{sink.name}: the target holds {sum(have.values())} rows ({len(have)} distinct), "
                       f"{sum((have - want).values())} not written or twice, {sum((want - have).values())} "
                       f"missing; {len(sink.written)} were written")
                curve.notes.append(f"NOT EQUAL: {why}")
                print(f"[bench] NOT EQUAL: {why}", file=sys.stderr)
            else:
                print(f"[bench] {CASE} {sink.name}: the target holds the {len(want)} rows written, once each",
                      file=sys.stderr)
    finally:
        _clean_up(env, topics, tables)
        shutil.rmtree(metrics, ignore_errors=True)
    lo, hi = (4, tasks[-1])
    for name, by_n in commits.items():
        growth = by_n[hi] / by_n[lo] if by_n.get(lo) else float("nan")
        print(f"SCALE commit {name} ms_at_{lo}={by_n[lo]:.1f} ms_at_{hi}={by_n[hi]:.1f} growth={growth:.2f}",
              flush=True)
    return curve


def _clean_up(env: dict[str, str], topics: list[str], tables: list[str]) -> None:
    """Drop the case's topics and tables (the queue is drained by the check)."""
    from confluent_kafka.admin import AdminClient

    if topics:
        admin = AdminClient({"bootstrap.servers": env["KAFKA_BOOTSTRAP_SERVERS"]})
        for f in admin.delete_topics(topics).values():
            f.result(timeout=60)
    for t in tables:
        run_sql(env["POSTGRES_URL"], f"DROP TABLE IF EXISTS {t}")
