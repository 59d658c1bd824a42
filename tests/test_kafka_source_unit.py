"""Kafka source pure logic: option parsing, offsets JSON, range planning, rate limiting."""

from __future__ import annotations

import itertools
import pickle
import re
from typing import Any

import pytest

from spark_ext.connectors.kafka.source.config import KafkaSourceConfig
from spark_ext.connectors.kafka.source.offsets import (
    KafkaRange,
    KafkaRanges,
    StartingOffsets,
    from_json,
    parse_assign,
    plan_ranges,
    rate_limit,
    to_json,
)
from spark_ext.errors import InvalidOptionError, MissingOptionError, UnknownOptionError
from spark_ext.options import Options

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "a,b"}


def parse(**extra: str) -> KafkaSourceConfig:
    return KafkaSourceConfig.parse(Options({**BASE, **extra}, "hzsource"))


def test_offsets_json_round_trip_is_sorted_and_stable() -> None:
    offs = {("b", 1): 5, ("a", 10): 7, ("a", 2): 3}
    doc = to_json(offs)
    assert doc == {"a": {"2": 3, "10": 7}, "b": {"1": 5}}
    assert from_json(doc) == offs


def test_plan_ranges_is_deterministic_and_covers_exactly() -> None:
    start = {("t", 0): 0, ("t", 1): 100}
    end = {("t", 0): 1000, ("t", 1): 101, ("t", 2): 50}  # t-2 is new: read from 0
    begin = {**start, ("t", 2): 0}
    a = plan_ranges(begin, end, min_partitions=6)
    assert a == plan_ranges(begin, end, min_partitions=6)
    ranges = [r for r in a if isinstance(r, KafkaRange)]
    assert len(ranges) == len(a)  # without min_records no range shares a task
    for tp in end:
        pieces = sorted((r.start, r.end) for r in ranges if (r.topic, r.partition) == tp)
        assert pieces[0][0] == begin[tp] and pieces[-1][1] == end[tp]
        assert all(x[1] == y[0] for x, y in itertools.pairwise(pieces))
    assert len(a) >= 6
    capped = plan_ranges(begin, end, max_records=300)
    assert max(r.size for r in capped) <= 300
    assert sum(r.size for r in capped) == 1000 + 1 + 50


def _covered(planned: list[Any]) -> list[tuple[str, int, int, int]]:
    flat = [r for p in planned for r in (p.ranges if isinstance(p, KafkaRanges) else (p,))]
    return sorted((r.topic, r.partition, r.start, r.end) for r in flat)


def test_small_batches_share_tasks_and_a_replay_plans_the_same_tasks() -> None:
    begin = {("t", p): 100 * p for p in range(16)}
    end = {("t", p): 100 * p + 125 for p in range(16)}  # 2,000 records over 16 partitions
    one = plan_ranges(begin, end, min_records=10_000)
    assert len(one) == 1 and isinstance(one[0], KafkaRanges) and one[0].size == 2000
    assert [(r.topic, r.partition) for r in one[0].ranges] == sorted(end)  # read in partition order
    assert one == plan_ranges(dict(reversed(begin.items())), dict(reversed(end.items())), min_records=10_000)
    assert _covered(one) == _covered(plan_ranges(begin, end))  # the same records, fewer tasks
    assert len(plan_ranges(begin, end)) == 16  # 0 (the default of plan_ranges): Spark's one per range
    assert len(plan_ranges(begin, end, min_records=500)) == 4
    assert len(plan_ranges(begin, end, min_partitions=6, min_records=10_000)) == 6  # never below it
    big = {tp: o + 50_000 for tp, o in begin.items()}
    assert len(plan_ranges(begin, big, min_records=10_000)) == 16  # every range is worth its task


def test_merged_tasks_are_balanced_and_keep_max_records() -> None:
    begin = {("t", p): 0 for p in range(6)}
    end = {("t", 0): 9000, ("t", 1): 5000, ("t", 2): 4000, ("t", 3): 1000, ("t", 4): 500, ("t", 5): 500}
    planned = plan_ranges(begin, end, min_records=10_000)  # 20,000 records: 2 tasks
    assert sorted(p.size for p in planned) == [10_000, 10_000]
    assert _covered(planned) == _covered(plan_ranges(begin, end))
    capped = plan_ranges(begin, end, max_records=6000, min_records=10_000)
    assert max(p.size for p in capped) <= 6000 and _covered(capped) == _covered(plan_ranges(begin, end,
                                                                                             max_records=6000))
    assert pickle.loads(pickle.dumps(planned)) == planned


def test_min_records_per_partition_option() -> None:
    assert parse().min_records_per_partition == 10_000
    assert parse(minRecordsPerPartition="0").min_records_per_partition == 0
    with pytest.raises(InvalidOptionError, match=r"minRecordsPerPartition.*>= 0"):
        parse(minRecordsPerPartition="-1")


def test_plan_ranges_drops_empty() -> None:
    assert plan_ranges({("t", 0): 5}, {("t", 0): 5}) == []


def test_rate_limit_respects_budget_and_favours_backlog() -> None:
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 10}
    latest = {("t", 0): 900, ("t", 1): 100, ("t", 2): 10}
    end = rate_limit(start, latest, 100)
    assert sum(end[tp] - start[tp] for tp in end) == 100
    assert end[("t", 0)] - start[("t", 0)] == 90
    assert end[("t", 2)] == 10
    assert all(end[tp] <= latest[tp] for tp in end)
    assert rate_limit(start, latest, 10_000) == latest


def test_range_pickles() -> None:
    r = KafkaRange("t", 3, 10, 20)
    assert pickle.loads(pickle.dumps(r)) == r


@pytest.mark.parametrize("value", ['{"t": {"0": "x"}}', '{"t": [1]}', "{not json", "[]", '{"t": {"a": 1}}'])
def test_malformed_starting_offsets(value: str) -> None:
    with pytest.raises(InvalidOptionError, match="startingOffsets"):
        StartingOffsets.parse(value)


def test_starting_offsets_forms() -> None:
    assert StartingOffsets.parse("earliest").kind == "earliest"
    assert StartingOffsets.parse(None).kind == "latest"
    assert StartingOffsets.parse('{"t": {"0": -2, "1": 5}}').specific == {("t", 0): -2, ("t", 1): 5}


@pytest.mark.parametrize("value", ["{bad", '{"t": 0}', '{"t": []}', '{"t": [-1]}', '{"t": ["0"]}'])
def test_malformed_assign(value: str) -> None:
    with pytest.raises(InvalidOptionError, match="assign"):
        parse_assign(value)


def test_both_subscribe_and_assign_rejected() -> None:
    with pytest.raises(InvalidOptionError, match="exactly one of"):
        parse(assign='{"a": [0]}')


def test_no_subscription_rejected() -> None:
    with pytest.raises(InvalidOptionError, match="none of them"):
        KafkaSourceConfig.parse(Options({"kafka.bootstrap.servers": "h:1"}, "hzsource"))


@pytest.mark.parametrize("value", ["0", "-5", "ten"])
def test_max_offsets_per_trigger_must_be_positive_integer(value: str) -> None:
    with pytest.raises(InvalidOptionError, match="maxOffsetsPerTrigger"):
        parse(maxoffsetspertrigger=value)


def test_missing_bootstrap_and_unknown_option() -> None:
    with pytest.raises(MissingOptionError, match=r"kafka\.bootstrap\.servers"):
        KafkaSourceConfig.parse(Options({"subscribe": "a"}, "hzsource"))
    with pytest.raises(UnknownOptionError, match="did you mean 'startingoffsets'"):
        parse(startingofsets="earliest")


@pytest.mark.parametrize("name", ["kafka.auto.offset.reset", "kafka.enable.auto.commit",
                                  "kafka.value.deserializer"])
def test_spark_rejected_client_options(name: str) -> None:
    with pytest.raises(InvalidOptionError, match=re.escape(name)):
        parse(**{name: "x"})


def test_client_options_pass_through_translated_and_secret_safe() -> None:
    cfg = parse(**{
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                  'username="alice" password="s3cret";',
        "kafka.fetch.max.wait.ms": "100",
    })
    assert cfg.client["sasl.username"] == "alice" and cfg.client["sasl.password"] == "s3cret"
    assert cfg.client["fetch.wait.max.ms"] == "100"
    conf = cfg.consumer_conf()
    assert conf["isolation.level"] == "read_committed"  # committed records only, by default
    assert conf["enable.auto.commit"] is False
    assert "s3cret" not in repr(cfg.safe_client())


def test_isolation_level_override_and_validation() -> None:
    assert parse(**{"kafka.isolation.level": "read_uncommitted"}).consumer_conf()["isolation.level"] \
        == "read_uncommitted"
    with pytest.raises(InvalidOptionError, match=r"isolation\.level"):
        parse(**{"kafka.isolation.level": "committed"})


def test_bad_pattern_rejected() -> None:
    with pytest.raises(InvalidOptionError, match="subscribePattern"):
        KafkaSourceConfig.parse(Options({"kafka.bootstrap.servers": "h:1", "subscribepattern": "a("}, "x"))


class _FakeMeta:
    """Broker metadata for planning-logic tests (no broker involved)."""

    def __init__(self, latest: dict[tuple[str, int], int], earliest: int = 0) -> None:
        self.latest_offsets = latest
        self.low = earliest

    def partitions(self, strict: bool = False) -> list[tuple[str, int]]:
        return sorted(self.latest_offsets)

    def latest(self, tps):
        return {tp: self.latest_offsets[tp] for tp in tps}

    def earliest(self, tps):
        return {tp: self.low for tp in tps}


def _reader(latest: dict[tuple[str, int], int], **opts: str):
    from spark_ext.connectors.kafka.source import KafkaStreamReader

    r = KafkaStreamReader(parse(**opts))
    r._plan._meta = _FakeMeta(latest)  # type: ignore[assignment]
    return r


def test_available_now_target_fixed_before_initial_offset_never_goes_back() -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    r = _reader({("a", 0): 100})
    r.prepareForTriggerAvailableNow()  # Spark may call this before initialOffset
    r._plan._meta.latest_offsets = {("a", 0): 120}
    start = r.initialOffset()  # startingOffsets=latest -> 120
    end = r.latestOffset(start, ReadAllAvailable())
    assert end == start == {"a": {"0": 120}}
    assert r.partitions(start, end) == []


class _Away(_FakeMeta):
    """The cluster for a moment without an answer (a partition's leader killed, not yet replaced)."""

    def latest(self, tps):
        from spark_ext.errors import ConnectorError

        raise ConnectorError("no leader for a-0 just now")


def test_available_now_plans_to_its_target_while_the_cluster_has_no_answer() -> None:
    """Trigger.AvailableNow ends at the first batch planned empty: "no new data" while a
    leader moves ended the query with most of its input unread (seen on a three-node
    cluster: 1,200 of 24,000 records, exit 0). Its end is the target fixed at its start,
    as in Spark's own Kafka source, with no broker asked again."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    r = _reader({("a", 0): 100, ("a", 1): 40})
    r.prepareForTriggerAvailableNow()
    r._plan._meta = _Away({("a", 0): 100, ("a", 1): 40})
    start = {"a": {"0": 10, "1": 40}}
    assert r.latestOffset(start, ReadAllAvailable()) == {"a": {"0": 100, "1": 40}}
    assert r.latestOffset(start, ReadMaxRows(30)) == {"a": {"0": 40, "1": 40}}


def test_available_now_is_not_held_short_by_a_new_leaders_lagging_high_watermark() -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    r = _reader({("a", 0): 100})
    r.prepareForTriggerAvailableNow()
    r._plan._meta.latest_offsets = {("a", 0): 60}  # the new leader has not caught up yet
    assert r.latestOffset({"a": {"0": 60}}, ReadAllAvailable()) == {"a": {"0": 100}}


def test_partition_missing_from_metadata_keeps_its_offset() -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    r = _reader({("a", 0): 50}, failondataloss="false")
    end = r.latestOffset({"a": {"0": 10}, "b": {"0": 7}}, ReadAllAvailable())
    assert end == {"a": {"0": 50}, "b": {"0": 7}}  # b is not forgotten, so not re-read from 0


def test_missing_partition_fails_by_default() -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from spark_ext.errors import DataLossError

    r = _reader({("a", 0): 50})
    with pytest.raises(DataLossError, match="b-0 is missing"):
        r.latestOffset({"a": {"0": 10}, "b": {"0": 7}}, ReadAllAvailable())


def test_recreated_topic_is_read_from_zero_when_loss_allowed() -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    r = _reader({("a", 0): 30}, failondataloss="false")
    end = r.latestOffset({"a": {"0": 500}}, ReadAllAvailable())
    assert end == {"a": {"0": 30}}
    assert r.partitions({"a": {"0": 500}}, end) == [KafkaRange("a", 0, 0, 30)]
    assert r.latestOffset({"a": {"0": 500}}, ReadMaxRows(10)) == {"a": {"0": 10}}


def test_fetcher_choice() -> None:
    assert parse().fetcher == "wire"
    assert parse(**{"kafka.security.protocol": "SSL"}).fetcher == "wire"  # TLS: the wire fetcher speaks it
    # SASL without a mechanism is Kafka's default, GSSAPI: only librdkafka speaks Kerberos
    assert parse(**{"kafka.security.protocol": "SASL_SSL"}).fetcher == "librdkafka"
    with pytest.raises(InvalidOptionError, match="GSSAPI"):
        parse(fetcher="wire", **{"kafka.security.protocol": "SASL_SSL"})


class _Part:
    """A fetch response's partition: no error, no records, the leader's watermarks."""

    def __init__(self, high: int) -> None:
        self.error_code, self.records, self.aborted_transactions = 0, None, None
        self.high_watermark = self.last_stable_offset = high


def _lagging_reader(monkeypatch: pytest.MonkeyPatch, highs: list[int],
                   fail_on_loss: bool) -> tuple[Any, list[float]]:
    """A wire reader of offsets [5, 10) whose leader answers the high watermarks ``highs``
    in turn (the last one forever); a watermark of 10 brings the five records. Time is
    fake: each sleep advances it."""
    import types

    import pyarrow as pa

    from spark_ext import retry as retry_mod
    from spark_ext.connectors.kafka.source import wire_reader
    from spark_ext.connectors.kafka.source.config import KafkaSourceConfig
    from spark_ext.connectors.kafka.source.offsets import KafkaRange
    from spark_ext.options import Options

    now = [0.0]
    fake = types.SimpleNamespace(monotonic=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    monkeypatch.setattr(retry_mod, "time", fake)
    monkeypatch.setattr(wire_reader, "time", fake)
    cfg = KafkaSourceConfig.parse(Options({"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t",
                                           "failOnDataLoss": str(fail_on_loss).lower(),
                                           "kafkaConsumer.pollTimeoutMs": "20000"}, "hzsource"))
    reader = wire_reader.WireRangeReader(cfg, KafkaRange("t", 0, 5, 10))
    answers = iter(highs)
    monkeypatch.setattr(reader, "_leader", lambda: types.SimpleNamespace(close=lambda: None))
    monkeypatch.setattr(reader, "_fetch", lambda conn: _Part(next(answers, highs[-1])))

    def decode(part: _Part) -> pa.RecordBatch | None:
        if part.high_watermark <= reader._pos:
            return None
        got = pa.record_batch([pa.array(range(reader._pos, part.high_watermark))], names=["offset"])
        reader._pos = part.high_watermark
        return got
    monkeypatch.setattr(reader, "_decode", decode)
    return reader, now


def test_a_new_leaders_lagging_high_watermark_is_waited_out_not_read_as_data_loss(
        monkeypatch: pytest.MonkeyPatch) -> None:
    reader, now = _lagging_reader(monkeypatch, [5, 5, 5, 10], fail_on_loss=True)
    got = [o for b in reader for o in b.column("offset").to_pylist()]
    assert got == [5, 6, 7, 8, 9] and now[0] < 20


def test_a_high_watermark_short_of_the_planned_end_for_the_whole_poll_timeout_is_data_loss(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from spark_ext.errors import DataLossError

    reader, now = _lagging_reader(monkeypatch, [5], fail_on_loss=True)
    with pytest.raises(DataLossError, match="ends at offset 5 but the batch planned to read up to 10"):
        list(reader)
    assert now[0] >= 20  # only after the whole wait
    skipping, _ = _lagging_reader(monkeypatch, [5], fail_on_loss=False)
    assert list(skipping) == []


def test_time_positions_follow_sparks_precedence_and_refuse_bad_values():
    from spark_ext.connectors.kafka.source.positions import duration_ms, position, strategy

    def opts(**kv: str) -> Options:
        return Options({k.lower(): v for k, v in kv.items()}, "test")

    both = opts(startingTimestamp="1000", startingOffsetsByTimestamp='{"t": {"0": 5}}',
                startingOffsets="earliest")
    assert position(both, "starting", None) == StartingOffsets("timestamp", option="startingTimestamp",
                                                              timestamp=1000)
    by = position(opts(startingOffsetsByTimestamp='{"t": {"0": 5, "1": 7}}'), "starting", None)
    assert (by.kind, by.specific, by.by_time) == ("by_timestamp", {("t", 0): 5, ("t", 1): 7}, True)
    assert position(opts(), "ending", None).kind == "latest"
    with pytest.raises(InvalidOptionError, match=r"Expected a single long value, got 'noon'"):
        position(opts(endingTimestamp="noon"), "ending", None)
    with pytest.raises(InvalidOptionError, match=r"Expected e\.g\."):
        position(opts(startingOffsetsByTimestamp='{"t": [1]}'), "starting", None)
    assert strategy(opts(startingOffsetsByTimestampStrategy="LATEST")) == "latest"
    with pytest.raises(InvalidOptionError, match=r"'error'.*or 'latest'"):
        strategy(opts(startingOffsetsByTimestampStrategy="nearest"))
    assert [duration_ms("d", v) for v in ("15m", "30s", "500ms", "2h", "1d", "250", "1min")] == \
        [900_000, 30_000, 500, 7_200_000, 86_400_000, 250, 60_000]
    with pytest.raises(InvalidOptionError, match="expected a duration"):
        duration_ms("maxTriggerDelay", "soon")


def test_the_pacer_lets_the_first_trigger_through_then_waits_for_the_minimum_or_the_delay(monkeypatch):
    from spark_ext.connectors.kafka.source import positions

    now = [1_000_000.0]
    monkeypatch.setattr(positions.time, "time", lambda: now[0])
    pacer = positions.TriggerPacer(min_records=100, max_delay_ms=3000)
    start = {("t", 0): 0}
    assert not pacer.wait(start, {("t", 0): 10})  # the first trigger of a run never waits
    now[0] += 1
    assert pacer.wait(start, {("t", 0): 99})  # 99 new < 100, 1 s < 3 s: wait
    assert not pacer.wait(start, {("t", 0): 100})  # enough: go, and the clock restarts
    now[0] += 2.9
    assert pacer.wait(start, {("t", 0): 1})
    now[0] += 0.1
    assert not pacer.wait(start, {("t", 0): 1})  # 3 s since the last batch: go with what there is


class _ReorderingConsumer:
    """librdkafka's consumer as seen in a run (tests/test_kafka_source_driver.py): queued
    asynchronous commits complete, and are applied by the group, in any order; here the
    newest first, after a round trip (a poll that waits). ``applied``: what the group
    holds, the last commit applied."""

    def __init__(self, conf: dict[str, Any]) -> None:
        self.on_commit = conf["on_commit"]
        self.in_flight: list[list[Any]] = []
        self.applied: dict[int, int] = {}

    def commit(self, offsets: list[Any], asynchronous: bool) -> None:
        assert asynchronous
        self.in_flight.append(offsets)

    def poll(self, timeout: float) -> None:
        if timeout <= 0:
            return  # a commit's answer takes a round trip: none has come back yet
        while self.in_flight:
            offsets = self.in_flight.pop()  # the newest first
            self.applied = {tp.partition: tp.offset for tp in offsets}
            self.on_commit(None, offsets)


def test_the_group_ends_at_the_last_offsets_committed_though_commits_complete_out_of_order(monkeypatch):
    """One commit in flight at a time: a later one is sent once the earlier one's outcome
    arrived, so the group's last applied commit is the newest (seen: 400 of 600 after an
    AvailableNow run whose commits of 400 and 600 were both in flight)."""
    import confluent_kafka

    from spark_ext.connectors.kafka.source.lag_group import GroupCommitter

    consumers: list[_ReorderingConsumer] = []

    def consumer(conf: dict[str, Any]) -> _ReorderingConsumer:
        consumers.append(_ReorderingConsumer(conf))
        return consumers[-1]

    monkeypatch.setattr(confluent_kafka, "Consumer", consumer)
    group = GroupCommitter(parse(commitOffsetsToGroup="g"))
    for end in (0, 200, 400, 600):
        group.commit({"a": {"0": end}})
    group.flush({"a": {"0": 600}})
    assert consumers[0].applied == {0: 600}
    group.commit({"a": {"0": 600}})  # an idle query's next plan: nothing sent again
    assert consumers[0].in_flight == []
