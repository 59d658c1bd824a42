"""``format("hzsource")`` against Spark's own ``format("kafka")``, option by option, on the same
topic in the same session: the same rows, the same batch boundaries where Spark defines
them (``minOffsetsPerTrigger`` / ``maxTriggerDelay``), and a refusal wherever Spark refuses,
with Spark's reason in ours. The options and what each does are in
``spark_ext.connectors.kafka.source.parity``; every entry there has a case here."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from confluent_kafka import Producer

from spark_ext.connectors.kafka.source.parity import PARITY
from tests.support.kafka_util import create_topic

pytestmark = [pytest.mark.spark, pytest.mark.services]

PER_PARTITION = 50
SECOND = 1000


def stamped_topic(bootstrap: str) -> tuple[str, int]:
    """2 partitions of 50 records, record i of each stamped ``base + i`` seconds."""
    topic = create_topic(bootstrap, 2, "stamps")
    base = (int(time.time()) - 86_400) * 1000
    p = Producer({"bootstrap.servers": bootstrap})
    for part in (0, 1):
        for i in range(PER_PARTITION):
            p.produce(topic, f"{part}-{i}".encode(), partition=part, timestamp=base + i * SECOND)
    assert p.flush(30) == 0
    return topic, base


def _reader(spark: Any, fmt: str, services: Any, topic: str | None, stream: bool,
            opts: dict[str, str]) -> Any:
    r = spark.readStream if stream else spark.read
    r = r.format(fmt).option("kafka.bootstrap.servers", services.kafka_bootstrap)
    if topic is not None and not {"assign", "subscribePattern"} & set(opts):
        r = r.option("subscribe", topic)
    if fmt == "hzsource":
        r = r.option("connector", "kafka")
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def batch_rows(spark: Any, fmt: str, services: Any, topic: str,
               opts: dict[str, str]) -> list[tuple[int, int]]:
    df = _reader(spark, fmt, services, topic, False, opts)
    return sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())


def stream_batches(spark: Any, fmt: str, services: Any, topic: str | None, opts: dict[str, str], tmp: Any,
                   trigger: dict[str, Any] | None = None, until: Any = None,
                   cols: tuple[str, ...] = ("partition", "offset")) -> list[tuple[float, list]]:
    """Each micro-batch with rows: (when it ran, its sorted ``cols``). AvailableNow unless
    ``trigger``; then it runs until ``until(batches)`` is true (at most 90 s). ``topic``
    None: the options name what is read (``subscribePattern``)."""
    got: list[tuple[float, list]] = []

    def each(df: Any, batch_id: int) -> None:
        rows = sorted(tuple(r) for r in df.select(*cols).collect())
        if rows:
            got.append((time.monotonic(), rows))

    df = _reader(spark, fmt, services, topic, True, opts)
    q = (df.writeStream.foreachBatch(each).option("checkpointLocation", str(tmp / f"ck-{fmt}"))
         .trigger(**(trigger or {"availableNow": True})).start())
    try:
        if trigger is None:
            assert q.awaitTermination(120), f"{fmt}: still running after 120 s"
        else:
            deadline = time.monotonic() + 90
            while not until(got) and time.monotonic() < deadline and q.isActive:
                time.sleep(0.1)
        assert q.exception() is None, q.exception()
    finally:
        q.stop()
    return got


def expected(partition_from: dict[int, int],
             partition_to: dict[int, int] | None = None) -> list[tuple[int, int]]:
    to = partition_to or {0: PER_PARTITION, 1: PER_PARTITION}
    return sorted((p, o) for p in (0, 1) for o in range(partition_from[p], to[p]))


def test_every_row_of_the_parity_table_has_a_differential_case():
    cases = {c for c in BATCH_CASES} | {c for c in STREAM_CASES} | {e[0] for e in REFUSED} | PACING_CASES
    covered = {part for c in cases for part in c.split("+")}
    assert {row.option for row in PARITY} <= covered, {row.option for row in PARITY} - covered


def _cases(base: int, topic: str) -> dict[str, tuple[dict[str, str], list[tuple[int, int]]]]:
    by_ts = json.dumps({topic: {"0": base + 5 * SECOND, "1": base + 20 * SECOND}})
    return {
        "startingTimestamp": ({"startingTimestamp": str(base + 10 * SECOND)}, expected({0: 10, 1: 10})),
        "startingTimestamp+between": ({"startingTimestamp": str(base + 10 * SECOND - 1)},
                                      expected({0: 10, 1: 10})),
        "startingTimestamp+wins": ({"startingTimestamp": str(base + 40 * SECOND),
                                    "startingOffsets": "earliest", "startingOffsetsByTimestamp": by_ts},
                                   expected({0: 40, 1: 40})),
        "startingOffsetsByTimestamp": ({"startingOffsetsByTimestamp": by_ts}, expected({0: 5, 1: 20})),
        "startingOffsetsByTimestampStrategy": ({"startingTimestamp": str(base + 10_000 * SECOND),
                                                "startingOffsetsByTimestampStrategy": "latest"}, []),
        "endingTimestamp": ({"endingTimestamp": str(base + 30 * SECOND)},
                            expected({0: 0, 1: 0}, {0: 30, 1: 30})),
        "endingTimestamp+past": ({"endingTimestamp": str(base + 10_000 * SECOND)}, expected({0: 0, 1: 0})),
        "endingOffsetsByTimestamp": (
            {"startingOffsetsByTimestamp": by_ts,
             "endingOffsetsByTimestamp": json.dumps({topic: {"0": base + 7 * SECOND,
                                                              "1": base + 45 * SECOND}})},
            expected({0: 5, 1: 20}, {0: 7, 1: 45})),
        # Options that change how a read runs, not what it returns: all at once, the rows unchanged.
        NEUTRAL: ({"kafka.group.id": f"parity-{topic}", "minPartitions": "7", "maxRecordsPerPartition": "7",
                   "includeHeaders": "true", "groupIdPrefix": "parity", "kafkaConsumer.pollTimeoutMs": "5000",
                   "fetchOffset.numRetries": "1", "fetchOffset.retryIntervalMs": "5",
                   "failOnDataLoss": "false", "kafka.isolation.level": "read_committed"},
                  expected({0: 0, 1: 0})),
        "subscribe": ({}, expected({0: 0, 1: 0})),
        "assign": ({"assign": json.dumps({topic: [1]})}, [(1, o) for o in range(PER_PARTITION)]),
        "startingOffsets": ({"startingOffsets": json.dumps({topic: {"0": 10, "1": -2}})},
                            expected({0: 10, 1: 0})),
        "endingOffsets": ({"endingOffsets": json.dumps({topic: {"0": 20, "1": -1}})},
                          expected({0: 0, 1: 0}, {0: 20, 1: PER_PARTITION})),
    }


NEUTRAL = ("kafka.group.id+minPartitions+maxRecordsPerPartition+includeHeaders+groupIdPrefix"
           "+kafkaConsumer.pollTimeoutMs+fetchOffset.numRetries+fetchOffset.retryIntervalMs+failOnDataLoss"
           "+kafka.isolation.level")
BATCH_CASES = ("startingTimestamp", "startingTimestamp+between", "startingTimestamp+wins",
               "startingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy", "endingTimestamp",
               "endingTimestamp+past", "endingOffsetsByTimestamp", "subscribe", "assign", "startingOffsets",
               "endingOffsets", NEUTRAL)


@pytest.mark.compat  # batch reads need no read limit: the oldest release has them
def test_batch_reads_return_the_rows_spark_returns_for_each_time_option(spark, services):
    topic, base = stamped_topic(services.kafka_bootstrap)
    cases = _cases(base, topic)
    assert set(cases) == set(BATCH_CASES)
    for name, (opts, want) in cases.items():
        spark_rows = batch_rows(spark, "kafka", services, topic, opts)
        ours = batch_rows(spark, "hzsource", services, topic, opts)
        assert (name, ours) == (name, spark_rows)
        assert (name, ours) == (name, want)  # and what the option means, not only what Spark does


STREAM_CASES = ("startingTimestamp+availableNow", "startingOffsetsByTimestamp+availableNow",
                "startingOffsetsByTimestampStrategy+availableNow", "maxOffsetsPerTrigger")


@pytest.mark.compat  # before 4.2 AvailableNow is one batch up to the latest offsets: rows still compare
def test_streams_start_where_spark_starts_for_each_time_option(spark, services, tmp_path):
    topic, base = stamped_topic(services.kafka_bootstrap)
    cases = _cases(base, topic)
    for name in STREAM_CASES[:-1]:
        opts, want = cases[name.split("+")[0]]
        run = tmp_path / name
        run.mkdir()
        spark_rows = sorted(r for _, rows in stream_batches(spark, "kafka", services, topic, opts, run)
                            for r in rows)
        ours = sorted(r for _, rows in stream_batches(spark, "hzsource", services, topic, opts, run)
                      for r in rows)
        assert (name, ours) == (name, spark_rows) == (name, want)


def test_streams_cut_batches_where_spark_cuts_them_under_max_offsets_per_trigger(spark, services, tmp_path):
    topic, _ = stamped_topic(services.kafka_bootstrap)
    capped = {"startingOffsets": "earliest", "maxOffsetsPerTrigger": "30"}
    sizes = {fmt: [len(rows) for _, rows in stream_batches(spark, fmt, services, topic, capped, tmp_path)]
             for fmt in ("kafka", "hzsource")}
    assert sizes["hzsource"] == sizes["kafka"] == [30, 30, 30, 10], sizes  # the same batch boundaries


# (option, options, stream?, a phrase of Spark's reason that ours must carry)
REFUSED = [
    ("startingTimestamp", {"startingTimestamp": "yesterday"}, False, "Expected a single long value"),
    ("startingOffsetsByTimestamp", {"startingOffsetsByTimestamp": "{\"t\": 5}"}, False, "Expected e.g."),
    ("startingOffsetsByTimestampStrategy+error", {"startingTimestamp": "9999999999999"}, False,
     "No offset matched"),
    ("startingOffsetsByTimestampStrategy+bad",
     {"startingOffsetsByTimestampStrategy": "nearest", "startingTimestamp": "0"}, False,
     "startingOffsetsByTimestampStrategy"),
    ("endingOffsetsByTimestamp+stream", {"endingOffsetsByTimestamp": "{\"t\": {\"0\": 5}}"}, True,
     "ending timestamp not valid in streaming"),
    ("endingOffsets+stream", {"endingOffsets": "latest"}, True, "ending offset not valid in streaming"),
    ("minOffsetsPerTrigger+above-max", {"minOffsetsPerTrigger": "500", "maxOffsetsPerTrigger": "100"},
     True, "is higher than the maxOffsetsPerTrigger"),
    ("maxTriggerDelay+bad", {"minOffsetsPerTrigger": "5", "maxTriggerDelay": "soon"}, True,
     "maxTriggerDelay"),
    ("kafka.*+auto.offset.reset", {"kafka.auto.offset.reset": "earliest"}, False, "is not supported"),
    ("minPartitions+zero", {"minPartitions": "0"}, False, "minPartitions"),
    ("subscribe+missing", {"subscribe": "parity-never-created"}, True,
     "This server does not host this topic-partition"),
    ("subscribe+and+assign", {"assign": "{\"t\": [0]}", "subscribePattern": "t.*"}, False, "assign"),
]


@pytest.mark.parametrize("case", REFUSED, ids=[r[0] for r in REFUSED])
def test_what_spark_refuses_we_refuse_with_its_reason(spark, services, tmp_path, case):
    topic, _ = stamped_topic(services.kafka_bootstrap) if "Strategy+error" in case[0] else ("t", 0)
    _, opts, stream, phrase = case

    def run(fmt: str) -> str:
        with pytest.raises(Exception) as e:
            if stream:
                stream_batches(spark, fmt, services, topic, opts, tmp_path)
            else:
                batch_rows(spark, fmt, services, topic, opts)
        return str(e.value)

    spark_said, ours = run("kafka"), run("hzsource")
    if phrase not in ("startingOffsetsByTimestampStrategy", "maxTriggerDelay"):
        assert phrase in spark_said, spark_said[:2000]  # the phrase is Spark's, checked on Spark
    assert phrase in ours, ours[:2000]


PACING_CASES = {"minOffsetsPerTrigger", "maxTriggerDelay", "subscribePattern", "failOnDataLoss"}


def test_min_offsets_per_trigger_holds_batches_back_as_spark_does_until_max_trigger_delay(spark, services,
                                                                                         tmp_path):
    """100 records ready: the first trigger never waits (one batch of 100). 100 more: fewer
    than minOffsetsPerTrigger=150, so no batch until maxTriggerDelay (5 s) passed since the
    last. Then 200 at once (one transaction, read_committed): at or above the minimum, a
    batch at the next trigger. Spark and ours: the same three batches, the second held."""
    from tests.support.kafka_util import unique_topic

    opts = {"minOffsetsPerTrigger": "150", "maxTriggerDelay": "5s", "startingOffsets": "earliest",
            "kafka.isolation.level": "read_committed"}
    producer = Producer({"bootstrap.servers": services.kafka_bootstrap,
                         "transactional.id": unique_topic("pace-tx")})
    producer.init_transactions()
    results = {}
    try:
        for fmt in ("kafka", "hzsource"):
            topic = create_topic(services.kafka_bootstrap, 2, "pace")  # each run its own

            def send(n: int, topic: str = topic) -> float:
                producer.begin_transaction()
                for i in range(n):
                    producer.produce(topic, b"x", partition=i % 2)
                producer.commit_transaction()
                return time.monotonic()

            send(100)
            sent: list[float] = []

            def until(got: list, sent: list[float] = sent, send: Any = send) -> bool:
                if len(got) == 1 and not sent:
                    sent.append(send(100))
                elif len(got) == 2 and len(sent) == 1:
                    sent.append(send(200))
                return len(got) >= 3

            run = tmp_path / fmt
            run.mkdir()
            got = stream_batches(spark, fmt, services, topic, opts, run,
                                 {"processingTime": "200 milliseconds"}, until)
            sizes = [len(rows) for _, rows in got]
            # From the moment the second 100 were there: without the pacing, a batch within a trigger or two.
            held = got[1][0] - sent[0] if len(got) > 1 and sent else 0.0
            results[fmt] = (sizes, held)
    finally:
        producer.flush()
    for sizes, held in results.values():
        assert sizes == [100, 100, 200], results
        assert held >= 2.5, results  # held back for most of the 5 s since the first batch


@pytest.mark.campaign  # make faults; make test keeps test_kafka_source.py's own data-loss cases
@pytest.mark.parametrize("fail", [True, False])
def test_records_deleted_by_retention_while_down_fail_or_are_skipped_as_spark_does(spark, services, tmp_path,
                                                                                   fail):
    """A stream reads 100 records and stops; 100 more arrive and retention deletes offsets
    below 150 before the restart. ``failOnDataLoss=true``: both fail the restart (ours names
    the range); ``false``: both go on from 150."""
    from tests.support.kafka_util import delete_records_before, produce

    opts = {"startingOffsets": "earliest", "failOnDataLoss": str(fail).lower()}
    results: dict[str, list[int] | str] = {}
    for fmt in ("kafka", "hzsource"):
        topic = create_topic(services.kafka_bootstrap, 1, "loss")
        produce(services.kafka_bootstrap, topic, [(0, None, b"a")] * 100)
        first = stream_batches(spark, fmt, services, topic, opts, tmp_path)
        produce(services.kafka_bootstrap, topic, [(0, None, b"b")] * 100)
        delete_records_before(services.kafka_bootstrap, topic, 0, 150)
        try:
            again = stream_batches(spark, fmt, services, topic, opts, tmp_path)  # the same checkpoint
            results[fmt] = sorted(o for _, rows in first + again for _, o in rows)
        except Exception as e:  # noqa: BLE001 - the outcome compared is "it failed", for data loss
            results[fmt] = str(e)
            assert "failOnDataLoss" in results[fmt], results[fmt][:2000]
    if fail:
        assert all(isinstance(r, str) for r in results.values()), results
        ours = str(results["hzsource"])
        assert "records 100..149" in ours and "failOnDataLoss=false" in ours
    else:
        assert results["hzsource"] == results["kafka"] == list(range(100)) + list(range(150, 200))


def test_subscribe_pattern_takes_a_new_topic_and_outlives_a_deleted_one_as_spark_does(spark, services,
                                                                                      tmp_path):
    """``subscribePattern`` while topics come and go: 10 records on topic a, then topic b
    created with 10 (read from its start, as Spark does), then a deleted and 10 more on b
    (``failOnDataLoss=false``: the stream goes on). Topic ``ab`` matches a prefix of the
    pattern only and is never read (the pattern matches whole names)."""
    from confluent_kafka.admin import AdminClient

    from tests.support.kafka_util import produce, unique_topic

    admin = AdminClient({"bootstrap.servers": services.kafka_bootstrap})
    results = {}
    for fmt in ("kafka", "hzsource"):
        stem = unique_topic(f"pat-{fmt}")
        names: dict[str, str] = {}

        def make(name: str, records: int, stem: str = stem, names: dict[str, str] = names) -> None:
            names[name] = create_topic(services.kafka_bootstrap, 1, f"{stem}-{name}")
            produce(services.kafka_bootstrap, names[name], [(0, None, b"x")] * records)

        make("a", 10)
        make("ab", 5)
        steps: list[str] = []

        def until(got: list, steps: list[str] = steps, make: Any = make,
                  names: dict[str, str] = names) -> bool:
            n = sum(len(rows) for _, rows in got)
            if n >= 10 and not steps:
                steps.append("b")
                make("b", 10)
            elif n >= 20 and steps == ["b"]:
                steps.append("deleted")
                admin.delete_topics([names["a"]])[names["a"]].result(30)
                produce(services.kafka_bootstrap, names["b"], [(0, None, b"y")] * 10)
            return n >= 30

        opts = {"subscribePattern": f"{stem}-[a-z]-[0-9a-f]+", "startingOffsets": "earliest",
                "failOnDataLoss": "false"}
        got = stream_batches(spark, fmt, services, None, opts, tmp_path,
                             {"processingTime": "300 milliseconds"}, until,
                             cols=("topic", "partition", "offset"))
        results[fmt] = sorted((t.split("-")[-2], p, o) for _, rows in got for t, p, o in rows)
    want = sorted([("a", 0, o) for o in range(10)] + [("b", 0, o) for o in range(20)])
    assert results["hzsource"] == results["kafka"] == want, results
