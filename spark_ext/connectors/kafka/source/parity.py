"""How the Kafka source's options compare with Spark's own ``format("kafka")``: one row per
option Spark documents for its source, for the docs' parity table (marker
``kafka-parity``). ``tests/test_kafka_parity.py`` runs a differential case (the same
query with both formats on one topic) for every row with a ``case``, so a row that
stops being true fails there.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Parity:
    option: str
    spark: str  # what Spark's own source does
    ours: str  # what ours does, where it differs or adds
    since: str  # the PySpark release from which ours has it


PARITY: tuple[Parity, ...] = (
    Parity("subscribe", "A comma list of topics; exactly one of `subscribe`, `subscribePattern`, `assign`",
           "Same; a topic that does not exist fails the query at start, as Spark's admin-based "
           "offset reader does", "4.0"),
    Parity("assign", "JSON of topics and partitions", "Same", "4.0"),
    Parity("startingOffsets", "`latest` (streams) / `earliest` (batch) or JSON, -2 earliest, -1 latest",
           "Same; the JSON must name every subscribed partition", "4.0"),
    Parity("endingOffsets", "Batch: `latest` or JSON; refused by a stream", "Same", "4.0"),
    Parity("maxOffsetsPerTrigger", "At most this many records a batch, shared by the partitions' backlog",
           "Same batch sizes (a remainder may fall on another partition)", "4.2"),
    Parity("minPartitions", "Split ranges into at least this many tasks; must be positive", "Same rows; "
           "small ranges may share a task (`minRecordsPerPartition`)", "4.0"),
    Parity("maxRecordsPerPartition", "Split ranges so no task reads more than this", "Same", "4.0"),
    Parity("includeHeaders", "Adds `headers array<struct<key, value>>`", "Same schema and values", "4.0"),
    Parity("groupIdPrefix", "Prefix of the generated group ids", "The clients' `group.id`; no group is "
           "joined", "4.0"),
    Parity("kafkaConsumer.pollTimeoutMs", "How long an executor polls", "How long a task or the planner "
           "waits through a broker outage", "4.0"),
    Parity("fetchOffset.numRetries", "Retries of the driver's offset requests", "Same", "4.0"),
    Parity("fetchOffset.retryIntervalMs", "Wait between those retries", "Same", "4.0"),
    Parity("kafka.isolation.level", "Client setting, default `read_uncommitted`", "Default `read_committed`: "
           "a pipeline behind a transactional sink never sees aborted records", "4.0"),
    Parity("kafka.*", "Client settings; `auto.offset.reset`, `enable.auto.commit`, the deserializers and "
           "interceptors refused", "Same refusals with the fix named; Java security names translated for "
           "librdkafka", "4.0"),
    Parity("startingTimestamp", "Every partition starts at its first record with a timestamp at or after "
           "it; wins over the other two start options", "Same", "4.0"),
    Parity("startingOffsetsByTimestamp", "The same per partition; the JSON must name every assigned "
           "partition", "Same", "4.0"),
    Parity("startingOffsetsByTimestampStrategy", "`error` (default) fails when no record is that late; "
           "`latest` starts such a partition at its latest offset", "Same; a bad value is refused naming "
           "both values (Spark: `No value found for ...`)", "4.0"),
    Parity("endingTimestamp", "Batch: every partition ends before its first record at or after it (none: "
           "latest). A stream ignores it silently", "Same for batch; a stream refuses it (`ending "
           "timestamp not valid in streaming queries`), as Spark refuses the other two ending options",
           "4.0"),
    Parity("endingOffsetsByTimestamp", "Batch: the same per partition; refused by a stream", "Same", "4.0"),
    Parity("minOffsetsPerTrigger", "A trigger is skipped while fewer new records are available, until "
           "`maxTriggerDelay` passed since the last batch; the first trigger of a run never waits; larger "
           "than `maxOffsetsPerTrigger` is refused", "Same; ignored by `Trigger.AvailableNow` (Spark may end "
           "such a run with records below the minimum unread)", "4.2"),
    Parity("maxTriggerDelay", "Default `15m`; Spark's time strings", "Same units (`us`, `ms`, `s`, `m`, "
           "`min`, `h`, `d`; a bare number is ms); a negative delay is refused", "4.2"),
    Parity("subscribePattern", "Topics matching the whole name; a topic created while running is read "
           "from its start, a deleted one is data loss (`failOnDataLoss`)", "Same", "4.0"),
    Parity("failOnDataLoss", "`true` fails when records were deleted before they were read (retention, a "
           "deleted topic); `false` goes on from the earliest available", "Same; the error names the "
           "partition and the deleted range", "4.0"),
    Parity("kafka.group.id", "Used as the consumers' group id, with a warning; `groupIdPrefix` then "
           "ignored; nothing committed", "Same (the wire fetcher joins no group at all)", "4.0"),
)
