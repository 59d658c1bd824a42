"""Which records a topic refuses for their own sake, found before they are sent. Executor.

With dead letters the Kafka sink must set such records aside, but the broker refuses a
whole record batch, and a refused batch breaks the producer's sequence numbers for every
batch in flight behind it. So the sink applies the broker's own rules to each record
first, from the topic's settings, and sends only what the broker takes:

- a record whose batch alone is larger than the topic's ``max.message.bytes``
  (``MESSAGE_TOO_LARGE``) or ``segment.bytes`` (``RECORD_LIST_TOO_LARGE``);
- a record without a key on a compacted topic (``INVALID_RECORD``);
- a row naming a partition the topic does not have, or no topic at all.

Sizes are checked on Arrow columns at once; only a record near the limit (within about 1%
of it, at least 1 KiB) is encoded alone, compressed as the sink sends it, to learn its exact
size. Batches of a topic the ``topic`` column names are cut at that topic's limit. A refusal the rules did not
foresee (a setting changed while the query runs) fails the task as without dead letters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_ext.connectors.kafka.sink.topic import TopicRules

BATCH_HEADER = 61  # a v2 record batch's bytes before its first record
RECORD_MOST = 64  # a record's own framing beyond its key, value and headers, at most
_SIZE_ERRORS = {"max.message.bytes": ("MessageSizeTooLargeError", "MESSAGE_TOO_LARGE"),
                "segment.bytes": ("RecordListTooLargeError", "RECORD_LIST_TOO_LARGE")}


@dataclass(frozen=True)
class Refused:
    """One row the rules refuse: its index in the Arrow batch and why, as Kafka says it."""

    row: int
    error_class: str
    error_code: str
    message: str


def bad_targets(batch: pa.RecordBatch, topic_option: str | None, counts: Mapping[str, int]) -> list[Refused]:
    """Rows without a topic or naming a partition their topic does not have (a topic that
    does not exist is the system's: it fails the task)."""
    names = batch.schema.names
    out: list[Refused] = []
    if "topic" in names and not topic_option:
        topics = batch.column("topic").to_pylist()
    else:
        topics = [topic_option] * batch.num_rows
    parts = batch.column("partition").to_pylist() if "partition" in names else None
    for i, t in enumerate(topics):
        if t is None:
            out.append(Refused(i, "UnknownTopicOrPartitionError", "UNKNOWN_TOPIC_OR_PARTITION",
                               "the row's topic is null and no option 'topic' is set"))
            continue
        p = parts[i] if parts is not None else None
        count = counts.get(t)
        if p is not None and count is not None and (p < -1 or p >= count):  # -1: the partitioner picks
            out.append(Refused(i, "UnknownTopicOrPartitionError", "UNKNOWN_TOPIC_OR_PARTITION",
                               f"partition {p} of topic {t!r}, which has partitions 0 to {count - 1}"))
    return out


def refused_records(batch: pa.RecordBatch, rows: np.ndarray, topic: str, rules: TopicRules, codec: int,
                    ts_ms: int) -> list[Refused]:
    """Of ``rows`` (all bound for ``topic``), those the topic's rules refuse."""
    names = batch.schema.names
    idx = pa.array(rows)
    out: list[Refused] = []
    if rules.compacted:
        if "key" in names:
            keyless = np.nonzero(np.asarray(batch.column("key").take(idx).is_null()))[0]
        else:
            keyless = np.arange(len(rows))
        for j in keyless:
            out.append(Refused(int(rows[j]), "InvalidRecordError", "INVALID_RECORD",
                               f"Compacted topic cannot accept message without key in topic {topic!r}"))
    limits = [(n, c) for n, c in ((rules.max_bytes, "max.message.bytes"),
                                  (rules.segment_bytes, "segment.bytes")) if n is not None]
    if not limits:
        return out
    least = min(n for n, _ in limits)
    size = _raw_sizes(batch, idx)
    # compressing what does not compress adds bytes (stored deflate blocks, lz4 frames):
    # a record this close to the limit is encoded to learn its size
    margin = BATCH_HEADER + RECORD_MOST + max(1024, least // 100)
    near = np.nonzero(size + margin > least)[0]
    refused = {r.row for r in out}
    for j in near:
        row = int(rows[j])
        if row in refused:
            continue
        exact = _batch_size(batch, row, codec, ts_ms)
        for limit, setting in limits:
            if exact > limit:
                cls, code = _SIZE_ERRORS[setting]
                out.append(Refused(row, cls, code, f"the record's batch is {exact:,} bytes, larger than "
                                   f"the {setting} ({limit:,}) of topic {topic!r}"))
                break
    return out


def _lengths(col: pa.Array) -> np.ndarray:
    if pa.types.is_string(col.type):
        col = col.cast(pa.binary())
    return np.asarray(pc.fill_null(pc.binary_length(col), 0), dtype=np.int64)


def _raw_sizes(batch: pa.RecordBatch, idx: pa.Array) -> np.ndarray:
    """Bytes of key, value and headers of each row of ``idx``: what its record carries."""
    names = batch.schema.names
    size = _lengths(batch.column("value").take(idx))
    if "key" in names:
        size += _lengths(batch.column("key").take(idx))
    if "headers" in names:
        headers = batch.column("headers").take(idx)
        flat = pc.list_flatten(headers)
        if len(flat):
            parents = np.asarray(pc.list_parent_indices(headers))
            each = _lengths(flat.field("key")) + _lengths(flat.field("value")) + 10
            size += np.bincount(parents, weights=each, minlength=len(idx)).astype(np.int64)
    return size


def _batch_size(batch: pa.RecordBatch, row: int, codec: int, ts_ms: int) -> int:
    """The exact size of a record batch holding row ``row`` alone, as the sink encodes it."""
    from spark_ext.connectors.kafka.sink.records import Batcher, columns

    one = Batcher(-1, -1, False, codec, 2**31 - 1)
    sent = [*one.add(("", 0), columns(batch, np.array([row])), ts_ms), *one.drain()]
    return sum(len(data) for _, data, _ in sent)
