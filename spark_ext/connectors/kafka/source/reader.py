"""Replayable Kafka source: ``hzsource`` connector ``kafka``.

Jet's replayable source saves its offsets to the snapshot; here the snapshot is Spark's
offset log. For micro-batch N Spark writes the end offsets this reader returned to the
offset log *before* the batch runs, and replays N after a crash from the same start and
end: ``partitions(start, end)`` depends on nothing else, so the replay reads exactly the
same records. Nothing is committed to Kafka; a consumer group is never
joined.

Where each call runs (observed on PySpark 4.3 with a probe that logged each call's process):

- ``initialOffset``, ``latestOffset``, ``partitions``, ``commit``, ``stop``: the
  driver, on one long-lived reader object, which holds one admin client.
- ``read``: executors, on an unpickled copy without that client; one consumer per range,
  the ranges of a task one after another (small batches put several in one task:
  ``offsets.merge_small``).

Per-partition event-time progress (for watermark coalescing): every row carries
``topic`` and ``partition`` and the record's Kafka ``timestamp``, and within a range rows
arrive in offset order, so a downstream operator learns each partition's latest event
time as ``max(timestamp)`` grouped by ``(topic, partition)``; ``spark_ext.windows`` does
this. ``reportLatestOffset`` shows the broker's latest offsets in the query progress.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_ext import compat, failpoints, worker_heap
from spark_ext.compat import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from spark_ext.connector import SourceConnector
from spark_ext.connectors.kafka.source.admin import KafkaMetadata
from spark_ext.connectors.kafka.source.config import SOURCE_OPTIONS, KafkaSourceConfig
from spark_ext.connectors.kafka.source.lag_group import GroupCommitter
from spark_ext.connectors.kafka.source.offsets import (
    EARLIEST,
    LATEST,
    KafkaRange,
    KafkaRanges,
    PartitionOffsets,
    StartingOffsets,
    TopicPartition,
    describe,
    from_json,
    plan_ranges,
    rate_limit,
    to_json,
)
from spark_ext.connectors.kafka.source.positions import TriggerPacer, stamps_for
from spark_ext.deadletters import CORRUPT, corrupt_column, corrupt_type
from spark_ext.errors import ConnectorError, DataLossError, InvalidOptionError, UndecodableRecordError
from spark_ext.options import Options
from spark_ext.schemas.columns import ColumnFormat
from spark_ext.shipping import Shipped

log = logging.getLogger(__name__)


def read_range(cfg: KafkaSourceConfig, rng: KafkaRange) -> Iterator[pa.RecordBatch]:
    """Executor: one range as Arrow batches, through the configured fetcher."""
    # Imported here, not above: the fetchers pull in kafka-python and aiokafka (about 0.15 s),
    # which the driver's planning, a new process for every query, never needs.
    from spark_ext.connectors.kafka.source.librdkafka_reader import RangeReader
    from spark_ext.connectors.kafka.source.wire_reader import WireRangeReader

    batches: Iterator[pa.RecordBatch] = iter(WireRangeReader(cfg, rng) if cfg.fetcher == "wire"
                                             else RangeReader(cfg, rng))
    if cfg.formats:
        return (typed(cfg.formats, b, cfg.permissive) for b in batches)
    return batches


def typed(formats: Sequence[ColumnFormat], batch: pa.RecordBatch, permissive: bool) -> pa.RecordBatch:
    """Executor: ``batch`` with its key and/or value read in their formats. A record that
    cannot be read fails the task naming its partition and offset; with ``permissive``
    (``mode`` PERMISSIVE) its key and value are null and ``_corrupt_record`` holds it raw."""
    raw = dict(zip(batch.schema.names, batch.columns, strict=True))
    cols = dict(raw)
    errors: dict[int, str] = {}
    for fmt in formats:
        column, bad = fmt.decode(cols[fmt.column])
        if bad and not permissive:
            row, why = bad[0]
            topic, part, offset = (cols[c][row].as_py() for c in ("topic", "partition", "offset"))
            raise UndecodableRecordError(
                f"the {fmt.column} of the record at offset {offset} of {topic}-{part} cannot be read as "
                f"{fmt.format} ({why}); {len(bad)} of this fetch's {len(column)} records cannot. Set "
                "dead-letter options on the sink and option mode PERMISSIVE here to set such records aside, "
                f"fix or skip them at the producer, or read this {fmt.column} raw (option "
                f"'{fmt.column}Format' raw)")
        for row, why in bad:
            errors[row] = f"{errors[row]}; " if row in errors else ""
            errors[row] += f"the {fmt.column} cannot be read as {fmt.format}: {why}"
        cols[fmt.column] = column
    if permissive:
        if errors:  # the record as it came, key and value both null where either is unreadable
            import pyarrow.compute as pc  # here: the driver's planning never needs it

            bad_rows = np.zeros(batch.num_rows, bool)
            bad_rows[list(errors)] = True
            for fmt in formats:
                kind = cols[fmt.column].type
                nulls = pa.nulls(batch.num_rows, kind)
                cols[fmt.column] = pc.if_else(pa.array(bad_rows), nulls, cols[fmt.column])
        cols[CORRUPT] = corrupt_column(raw, errors, batch.num_rows)
    return pa.RecordBatch.from_arrays(list(cols.values()), names=list(cols))


def read_partition(cfg: KafkaSourceConfig, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """Executor: an input partition's ranges as Arrow batches, one range after another."""
    worker_heap.settle()
    if isinstance(partition, KafkaRanges):
        return itertools.chain.from_iterable(read_range(cfg, r) for r in partition.ranges)
    if isinstance(partition, KafkaRange):
        return read_range(cfg, partition)
    # A batch read with nothing to read (an empty topic, a start at the end): PySpark runs
    # one task where ``partitions`` planned none, given a bare InputPartition(None) (4.0: None).
    if partition is None or (type(partition) is InputPartition and partition.value is None):
        return iter(())
    raise TypeError(f"the Kafka source cannot read a {type(partition).__name__}: {partition!r}")


def source_schema(include_headers: bool, formats: Sequence[ColumnFormat] = (),
                  permissive: bool = False) -> StructType:
    """The columns of Spark's built-in kafka source, in its order; a key or value read in a
    format other than raw has its reader schema's type. ``permissive``: and
    ``_corrupt_record``, the records that could not be read."""
    types = {f.column: f.spark_type() for f in formats}
    fields = [
        StructField("key", types.get("key", BinaryType())),
        StructField("value", types.get("value", BinaryType())),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    if permissive:
        fields.append(StructField(CORRUPT, corrupt_type()))
    return StructType(fields)


class _Planner:
    """Driver-side state shared by the stream and batch readers; dropped when pickled."""

    def __init__(self, cfg: KafkaSourceConfig) -> None:
        self.cfg = cfg
        self._meta: KafkaMetadata | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Executors need the config only; the admin client stays on the driver.
        return {**self.__dict__, "_meta": None}

    @property
    def meta(self) -> KafkaMetadata:
        if self._meta is None:
            self._meta = KafkaMetadata(self.cfg)
        return self._meta

    def resolve(self, pos: StartingOffsets, start: bool = True) -> PartitionOffsets:
        """``earliest`` / ``latest`` / JSON / by timestamp -> concrete offsets for every
        current partition. ``start``: a start (a timestamp no record reaches follows
        ``startingOffsetsByTimestampStrategy``), else an end (the latest offset)."""
        tps = self.meta.partitions(strict=True)
        spec_kind, specific, option = pos.kind, pos.specific, pos.option
        if spec_kind == "earliest":
            return self.meta.earliest(tps)
        if spec_kind == "latest":
            return self.meta.latest(tps)
        if spec_kind == "timestamp":
            return self._by_time(stamps_for(pos, tps), pos, start)
        unknown = set(specific) - set(tps)
        if unknown:
            raise InvalidOptionError(
                f"option {option!r} names partition(s) {describe(unknown)} that are not in "
                f"{self.cfg.subscription.describe()}; subscribed partitions: {describe(tps)}"
            )
        missing = set(tps) - set(specific)
        if missing:
            what = "a timestamp" if spec_kind == "by_timestamp" else "an offset (-2 earliest, -1 latest)"
            raise InvalidOptionError(
                f"option {option!r} must give {what} for every subscribed partition; missing "
                f"{describe(missing)}"
            )
        if spec_kind == "by_timestamp":
            return self._by_time(dict(specific), pos, start)
        early = self.meta.earliest(tps) if EARLIEST in specific.values() else {}
        late = self.meta.latest(tps) if LATEST in specific.values() else {}
        return {tp: early[tp] if o == EARLIEST else late[tp] if o == LATEST else o
                for tp, o in specific.items()}

    def _by_time(self, stamps: dict[TopicPartition, int], pos: StartingOffsets,
                 start: bool) -> PartitionOffsets:
        found = self.meta.for_timestamps(stamps)
        none = sorted(tp for tp, o in found.items() if o is None)
        if none and start and self.cfg.timestamp_strategy == "error":
            which = ", ".join(f"topic-partition {t}-{p} and timestamp {stamps[(t, p)]}" for t, p in none)
            raise InvalidOptionError(
                f"option {pos.option!r}: No offset matched from request of {which}: no record is that "
                "late. Give an earlier timestamp, or set startingOffsetsByTimestampStrategy=latest to start "
                "such partitions at their latest offset")
        late = self.meta.latest(none) if none else {}
        return {tp: o if o is not None else late[tp] for tp, o in found.items()}

    def ranges(self, start: PartitionOffsets, end: PartitionOffsets) -> list[KafkaRange | KafkaRanges]:
        """Deterministic ranges; partitions new since ``start`` are read from offset 0."""
        begin: PartitionOffsets = {}
        for tp, e in end.items():
            s = start.get(tp, 0)
            # end < start: the topic was recreated and failOnDataLoss=false let it through
            # (latestOffset raised otherwise); read the new log from its beginning.
            begin[tp] = 0 if e < s else s
        cfg = self.cfg
        return plan_ranges(begin, end, cfg.min_partitions, cfg.max_records_per_partition,
                           cfg.min_records_per_partition)


class KafkaStreamReader(Shipped, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader. Planning calls run on the driver; ``read`` on executors."""

    def __init__(self, cfg: KafkaSourceConfig) -> None:
        self._plan = _Planner(cfg)
        self._cfg = cfg
        self._target: PartitionOffsets | None = None
        self._latest: PartitionOffsets | None = None
        self._warned: dict[tuple[str, int], str] = {}
        self._down_since: float | None = None
        # The last end offsets this reader planned or returned: the start of the next batch
        # on a release whose latestOffset() is not given one (None: not known yet).
        self._known: PartitionOffsets | None = None
        self._group = GroupCommitter(cfg) if cfg.commit_group else None
        low = cfg.min_offsets_per_trigger
        self._pacer = TriggerPacer(low, cfg.max_trigger_delay_ms) if low else None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_target": None, "_latest": None, "_warned": {}, "_known": None,
                "_group": None, "_pacer": None}

    def check_reachable(self) -> None:
        """Driver, at query start: the brokers answer and the subscription exists.

        On a secured cluster the wire fetcher's own handshake is tried first, so wrong
        credentials or an untrusted certificate fail here with ``AuthenticationError``
        (naming the fix, never the password) rather than inside a task.
        """
        if self._cfg.fetcher == "wire" and self._cfg.security.protocol != "PLAINTEXT":
            from spark_ext.connectors.kafka.client.connection import metadata

            try:
                metadata(self._cfg.bootstrap, [], self._cfg.metadata_timeout_s, self._cfg.security)
            except (ConnectionError, OSError):
                pass  # unreachable: the check below reports it with the client's own words
        self._plan.meta.partitions(strict=True)

    def initialOffset(self) -> dict:
        """Driver, when a query starts without a checkpoint: resolve ``startingOffsets``."""
        return to_json(self._plan.resolve(self._cfg.starting))

    def getDefaultReadLimit(self) -> ReadLimit:
        """Driver: ``maxOffsetsPerTrigger`` (else ``minOffsetsPerTrigger``) as Spark's
        admission control. PySpark carries one limit, not Spark's composite of both: the
        other is applied from the options, and ``Trigger.Once`` still replaces either by
        ``ReadAllAvailable``, which turns both off."""
        n = self._cfg.max_offsets_per_trigger
        if n:
            return ReadMaxRows(n)
        low = self._cfg.min_offsets_per_trigger
        return ReadMinRows(low) if low else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Driver, once, with ``Trigger.AvailableNow``: fix the target at today's latest."""
        meta = self._plan.meta
        self._target = meta.latest(meta.partitions(strict=True))

    def _check_loss(self, start: PartitionOffsets, earliest: PartitionOffsets,
                    latest: PartitionOffsets) -> None:
        problems: dict[tuple[str, int], str] = {}
        for tp, s in sorted(start.items()):
            t, p = tp
            if tp not in latest:
                problems[tp] = f"partition {t}-{p} is missing from the cluster (was at offset {s})"
            elif latest[tp] < s:
                problems[tp] = (f"{t}-{p} now ends at offset {latest[tp]}, before offset {s} already "
                                "read: the topic was deleted and recreated, or truncated")
            elif earliest[tp] > s:
                problems[tp] = (f"records {s}..{earliest[tp] - 1} of {t}-{p} were deleted (retention) "
                                "before they were read")
        if not problems:
            return
        text = "; ".join(problems.values())
        if self._cfg.fail_on_data_loss:
            raise DataLossError(
                f"Kafka data loss: {text}. Set option failOnDataLoss=false to skip what is gone and "
                "continue from the earliest available offsets"
            )
        # latestOffset runs many times a second when idle: say each problem once.
        fresh = {tp: m for tp, m in problems.items() if self._warned.get(tp) != m}
        if fresh:
            log.warning("Kafka data loss, continuing as failOnDataLoss=false: %s", "; ".join(fresh.values()))
            self._warned.update(fresh)

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        """Driver, before each batch (often, when idle): the end offsets of the next batch.

        Never behind ``start`` except for a partition that now ends before it (recreated:
        ``partitions`` then reads it from 0, which ``_check_loss`` allowed only with
        ``failOnDataLoss=false``); a partition missing from the cluster keeps its offset,
        so a topic that comes back is not read twice.

        PySpark 4.0 and 4.1 call it without arguments: ``start`` is then the last end this
        reader knows (none right after a restart: the latest offsets, and a broker that is
        away fails the trigger), and ``partitions`` checks for loss instead.
        """
        if start is None:
            if self._known is None:
                return self._remember(self._latest_now())
            start = to_json(self._known)
        if self._group is None:
            return self._next_end(start, limit)
        # Spark asks for the next batch only once the last one committed, and its own
        # commit(end) waits for a later batch with data: an idle query would show the last
        # batch as lag for ever.
        self._group.commit(start)
        end = self._next_end(start, limit)
        if end == start:
            # A plan with nothing new is where a run ends (AvailableNow's last plan, a
            # query stopped while idle), and Spark ends this process then without calling
            # stop(): the commit just queued must have reached the group by now.
            self._group.flush(start)
        return end

    def _next_end(self, start: dict, limit: ReadLimit | None) -> dict:
        begin = from_json(start)
        if self._target is not None:
            return self._toward_target(begin, limit)
        meta = self._plan.meta
        try:
            latest = meta.latest(meta.partitions())
        except ConnectorError as e:
            # Ride through a broker restart: report "no new data" for up to
            # kafkaConsumer.pollTimeoutMs, then fail with the broker's error.
            now = time.monotonic()
            self._down_since = self._down_since or now
            if now - self._down_since > self._cfg.poll_timeout_ms / 1000.0:
                raise
            log.warning("Kafka unavailable, planning no new data for now: %s", e)
            return start
        self._down_since = None
        earliest = meta.earliest(begin.keys() & latest.keys()) if begin else {}
        # A topic deleted between the two lookups answers the second one no more.
        latest = {tp: o for tp, o in latest.items() if tp not in begin or tp in earliest}
        self._latest = latest
        self._check_loss(begin, earliest, latest)
        recreated = {tp for tp, s in begin.items() if tp in latest and latest[tp] < s}
        end = {**begin, **latest}
        end = {tp: o if tp in recreated else max(o, begin.get(tp, 0)) for tp, o in end.items()}
        counted_from = {tp: 0 if tp in recreated else begin.get(tp, 0) for tp in end}  # as ranges() reads
        if self._pacer is not None and not isinstance(limit, ReadAllAvailable) \
                and self._pacer.wait(counted_from, end):
            return start  # fewer new records than minOffsetsPerTrigger, and maxTriggerDelay not over
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(counted_from, end, limit.max_rows)
        return self._remember(to_json(end))

    def _toward_target(self, begin: PartitionOffsets, limit: ReadLimit | None) -> dict:
        """``Trigger.AvailableNow``: the end is the target fixed at its start, as in Spark's
        own Kafka source; no broker is asked again. Spark ends such a query at the first
        batch planned empty, so a moment without an answer (a leader killed, not yet
        replaced) or a new leader's lagging high watermark, planned as "no new data",
        would end it with input unread. A target below ``begin`` (the query started
        from offsets past it) never goes back. Records deleted before they were read are
        checked here when the cluster answers, else by the task that reads them."""
        assert self._target is not None
        self._latest = self._target  # what progress reports as the source's latest
        end = {**begin, **{tp: max(o, begin.get(tp, 0)) for tp, o in self._target.items()}}
        try:
            earliest = self._plan.meta.earliest(begin.keys()) if begin else {}
        except ConnectorError as e:
            log.warning("Kafka unavailable, checking for deleted records when they are read: %s", e)
        else:
            self._check_loss(begin, earliest, end)
        if isinstance(limit, ReadMaxRows):
            end = rate_limit({tp: begin.get(tp, 0) for tp in end}, end, limit.max_rows)
        return self._remember(to_json(end))

    def _latest_now(self) -> dict:
        """The broker's latest offsets; raises while it is away. Called only before 4.2,
        where availableNow is Spark's own wrapper (``_target`` is never set)."""
        meta = self._plan.meta
        self._latest = meta.latest(meta.partitions())
        return to_json(self._latest)

    def _remember(self, end: dict) -> dict:
        self._known = from_json(end)
        return end

    def reportLatestOffset(self) -> dict | None:
        """Driver: the broker's latest offsets as of the last ``latestOffset`` call."""
        return to_json(self._latest) if self._latest is not None else None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        """Driver: the batch's ranges; the same ``start``/``end`` always give the same ranges."""
        begin, stop = from_json(start), from_json(end)
        if not compat.HAS_ADMISSION_CONTROL:
            # latestOffset() could not check this start (Spark gave it none): check it here.
            meta = self._plan.meta
            self._check_loss(begin, meta.earliest(begin.keys() & stop.keys()), stop)
        self._known = stop
        return self._plan.ranges(begin, stop)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Executor: the partition's records as Arrow batches."""
        assert isinstance(partition, KafkaRange | KafkaRanges)
        ident = compat.task_identity()
        failpoints.hit("kafka.read", ident.batch_id if ident else None, partition.size)
        return read_partition(self._cfg, partition)

    def commit(self, end: dict) -> None:
        """Driver, after batch ending at ``end`` committed: offsets already live in the
        checkpoint; with ``commitOffsetsToGroup`` they also go to that group, for lag tools."""
        if self._group is not None:
            self._group.commit(end)

    def stop(self) -> None:
        """Driver, when the query stops."""
        if self._group is not None:
            self._group.close()
        if self._plan._meta is not None:
            self._plan._meta.close()
            self._plan._meta = None


class KafkaBatchReader(Shipped, DataSourceReader):
    """``spark.read``: ``startingOffsets`` (default earliest) to ``endingOffsets`` (default latest)."""

    def __init__(self, cfg: KafkaSourceConfig) -> None:
        self._plan = _Planner(cfg)
        self._cfg = cfg

    def partitions(self) -> Sequence[InputPartition]:
        """Driver: resolve both ends now, then plan ranges."""
        start = self._plan.resolve(self._cfg.starting)
        end = self._plan.resolve(self._cfg.ending, start=False)
        behind = {tp for tp, e in end.items() if start.get(tp, 0) > e}
        if behind:
            raise InvalidOptionError(
                f"{self._cfg.starting.option} is after {self._cfg.ending.option} for {describe(behind)}; "
                "fix the start or the end of the batch read"
            )
        return self._plan.ranges({tp: start.get(tp, 0) for tp in end}, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Executor: the partition's records as Arrow batches."""
        return read_partition(self._cfg, partition)


class KafkaSource(SourceConnector):
    """``spark.readStream.format("hzsource").option("connector", "kafka")``."""

    name = "kafka"
    option_spec = SOURCE_OPTIONS

    def check(self, options: Options) -> None:
        KafkaSourceConfig.parse(options)

    def schema(self, options: Options) -> StructType:
        default = SOURCE_OPTIONS.default_bool("includeHeaders")
        cfg = KafkaSourceConfig.parse(options)
        return source_schema(options.get_bool("includeheaders", default), cfg.formats, cfg.permissive)

    def stream_reader(self, options: Options, schema: StructType) -> DataSourceStreamReader:
        cfg = KafkaSourceConfig.parse(options)
        for name, what in (("endingoffsets", "ending offset"), ("endingtimestamp", "ending timestamp"),
                           ("endingoffsetsbytimestamp", "ending timestamp")):
            if options.get_str(name) is not None:
                given = SOURCE_OPTIONS.option(name).name
                raise InvalidOptionError(f"{what} not valid in streaming queries: option {given!r} is for "
                                         "batch reads (spark.read); drop it, or stop the stream yourself")
        for option, n in (("maxOffsetsPerTrigger", cfg.max_offsets_per_trigger),
                          ("minOffsetsPerTrigger", cfg.min_offsets_per_trigger)):
            if n:
                compat.require_admission_control(
                    f"option {option}", "drop the option (each batch then reads all available)")
        _warn_group_id(options)
        _same_types(cfg, schema)
        reader = KafkaStreamReader(cfg)
        reader.check_reachable()
        return reader

    def reader(self, options: Options, schema: StructType) -> DataSourceReader:
        cfg = KafkaSourceConfig.parse(options, batch=True)
        st = cfg.starting
        if not st.by_time and (st.kind == "latest" or LATEST in st.specific.values()):
            raise InvalidOptionError(
                "option 'startingOffsets' cannot be latest for a batch read (spark.read)"
            )
        for name in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"):
            if options.get_str(name.lower()) is not None:
                log.warning("option %s is ignored by batch reads", name)
        _warn_group_id(options)
        _same_types(cfg, schema)
        return KafkaBatchReader(cfg)


def _same_types(cfg: KafkaSourceConfig, schema: StructType) -> None:
    """The reader schemas read now give the columns ``schema()`` gave when the query was
    defined: a subject's latest version may have moved in between."""
    for fmt in cfg.formats:
        if fmt.column in schema.names and schema[fmt.column].dataType != fmt.spark_type():
            raise InvalidOptionError(
                f"the {fmt.column}'s reader schema, subject {fmt.subject!r}, is now version "
                f"{fmt.reader.version} (id {fmt.reader.id}), which gives other columns than the DataFrame "
                f"was defined with: a version was registered meanwhile. Define the DataFrame again (load()) "
                f"to read with it, or pin a version with option '{fmt.column}SchemaVersion'")


def _warn_group_id(options: Options) -> None:
    """Spark's warnings for a ``group.id`` of the user's: it is used, and it is risky."""
    if options.get_str("kafka.group.id") is None:
        return
    log.warning("Kafka option 'kafka.group.id' has been set on this query: the source joins no group and "
                "reads nothing back from it, but ACLs and quotas on that group are shared with every other "
                "client using it (commitOffsetsToGroup commits to its own group)")
    if options.get_str("groupidprefix") is not None:
        log.warning("option groupIdPrefix is ignored, as option kafka.group.id has been set")
