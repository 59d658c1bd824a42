"""Kafka offsets as the source stores them, and how a batch's range is planned.

Pure logic, no broker: everything here is deterministic in its inputs, which is what
makes a replayed batch read exactly the records it read before. The
offset of a topic-partition is the next offset to read; a batch reads ``[start, end)``.

Offsets travel through Spark's offset log as Spark's own Kafka source writes them:
``{"topic": {"0": 42, "1": 17}}``. In ``startingOffsets`` JSON, ``-2`` means earliest and
``-1`` latest, as in Spark.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.datasource import InputPartition

from spark_ext.errors import InvalidOptionError

TopicPartition = tuple[str, int]
PartitionOffsets = dict[TopicPartition, int]

EARLIEST = -2
LATEST = -1


def to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """``{(t, p): o}`` -> Spark's offset JSON shape (sorted, so equal offsets compare equal)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, part), off in sorted(offsets.items()):
        out.setdefault(topic, {})[str(part)] = int(off)
    return out


def from_json(doc: Mapping[str, Any]) -> PartitionOffsets:
    """Spark's offset JSON shape -> ``{(t, p): o}``."""
    return {(topic, int(p)): int(o) for topic, parts in doc.items() for p, o in parts.items()}


def _json(option: str, value: str, shape: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError as e:
        raise InvalidOptionError(
            f"option {option!r} is not valid JSON ({e.msg} at character {e.pos}); "
            f"expected {shape}"
        ) from None


_OFFSETS_SHAPE = '\'{"topic": {"0": 23, "1": -2}}\' (-2 = earliest, -1 = latest)'


@dataclass(frozen=True)
class StartingOffsets:
    """Where a read starts or ends: ``earliest``, ``latest``, ``specific`` offsets per
    partition, or by record time (``timestamp``: one for every partition;
    ``by_timestamp``: ``specific`` holds a timestamp per partition), and the option that
    said so (for messages)."""

    kind: str
    specific: PartitionOffsets = field(default_factory=dict)
    option: str = "startingOffsets"
    timestamp: int | None = None

    @property
    def by_time(self) -> bool:
        return self.kind in ("timestamp", "by_timestamp")

    @staticmethod
    def parse(value: str | None, option: str = "startingOffsets") -> StartingOffsets:
        if value is None or value.strip().lower() == "latest":
            return StartingOffsets("latest", option=option)
        if value.strip().lower() == "earliest":
            return StartingOffsets("earliest", option=option)
        doc = _json(option, value, f"'earliest', 'latest' or JSON like {_OFFSETS_SHAPE}")
        bad = InvalidOptionError(
            f"option {option!r} is {value!r}; expected 'earliest', 'latest' or JSON like {_OFFSETS_SHAPE}"
        )
        if not isinstance(doc, dict) or not doc:
            raise bad
        specific: PartitionOffsets = {}
        for topic, parts in doc.items():
            if not isinstance(parts, dict):
                raise bad
            for p, off in parts.items():
                if not (isinstance(p, str) and p.lstrip("-").isdigit()) or isinstance(off, bool) \
                        or not isinstance(off, int) or off < EARLIEST or int(p) < 0:
                    raise bad
                specific[(topic, int(p))] = off
        return StartingOffsets("specific", specific, option)


def parse_assign(value: str) -> tuple[TopicPartition, ...]:
    """``assign`` JSON ``{"topic": [0, 1]}`` -> sorted topic-partitions."""
    shape = '\'{"topicA": [0, 1], "topicB": [2]}\''
    doc = _json("assign", value, f"JSON like {shape}")
    bad = InvalidOptionError(f"option 'assign' is {value!r}; expected JSON like {shape}")
    if not isinstance(doc, dict) or not doc:
        raise bad
    tps: set[TopicPartition] = set()
    for topic, parts in doc.items():
        if not isinstance(parts, list) or not parts:
            raise bad
        for p in parts:
            if isinstance(p, bool) or not isinstance(p, int) or p < 0:
                raise bad
            tps.add((topic, p))
    return tuple(sorted(tps))


@dataclass(frozen=True)
class KafkaRange(InputPartition):
    """One Spark input partition: records ``[start, end)`` of one topic-partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class KafkaRanges(InputPartition):
    """One Spark input partition reading several small ranges, one after another, each in
    offset order."""

    ranges: tuple[KafkaRange, ...]

    @property
    def size(self) -> int:
        return sum(r.size for r in self.ranges)


def plan_ranges(
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    min_partitions: int | None = None,
    max_records: int | None = None,
    min_records: int = 0,
) -> list[KafkaRange | KafkaRanges]:
    """Split each partition's ``[start, end)`` into input partitions, deterministically.

    One range per topic-partition by default; a range longer than ``max_records`` is cut
    into equal pieces, and when there are fewer ranges than ``min_partitions`` the large
    ones are cut further, in proportion to their size (Spark's rule). Partitions missing
    from ``start`` are new and read from ``end``'s view of their beginning, so callers
    pass them explicitly. Empty ranges are dropped. Then small ranges share a task
    (``merge_small``) when ``min_records`` is set.
    """
    sizes = {tp: end[tp] - start.get(tp, end[tp]) for tp in sorted(end)}
    sizes = {tp: n for tp, n in sizes.items() if n > 0}
    total = sum(sizes.values())
    pieces = {tp: math.ceil(n / max_records) if max_records else 1 for tp, n in sizes.items()}
    if min_partitions and sum(pieces.values()) < min_partitions:
        for tp, n in sizes.items():
            pieces[tp] = max(pieces[tp], round(n / total * min_partitions), 1)
    out: list[KafkaRange] = []
    for tp, n in sizes.items():
        k = min(pieces[tp], n)
        s = start[tp]
        for i in range(k):
            a, b = s + n * i // k, s + n * (i + 1) // k
            out.append(KafkaRange(tp[0], tp[1], a, b))
    return merge_small(out, min_records, min_partitions, max_records)


def merge_small(ranges: list[KafkaRange], min_records: int, min_partitions: int | None = None,
                max_records: int | None = None) -> list[KafkaRange | KafkaRanges]:
    """Put ranges into fewer tasks so each reads about ``min_records`` records or more.

    A Spark task with a Python reader and writer costs tens of milliseconds whatever it
    reads, so a batch of 2,000 records over 4 partitions spends more on its 4 tasks than
    on its records. There are ``total // min_records`` tasks (at least 1, at least
    ``min_partitions``, never more than the ranges); the largest range goes first into
    the task holding the fewest records, and no task takes more than ``max_records`` when
    set. Only sizes and offsets decide, so a replay of the batch plans the same tasks.
    """
    if min_records <= 0 or len(ranges) <= 1:
        return list(ranges)
    total = sum(r.size for r in ranges)
    tasks = max(1, total // min_records, min_partitions or 1)
    if tasks >= len(ranges):
        return list(ranges)
    groups: list[list[KafkaRange]] = [[] for _ in range(tasks)]
    held = [0] * tasks
    for r in sorted(ranges, key=lambda r: (-r.size, r.topic, r.partition, r.start)):
        i = min(range(len(groups)), key=lambda k: (held[k], k))
        if max_records and held[i] and held[i] + r.size > max_records:
            groups.append([])
            held.append(0)
            i = len(groups) - 1
        groups[i].append(r)
        held[i] += r.size
    out: list[KafkaRange | KafkaRanges] = []
    for g in sorted((sorted(g, key=lambda r: (r.topic, r.partition, r.start)) for g in groups if g),
                    key=lambda g: (g[0].topic, g[0].partition, g[0].start)):
        out.append(g[0] if len(g) == 1 else KafkaRanges(tuple(g)))
    return out


def rate_limit(
    start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], max_rows: int
) -> PartitionOffsets:
    """End offsets advancing at most ``max_rows`` records in total from ``start``.

    The budget is shared in proportion to each partition's backlog (largest remainder,
    ties by topic-partition order), so a lagging partition catches up fastest and the
    result depends only on the inputs.
    """
    backlog = {tp: max(latest[tp] - start[tp], 0) for tp in sorted(latest)}
    total = sum(backlog.values())
    if total <= max_rows:
        return dict(latest)
    shares = {tp: n * max_rows / total for tp, n in backlog.items()}
    take = {tp: math.floor(x) for tp, x in shares.items()}
    left = max_rows - sum(take.values())
    for tp in sorted(shares, key=lambda t: (-(shares[t] - take[t]), t))[:left]:
        take[tp] += 1
    return {tp: start[tp] + take[tp] for tp in backlog}


def describe(tps: Iterable[TopicPartition]) -> str:
    """``topic-0, topic-1`` for messages."""
    return ", ".join(f"{t}-{p}" for t, p in sorted(tps))
