"""Both sources at the shapes users run: every trigger, one and 32 Kafka partitions,
records of 0 bytes and of 990,000 bytes, batches with no input, and a query restarted from
its checkpoint between runs. Each query runs more than once on one checkpoint, with new
input before each run, and every record or message must land exactly once. One Kafka
partition and the default trigger run in make faults (the 32-partition case is the user's
shape).
"""

from __future__ import annotations

from typing import Any

import pytest

from spark_ext import compat
from tests.support.jms import jms
from tests.support.kafka_util import create_topic, produce
from tests.support.pg_util import execute, query, table_name
from tests.support.stomp_util import queue_counts, queue_name, send
from tests.support.waiting import wait_for, wait_for_idle_trigger

pytestmark = [pytest.mark.spark, pytest.mark.services]

TRIGGERS: dict[str, dict[str, Any]] = {
    "processingTime": {"processingTime": "200 milliseconds"}, "availableNow": {"availableNow": True},
    "once": {"once": True}, "default": {}}
# The largest value a default Kafka client and broker take whole: librdkafka's
# message.max.bytes (1,000,000) counts the record's framing too.
_BIG = 990_000


# The continuous triggers (processingTime, and the default, which plans as processingTime does
# with no interval) run in make faults, to keep make test within its time; availableNow and
# once run in make test, and every Kafka and queue test of make test runs one trigger or other.
CASES = [pytest.param(t, marks=pytest.mark.campaign) if t in ("default", "processingTime") else t
         for t in TRIGGERS]


def _run(writer, trigger: str, landed, expected: int):
    """Start, and end as the trigger does: by itself (availableNow, once), or, for the
    continuous ones, once everything landed and a trigger found no input."""
    kind = TRIGGERS[trigger]
    q = writer.trigger(**kind).start() if kind else writer.start()
    try:
        if trigger in ("availableNow", "once"):
            assert q.awaitTermination(180), f"the {trigger} run did not end"
        else:
            wait_for(lambda: landed() >= expected or q.exception() is not None, f"{expected} rows")
            wait_for_idle_trigger(q)  # a batch with no input, and the queue source's last ack
    finally:
        q.stop()
    assert q.exception() is None, q.exception()


@pytest.mark.parametrize("partitions", [pytest.param(1, marks=pytest.mark.campaign), 32])
@pytest.mark.parametrize("trigger", CASES)
def test_kafka_source_every_trigger_reads_every_record_once(spark, services, tmp_path, trigger, partitions):
    """Two runs on one checkpoint into Parquet; each run's new records include an empty
    value, a null key and a value of 990,000 bytes. ``once`` reads what is there in one
    batch; the others in batches of maxOffsetsPerTrigger where the release allows it."""
    bootstrap = services.kafka_bootstrap
    topic = create_topic(bootstrap, partitions, f"shape-{trigger}")
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    sent: list[tuple[str, int]] = []  # (value's first bytes, value length)
    opts = {"maxOffsetsPerTrigger": "150"} if compat.HAS_ADMISSION_CONTROL else {}
    for run in range(2):
        records = [(i % partitions, None if i % 5 == 0 else f"k{i}".encode(), f"r{run}-{i}".encode())
                   for i in range(300)]
        records += [(0, b"empty", b""), (partitions - 1, b"big", f"r{run}-big-".encode().ljust(_BIG, b"x"))]
        produce(bootstrap, topic, records)
        sent += [(v[:12].decode(), len(v)) for _, _, v in records]
        df = (spark.readStream.format("hzsource").option("connector", "kafka")
              .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
              .option("startingOffsets", "earliest").options(**opts).load()
              .selectExpr("partition", "offset", "substring(CAST(value AS STRING), 1, 12) AS head",
                          "length(value) AS size"))
        w = df.writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(ckpt))
        _run(w, trigger, lambda: _rows(spark, out), len(sent))
    got = spark.read.parquet(str(out)).collect()
    assert len({(r.partition, r.offset) for r in got}) == len(got)  # no record twice
    assert sorted((r.head, r.size) for r in got) == sorted(sent)  # every record, whole


def _rows(spark, out) -> int:
    """Rows the Parquet sink committed so far (its metadata log names none before the
    first batch commits, and Spark then cannot infer a schema)."""
    from pyspark.errors import AnalysisException

    try:
        return spark.read.parquet(str(out)).count()
    except AnalysisException:
        return 0


@pytest.mark.parametrize("trigger", CASES)
def test_queue_source_every_trigger_writes_every_message_once(spark, services, tmp_path, trigger):
    """Two runs on one checkpoint into PostgreSQL with exactly_once, 120 new messages
    before each (one with an empty body, one of 990,000 bytes). Every message lands once.
    What the broker still holds after a run: nothing with the triggers that plan after
    their last batch; with ``once`` (one batch, nothing planned after it) the last run's
    batch, acknowledged by the next run, never the growing queue (seen failing: 240 after
    the second run, the first run's redeliveries dropped without an ack)."""
    if not compat.HAS_ADMISSION_CONTROL:
        pytest.fail("the queue source needs PySpark 4.2 or later; this test runs on the newest release")
    dest, table = queue_name(f"qs-{trigger[:4]}"), table_name("qshape")  # short: the CLI's table wraps
    url = services.postgres_url
    execute(url, f"CREATE TABLE {table} (message_id text, head text, size int)")
    sent: list[tuple[str, int]] = []
    for run in range(2):
        bodies = [f"m{run}-{i}" for i in range(118)] + ["", f"m{run}-big-".ljust(_BIG, "x")]
        send(services, dest, bodies)
        sent += [(b[:12], len(b)) for b in bodies]
        w = (jms(spark, services, dest, maxMessagesPerTrigger="50")
             .selectExpr("message_id", "substring(body_text, 1, 12) AS head", "length(body) AS size")
             .writeStream.format("hzsink").option("connector", "jdbc").option("url", url)
             .option("dbtable", table).option("checkpointLocation", str(tmp_path / "ckpt")))
        before = int(query(url, f"SELECT count(*) FROM {table}")[0][0])
        _run(w, trigger, lambda: int(query(url, f"SELECT count(*) FROM {table}")[0][0]), len(sent))
        left, _ = queue_counts(dest)
        if trigger == "once":
            # Acknowledged: every batch before this run's (by this run); left: this run's
            # batch and what it did not read, never an earlier run's batch.
            assert left == len(sent) - before, (run, left, before)
        else:
            assert left == 0, (run, left)
    rows = query(url, f"SELECT head, size, count(*) OVER (PARTITION BY message_id) FROM {table}")
    assert all(n == 1 for _, _, n in rows)  # no message twice
    assert sorted((h, s) for h, s, _ in rows) == sorted(sent)
