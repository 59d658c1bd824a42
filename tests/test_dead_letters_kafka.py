"""Dead letters of a Kafka target, against the real broker and PostgreSQL: records the
topic refuses for their own sake (a batch larger than its max.message.bytes once
compressed, no key on a compacted topic, a partition it does not have) land in a dead-letter
table with Kafka's error code, every other record in the topic, under one decision a
batch; a large record that compresses below the limit is not refused; killed with kill -9
at each step of the decision, every input row is in exactly one place, once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests.support import kafka_sink, kafka_util, pg_util
from tests.support.deadletters import FIRST, OTHERS, ended, run, write_files
from tests.support.processes import driver_report

pytestmark = [pytest.mark.spark, pytest.mark.services]

LIMIT = 8192  # the topic's max.message.bytes
ROWS = 2500  # a batch
KINDS = {"big": "MESSAGE_TOO_LARGE", "nokey": "INVALID_RECORD", "part": "UNKNOWN_TOPIC_OR_PARTITION"}
# Expressions over {"id", "v"}: 'big' is 25,600 hex digits (gzip leaves about 13 KB: too
# large); 'fat' is 20,000 times 'x' (gzip leaves a few dozen bytes: it fits, and is kept).
SELECT = "|".join([
    "CASE WHEN v = 'nokey' THEN NULL ELSE CAST(id AS STRING) END AS key",
    "concat(CAST(id AS STRING), ':', CASE WHEN v = 'big' THEN concat_ws('', transform(sequence(1, 400), "
    "i -> sha2(concat(CAST(id AS STRING), '/', CAST(i AS STRING)), 256))) "
    "WHEN v = 'fat' THEN repeat('x', 20000) ELSE v END) AS value",
    "CASE WHEN v = 'part' THEN 99 ELSE NULL END AS partition",
])


def _kind(i: int) -> str | None:
    """Three rows of each kind in a 10,000-row stream (and three of 'fat', which are good)."""
    return {17: "big", 2600: "big", 9999: "big", 3: "nokey", 5003: "nokey", 7777: "nokey",
            40: "part", 41: "part", 8000: "part", 100: "fat", 4000: "fat", 9000: "fat"}.get(i)


def _files(src: Path, batches: int) -> None:
    write_files(src, batches, ROWS, _kind)


def _expected(batches: int) -> tuple[list[int], list[tuple[int, str]]]:
    ids = range(batches * ROWS)
    good = [i for i in ids if _kind(i) in (None, "fat")]
    return good, sorted((i, KINDS[k]) for i in ids if (k := _kind(i)) in KINDS)


class KafkaTarget:
    def __init__(self, services: Any) -> None:
        self.bootstrap, self.url = services.kafka_bootstrap, services.postgres_url
        self.topic = kafka_util.create_topic(self.bootstrap, 4, "dl-target", config={
            "cleanup.policy": "compact", "max.message.bytes": str(LIMIT)})
        self.dlq = pg_util.table_name("dl_kafka_dead")
        self.prefix = f"dlk-{kafka_util.unique_topic('p')}"

    def options(self, **more: str) -> dict[str, str]:
        return {"connector": "kafka", "kafka.bootstrap.servers": self.bootstrap, "topic": self.topic,
                "transactionalIdPrefix": self.prefix, "kafka.compression.type": "gzip",
                "deadLetter.connector": "jdbc", "deadLetter.url": self.url, "deadLetter.dbtable": self.dlq,
                "deadLetter.createTable": "true", **more}

    def landed(self) -> tuple[list[int], list[tuple[int, str]]]:
        records = kafka_sink.consume(self.bootstrap, self.topic)
        good = sorted(int(v.split(b":")[0]) for _, _, v in records)
        try:
            rows = pg_util.query(self.url, f"SELECT row, error_code, sink_id FROM {self.dlq}")
        except sa.exc.ProgrammingError:  # the dead-letter table comes with the first dead letter's batch
            rows = []
        assert all(s == self.prefix for _, _, s in rows)
        return good, sorted((int(json.loads(r)["value"].split(":")[0]), code) for r, code, _ in rows)


@pytest.mark.parametrize("named_by", ["option", "column"])
def test_kafka_target_sets_refused_records_aside(spark, services, tmp_path, named_by):
    """10,000 rows, three of each kind the topic refuses: 9,991 in the topic (the three large
    ones that compress below the limit among them), nine in the dead letters with Kafka's
    code, the class and the broker's setting in the message; and no open transaction. The
    topic named by option 'topic' (its settings read at start) or by a 'topic' column (read
    by each task, and its batches cut at its own 8 KiB, not the sink's 1 MB)."""
    t = KafkaTarget(services)
    _files(tmp_path / "src", 4)
    src = str(tmp_path / "src")
    df = spark.readStream.schema("id long, v string").option("maxFilesPerTrigger", 1).json(src)
    select, opts = SELECT.split("|"), t.options()
    if named_by == "column":
        select.append(f"'{t.topic}' AS topic")
        opts = {**{k: v for k, v in opts.items() if k != "topic"}, "commitTopic": t.topic}
    q = (df.repartition(8, "id").selectExpr(*select).writeStream.format("hzsink")
         .options(**opts).option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start())
    error = ended(q)
    assert error is None, error
    good, dead = t.landed()
    want_good, want_dead = _expected(4)
    assert (len(good), len(dead)) == (9991, 9)
    assert (good, dead) == (want_good, want_dead)
    rows = pg_util.query(t.url, f"SELECT error_class, error_message, row FROM {t.dlq}")
    by_class = {c for c, _, _ in rows}
    assert by_class == {"MessageSizeTooLargeError", "InvalidRecordError", "UnknownTopicOrPartitionError"}
    assert any(f"larger than the max.message.bytes ({LIMIT:,})" in m for _, m, _ in rows)
    assert any("partition 99 of topic" in m for _, m, _ in rows)
    assert kafka_sink.open_transactions(t.bootstrap, t.prefix) == []


@pytest.mark.campaign
@pytest.mark.parametrize("points", [pytest.param(FIRST + OTHERS, id="every-step")])
def test_kill_9_with_a_kafka_target_leaves_every_row_in_one_place_once(services, tmp_path, points):
    """Point k strikes in batch k, after batches 0..k-1 committed (their dead letters too)."""
    t = KafkaTarget(services)
    n = len(points) + 1
    _files(tmp_path / "src", n)
    for batch, point in enumerate(points, start=1):
        crashed = run(tmp_path, t.options(), f"{point}@{batch}", SELECT)
        assert crashed.returncode == -9, f"{point}: {driver_report(crashed)}"
        good, dead = t.landed()
        assert len(set(good)) == len(good) and len(set(dead)) == len(dead), point
        want_good, want_dead = _expected(batch)
        assert set(want_good) <= set(good) and set(want_dead) <= set(dead), point
    done = run(tmp_path, t.options(), select=SELECT)
    assert done.returncode == 0, driver_report(done)
    assert t.landed() == _expected(n)
    assert kafka_sink.open_transactions(t.bootstrap, t.prefix) == []


def test_a_topic_columns_topic_gets_batches_it_takes(spark, services, tmp_path):
    """A topic named by the 'topic' column that takes 4 KiB batches (max.message.bytes),
    uncompressed 60-byte records from one task: every batch is cut at the topic's own
    limit (read by the task), not at the sink's 1 MB, so none is refused; all 2,000 land."""
    topic = kafka_util.create_topic(services.kafka_bootstrap, 1, "dl-small",
                                    config={"max.message.bytes": "4096"})
    t = KafkaTarget(services)
    src = tmp_path / "src"
    write_files(src, 1, 2000, lambda i: None)
    df = spark.readStream.schema("id long, v string").json(str(src))
    opts = {**{k: v for k, v in t.options().items() if k not in ("topic", "kafka.compression.type")},
            "commitTopic": topic}
    rows = df.coalesce(1).selectExpr("CAST(id AS STRING) AS key", f"'{topic}' AS topic",
                                     "concat(CAST(id AS STRING), ':', repeat('x', 50)) AS value")
    q = (rows.writeStream.format("hzsink").options(**opts).option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start())
    error = ended(q)
    assert error is None, error
    assert len(kafka_sink.consume(services.kafka_bootstrap, topic)) == 2000
