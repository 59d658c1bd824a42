"""The windows' clock: the watermark coalesced over source partitions, and their idleness.

Pure logic (no Spark): stage 2 of ``spark_ext.windows`` keeps the clock's state in each
bucket's ``meta`` (JSON in Spark's state store) and asks it, per call, where the watermark
now is. Times are microseconds; ``now`` is the batch's processing time from Spark's
offset log, so a replayed batch decides the same.

- Each source partition has its latest event time and the processing time it was last
  seen. The watermark is the minimum over partitions that are not idle of their latest
  event time, minus ``lateness``; it never goes back.
- A partition unseen for ``idle_us`` is idle and stops holding the watermark back. When
  every partition is idle (the input stopped), none holds it back: the watermark is the
  latest event time of any, minus ``lateness``, as Spark's global watermark would be.
- Time the query was down is nobody's idleness: a call more than ``idle_us`` after the
  previous one moves every partition's last-seen time forward by the gap. A query that
  emits while idle is therefore woken at least every ``idle_us / 2``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

MIN = -(2**62)


@dataclass(frozen=True)
class Clock:
    lateness_us: int
    idle_us: int | None  # None: partitions never go idle

    @staticmethod
    def fresh() -> dict[str, Any]:
        """The state of a clock that has seen nothing."""
        return {"wm": MIN, "parts": {}}

    def advance(self, meta: dict[str, Any], now: float, seen: Iterable[tuple[int, int]]) -> tuple[int, int]:
        """Record ``seen`` (partition, latest event time) at ``now``; (watermark before,
        watermark now). Updates ``meta`` in place."""
        if self.idle_us is not None and now - meta.get("now", now) > self.idle_us:
            gap = now - meta["now"]
            meta["parts"] = {p: [v[0], v[1] + gap] for p, v in meta["parts"].items()}
        meta["now"] = now
        for p, t in seen:
            old = meta["parts"].get(str(p), [MIN, 0])
            meta["parts"][str(p)] = [max(old[0], int(t)), now]
        before = int(meta["wm"])
        parts = list(meta["parts"].values())
        active = [v[0] for v in parts if not self._idle(v, now)]
        if active:
            wm = max(before, min(active) - self.lateness_us)
        elif parts:  # every partition idle: nothing holds the watermark back
            wm = max(before, max(v[0] for v in parts) - self.lateness_us)
        else:
            wm = before
        meta["wm"] = wm
        return before, wm

    def wake_in(self, meta: dict[str, Any], now: float) -> float | None:
        """When the clock must be asked again without new input (µs from ``now``): when the
        next active partition goes idle, and at least every ``idle_us / 2`` (so that the
        gap is not taken for the query being down). None: nothing can change without input."""
        if self.idle_us is None:
            return None
        pending = [v[1] + self.idle_us - now for v in meta["parts"].values() if not self._idle(v, now)]
        if not pending:
            return None
        return max(1000.0, min(min(pending) + 1000.0, self.idle_us / 2))

    def _idle(self, v: list[float], now: float) -> bool:
        return self.idle_us is not None and now - v[1] > self.idle_us
