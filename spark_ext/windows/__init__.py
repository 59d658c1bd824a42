"""Frame-aggregated windows on Spark DataFrames, batch or streaming (Jet's windowing).

``tumbling`` / ``sliding`` / ``session`` return keys..., ``window_start``, ``window_end``
(timestamps), then one column per ``aggs`` entry: the same rows as Spark's
``groupBy(window(ts, size, slide))`` / ``session_window`` aggregation, without copying each
event size/slide times.

Two stages, both vectorised over Arrow (``frames.py``, ``aggregate.py``; ``stages.py``):

1. Executor, stateless: each input partition folds its events into one partial state
   per (key, frame) (or per partial session), so the shuffle moves frames, not events; in
   the JVM with spark-ext's companion jar (``native.py``), else in Python (``mapInArrow``).
   Each task also reports, to every bucket, the latest event time it saw per source
   partition (``partition_column``, e.g. Kafka's ``partition``).
2. Per bucket of keys (``pmod(xxhash64(keys), buckets)``, stable across runs): merge the
   partial frames. Batch: emit every window. Streaming: the frames live in Spark's state
   store (``applyInPandasWithState``), so the checkpoint is the snapshot and a restart
   resumes them, or with ``state_location`` in versioned files of our own read by a
   stateless ``applyInArrow`` (``versioned.py``: a replayed batch reads the version
   before its own); windows are emitted once the coalesced watermark passes their end,
   and frames no open window needs are purged.

Watermark coalescing (against stream skew): the watermark is the minimum, over source
partitions that are not idle, of each partition's latest event time, minus ``lateness``.
A lagging Kafka partition therefore holds the watermark back instead of having its
events dropped as late, as Spark's global ``max - delay`` would. A partition with no
events for ``idle_timeout`` (processing time) stops holding it back. Late events (every
window they belong to already emitted) are dropped, logged, and counted per batch in the
query's progress (observed metrics ``windows.late_events``, see ``sliding``). Windows are
emitted when a batch with data arrives, and with ``emit_when_idle`` also when partitions
go idle without new input (Spark's processing-time timeouts wake the buckets); the
number of buckets must stay the same across restarts (checked).

Stage 2 is three parts, as bytewax splits clock, windower and logic: the clock (coalesced
watermark, idleness; a frozen ``ClockState`` per bucket) is ``clock.py``; the windower
(which windows a partial belongs to, which are closed, what is late) is ``windower.py``;
how partials travel, the state persists and the late counts leave is ``state.py``.
``api.py`` checks the arguments and wires the stages into Spark.

Sessions are merged per input partition before the shuffle, so the late rule applies to
a partial session as a whole (dropped only when it ends at or before the watermark), as
Spark does with ``spark.sql.streaming.sessionWindow.merge.sessions.in.local.partition``;
with the default Spark drops late events one by one. In-order input (or disorder within
``lateness``) gives identical sessions either way.
"""

from __future__ import annotations

from spark_ext.windows.aggregate import AggregateOperation
from spark_ext.windows.api import duration_us, session, sliding, tumbling
from spark_ext.windows.frames import WindowError

__all__ = ["AggregateOperation", "WindowError", "duration_us", "session", "sliding", "tumbling"]
