"""The windows' clock: the watermark coalesced over source partitions, and their idleness.

Pure logic (no Spark): stage 2 of ``spark_ext.windows`` keeps each bucket's ``ClockState``
(persisted by ``state.py``) and asks the clock, per call, where the watermark now is. Times
are microseconds; ``now`` is the batch's processing time from Spark's offset log, so a
replayed batch decides the same.

- Each source partition has its latest event time and the processing time it was last
  seen (``PartitionMark``). The watermark is the minimum over partitions that are not idle
  of their latest event time, minus ``lateness``; it never goes back.
- A partition unseen for ``idle_us`` is idle and stops holding the watermark back. When
  every partition is idle (the input stopped), none holds it back: the watermark is the
  latest event time of any, minus ``lateness``, as Spark's global watermark would be.
- Time the query was down is nobody's idleness: a call more than ``idle_us`` after the
  previous one moves every partition's last-seen time forward by the gap. A query that
  emits while idle is therefore woken at least every ``idle_us / 2``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

MIN = -(2**62)

Seen = tuple[int, int]  # (source partition, latest event time a task saw in it)


@dataclass(frozen=True)
class PartitionMark:
    """One source partition as the clock knows it."""

    max_ts: int  # latest event time seen (µs)
    last_seen: float  # processing time it was last seen (µs)


@dataclass(frozen=True)
class ClockState:
    """A bucket's clock between calls. Never changed in place: ``Clock.advance`` returns a new one
    (``parts`` is typed read-only for that reason)."""

    watermark: int = MIN
    parts: Mapping[int, PartitionMark] = field(default_factory=dict)
    now: float | None = None  # processing time of the last call; None before the first


@dataclass(frozen=True)
class Clock:
    lateness_us: int
    idle_us: int | None  # None: partitions never go idle

    @staticmethod
    def fresh() -> ClockState:
        """The state of a clock that has seen nothing."""
        return ClockState()

    def advance(self, state: ClockState, now: float, seen: Iterable[Seen]) -> ClockState:
        """``state`` after recording ``seen`` at ``now``; the watermark before is ``state.watermark``."""
        parts = dict(state.parts)
        if self.idle_us is not None and state.now is not None and now - state.now > self.idle_us:
            gap = now - state.now
            parts = {p: replace(m, last_seen=m.last_seen + gap) for p, m in parts.items()}
        for p, t in seen:
            old = parts.get(int(p))
            parts[int(p)] = PartitionMark(int(t) if old is None else max(old.max_ts, int(t)), now)
        before = state.watermark
        active = [m.max_ts for m in parts.values() if not self._idle(m, now)]
        if active:
            wm = max(before, min(active) - self.lateness_us)
        elif parts:  # every partition idle: nothing holds the watermark back
            wm = max(before, max(m.max_ts for m in parts.values()) - self.lateness_us)
        else:
            wm = before
        return ClockState(wm, parts, now)

    def wake_in(self, state: ClockState, now: float) -> float | None:
        """When the clock must be asked again without new input (µs from ``now``): when the
        next active partition goes idle, and at least every ``idle_us / 2`` (so that the
        gap is not taken for the query being down). None: nothing can change without input."""
        if self.idle_us is None:
            return None
        pending = [m.last_seen + self.idle_us - now for m in state.parts.values() if not self._idle(m, now)]
        if not pending:
            return None
        return max(1000.0, min(min(pending) + 1000.0, self.idle_us / 2))

    def _idle(self, m: PartitionMark, now: float) -> bool:
        return self.idle_us is not None and now - m.last_seen > self.idle_us
