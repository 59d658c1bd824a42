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
    Parity("maxTriggerDelay", "Default `15m`; Spark's time strings", "Same", "4.2"),
    Parity("subscribePattern", "Topics matching the whole name; a topic created while running is read "
           "from its start, a deleted one is data loss (`failOnDataLoss`)", "Same", "4.0"),
    Parity("failOnDataLoss", "`true` fails when records were deleted before they were read (retention, a "
           "deleted topic); `false` goes on from the earliest available", "Same; the error names the "
           "partition and the deleted range", "4.0"),
    Parity("kafka.group.id", "Used as the consumers' group id, with a warning; `groupIdPrefix` then "
           "ignored; nothing committed", "Same (the wire fetcher joins no group at all)", "4.0"),
)
