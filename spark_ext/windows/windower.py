"""The windower of ``spark_ext.windows``: which windows a partial belongs to, which are closed.

Partials are one row per (key, frame) for sliding windows (tumbling is one frame per
window) or one row per partial session, each with its aggregate states (``frames.py``).
A windower answers, for either kind alike:

- ``fold``: a task's events folded into partials (stage 1, before the shuffle);
- ``last_end``: the end of the last window each partial belongs to; a partial is late
  once the watermark reached it (every one of its windows was emitted);
- ``emit``: once the watermark moved, the windows it closed and the partials to keep.

Every windowed aggregation also keeps a hidden event count (``HIDDEN_COUNT``), so that
``drop_late`` can tell how many events the partials it drops held (``LateEvents``).

Pure Arrow and NumPy: the watermark comes in from the clock (``clock.py``), and how
partials and state travel and persist is ``state.py``'s business.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pyarrow as pa

from spark_ext.windows import aggregate as agg
from spark_ext.windows import frames as fr
from spark_ext.windows.aggregate import AggregateOperation
from spark_ext.windows.clock import MIN


@dataclass(frozen=True)
class HiddenCount:
    """The event count kept beside the user's aggregates and left out of the output.

    ``name`` is the prefix of its state column in every partial, and so in every
    checkpoint's kept partials: it must not change (and no user aggregate may take it)."""

    name: str = "hzn"

    def added_to(self, ops: Mapping[str, AggregateOperation]) -> dict[str, AggregateOperation]:
        """``ops`` plus the hidden count (the ops a windower folds with)."""
        return {**ops, self.name: agg.count()}

    def events(self, partials: pa.Table) -> np.ndarray:
        """How many events each partial row holds."""
        return agg.counted_rows(partials, self.name)


HIDDEN_COUNT = HiddenCount()


@dataclass(frozen=True)
class LateEvents:
    """Events dropped as late by one call (every window they belong to was already emitted)."""

    events: int = 0


class Windower(Protocol):
    def fold(self, events: pa.Table) -> pa.Table: ...

    def last_end(self, partials: pa.Table) -> np.ndarray: ...

    def emit(self, state: pa.Table, wm_before: int, wm: int) -> tuple[pa.Table | None, pa.Table]: ...


@dataclass(frozen=True)
class SlidingWindower:
    """Windows of ``k`` frames of ``slide_us``, one every frame (Spark's ``window()``)."""

    group: tuple[str, ...]
    ts: str
    ops: Mapping[str, AggregateOperation]
    slide_us: int
    k: int

    def fold(self, events: pa.Table) -> pa.Table:
        return fr.accumulate_frames(events, list(self.group), self.ts, self.slide_us, self.ops)

    def last_end(self, partials: pa.Table) -> np.ndarray:
        return (partials.column(fr.FRAME).to_numpy() + self.k) * self.slide_us

    def emit(self, state: pa.Table, wm_before: int, wm: int) -> tuple[pa.Table | None, pa.Table]:
        """Windows whose last frame closed between the two watermarks (``None``: no frame
        closed), and the frames a later window still needs."""
        group = list(self.group)
        state = fr.combine_frames(state, group, self.ops)
        before = None if wm_before <= MIN else fr.frames_closed_by(wm_before, self.slide_us)
        upto = None if wm >= -MIN else fr.frames_closed_by(wm, self.slide_us)
        if before is not None and upto is not None and upto <= before:
            return None, state
        out = fr.sliding(state, group, self.ops, self.k, self.slide_us,
                         emit_from_frame=before, emit_before_frame=upto)
        keep = state if upto is None else fr.purge_frames(state, self.k, upto)
        return out, keep


@dataclass(frozen=True)
class SessionWindower:
    """Sessions of events closer than ``gap_us`` (Spark's ``session_window()``)."""

    group: tuple[str, ...]
    ts: str
    ops: Mapping[str, AggregateOperation]
    gap_us: int

    def fold(self, events: pa.Table) -> pa.Table:
        return fr.partial_sessions(events, list(self.group), self.ts, self.gap_us, self.ops)

    def last_end(self, partials: pa.Table) -> np.ndarray:
        return partials.column(fr.SESSION_END).to_numpy()

    def emit(self, state: pa.Table, wm_before: int, wm: int) -> tuple[pa.Table | None, pa.Table]:
        """Sessions that ended at or before ``wm`` (merged across batches), and the open ones."""
        merged = fr.merge_sessions(state, list(self.group), self.ops)
        closed, keep = fr.split_sessions(merged, wm)
        out = fr.finish_sessions(closed, self.ops)
        names = {fr.SESSION_START: fr.WINDOW_START, fr.SESSION_END: fr.WINDOW_END}
        return out.rename_columns([names.get(c, c) for c in out.column_names]), keep


def drop_late(w: Windower, partials: pa.Table, wm: int,
              count: HiddenCount = HIDDEN_COUNT) -> tuple[pa.Table, LateEvents]:
    """Partials whose every window closed at ``wm`` already removed: (kept, events dropped,
    summed from the hidden ``count``, which the windower's ops must include)."""
    if wm <= MIN or partials.num_rows == 0:
        return partials, LateEvents()
    late = w.last_end(partials) <= wm
    if not late.any():
        return partials, LateEvents()
    dropped = int(count.events(partials)[late].sum())
    return partials.filter(pa.array(~late)), LateEvents(dropped)
