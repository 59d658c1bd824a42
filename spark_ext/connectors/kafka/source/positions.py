"""Spark's Kafka source options for where a read starts and ends by record time, and for
how long a micro-batch may wait for enough records, parsed and applied as Spark does.

- ``startingTimestamp`` (every partition) wins over ``startingOffsetsByTimestamp`` (per
  partition), which wins over ``startingOffsets``; the same for the ending trio of a batch
  read. A timestamp resolves to the earliest offset whose record time is at or after it
  (the broker's ListOffsets by timestamp). A start with no such record fails the query
  (``startingOffsetsByTimestampStrategy=error``, the default) or starts at the latest
  offset (``latest``); an end with none ends at the latest offset.
- ``minOffsetsPerTrigger`` skips a trigger while fewer new records are available, until
  ``maxTriggerDelay`` (default 15 minutes) passed since the last batch the source let
  run; the first trigger of a run never waits.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping

from spark_ext.connectors.kafka.source.offsets import PartitionOffsets, StartingOffsets, TopicPartition
from spark_ext.errors import InvalidOptionError
from spark_ext.options import Options

STRATEGIES = ("error", "latest")
_BY_TS_SHAPE = '{"topicA": {"0": 1700000000000, "1": 1700000000000}}'
_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def _timestamp(option: str, value: str) -> int:
    if re.fullmatch(r"-?[0-9]+", value.strip()):  # Spark's toLong: no underscores, no other digits
        return int(value.strip())
    raise InvalidOptionError(f"option {option!r}: Expected a single long value, got {value!r} (epoch "
                             "milliseconds, e.g. 1700000000000)")


def _timestamps(option: str, value: str) -> PartitionOffsets:
    import json

    bad = InvalidOptionError(f"option {option!r}: Expected e.g. {_BY_TS_SHAPE}, got {value!r}")
    try:
        doc = json.loads(value)
    except ValueError:
        raise bad from None
    if not isinstance(doc, dict) or not doc:
        raise bad
    out: PartitionOffsets = {}
    for topic, parts in doc.items():
        if not isinstance(parts, dict) or not parts:
            raise bad
        for p, ts in parts.items():
            if not str(p).isdigit() or type(ts) is not int:
                raise bad
            out[(topic, int(p))] = ts
    return out


def position(opts: Options, which: str, default: str | None) -> StartingOffsets:
    """``which`` ``starting`` or ``ending``: the option that decides, by Spark's precedence."""
    ts = opts.get_str(f"{which}timestamp")
    if ts is not None:
        option = f"{which}Timestamp"
        return StartingOffsets("timestamp", option=option, timestamp=_timestamp(option, ts))
    by = opts.get_str(f"{which}offsetsbytimestamp")
    if by is not None:
        option = f"{which}OffsetsByTimestamp"
        return StartingOffsets("by_timestamp", _timestamps(option, by), option=option)
    return StartingOffsets.parse(opts.get_str(f"{which}offsets", default), f"{which}Offsets")


def strategy(opts: Options) -> str:
    value = (opts.get_str("startingoffsetsbytimestampstrategy") or "error").strip().lower()
    if value not in STRATEGIES:
        raise InvalidOptionError(f"option 'startingOffsetsByTimestampStrategy' is {value!r}; expected "
                                 "'error' (fail when a partition has no record at or after the timestamp) "
                                 "or 'latest' (start such a partition at its latest offset)")
    return value


def duration_ms(option: str, value: str) -> int:
    """Spark's time strings (``15m``, ``30s``, ``500ms``, ``1h``; a bare number is ms)."""
    m = re.fullmatch(r"\s*([0-9]+)([a-z]*)\s*", value.lower())
    if m is None or m.group(2) not in (*_UNITS_MS, ""):
        raise InvalidOptionError(f"option {option!r} is {value!r}; expected a duration such as 15m, 30s, "
                                 "500ms or 1h (a bare number is milliseconds)")
    return int(int(m.group(1)) * _UNITS_MS.get(m.group(2) or "ms", 1))


def stamps_for(pos: StartingOffsets, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    """The timestamp to look up for each partition (``pos.by_time``)."""
    if pos.kind == "timestamp":
        assert pos.timestamp is not None
        return {tp: pos.timestamp for tp in tps}
    return dict(pos.specific)


class TriggerPacer:
    """``minOffsetsPerTrigger`` / ``maxTriggerDelay``: whether this trigger waits. Driver,
    one per stream reader; the clock of the last batch let through is in memory, so the
    first trigger after a (re)start never waits, as in Spark."""

    def __init__(self, min_records: int, max_delay_ms: int) -> None:
        self.min_records, self.max_delay_ms = min_records, max_delay_ms
        self._last_ms = 0.0

    def wait(self, start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int]) -> bool:
        now = time.time() * 1000
        if now - self._last_ms >= self.max_delay_ms:
            self._last_ms = now
            return False
        new = sum(max(o - start.get(tp, 0), 0) for tp, o in latest.items())
        if new < self.min_records:
            return True
        self._last_ms = now
        return False
