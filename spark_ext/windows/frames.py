"""Sliding, tumbling and session windows over Arrow tables, as Jet computes them.

Frames. The time axis is cut into frames of ``slide`` µs: event time t falls in frame
``floor(t / slide)``. A window of ``size = k * slide`` made of frames ``w-k+1 .. w`` covers
``[(w-k+1) * slide, (w+1) * slide)``: exactly Spark's ``window(ts, size, slide)`` (start aligned
to multiples of slide from epoch 0, an event at t in every window with start <= t < end).
Tumbling is k = 1. Only windows holding at least one event are produced, as in Spark.

Two stages. Stage 1 (``accumulate_frames``) folds each input partition's events into one
partial state per (key, frame); stage 2 merges partials of the same (key, frame)
(``combine_frames``) and slides (``sliding``): a deductible op takes a per-key prefix
combine over frames and emits ``prefix[w] - prefix[w-k]`` (deduct); the others combine the
k frames with log2(k) doubling steps. A window is final once the watermark reaches its end
(Spark evicts when ``end <= watermark``): emit windows with last frame
``w < frames_closed_by(watermark)``, then ``purge_frames`` drops frames no later window needs.

Sessions. An event at t spans ``[t, t + gap)``; a session is the union of spans that
overlap, ``[first_ts, last_ts + gap)``. Spark (MergingSessionsIterator) also merges spans
that merely touch (next start == current end, i.e. events exactly ``gap`` apart); that is
the default here, ``merge_touching=False`` gives strict overlap. Per batch,
``partial_sessions`` builds sessions from events; ``merge_sessions`` merges session rows of
any origin in any order to the same result as building them from all events at once; a
session is final once ``session_end <= watermark`` (``split_sessions``).

Timestamps are int64 µs since the epoch (Arrow timestamp columns are read as such); window
and session bounds are returned as int64 µs. Events with a null timestamp are dropped, as
Spark's window functions do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa

from spark_ext.errors import ConfigurationError
from spark_ext.windows.aggregate import (
    AggregateOperation,
    Grouping,
    States,
    accumulate_all,
    column,
    combine_all,
    finish_all,
    group_rows,
    read_states,
    to_numpy,
    write_states,
)

FRAME, WINDOW_START, WINDOW_END = "frame", "window_start", "window_end"
SESSION_START, SESSION_END = "session_start", "session_end"


class WindowError(ConfigurationError):
    """A window size, slide, gap or frame table is unusable."""


def frames_per_window(size_us: int, slide_us: int) -> int:
    """k = size / slide; WindowError unless both are positive and slide divides size."""
    if slide_us <= 0 or size_us <= 0:
        raise WindowError(f"window size {size_us} µs and slide {slide_us} µs must both be positive")
    if size_us % slide_us:
        raise WindowError(f"window size {size_us} µs is not a multiple of slide {slide_us} µs; pick a "
                          "slide that divides the size (frames are one slide long)")
    return size_us // slide_us


def frame_of(ts_us: np.ndarray, slide_us: int) -> np.ndarray:
    """Frame index ``floor(ts / slide)`` of each timestamp (correct for negative times)."""
    if slide_us <= 0:
        raise WindowError(f"slide must be positive, got {slide_us} µs")
    return np.floor_divide(np.asarray(ts_us, dtype=np.int64), slide_us)


def frames_closed_by(watermark_us: int, slide_us: int) -> int:
    """Frame bound B: windows whose last frame is < B end at or before the watermark."""
    return watermark_us // slide_us


def first_needed_frame(k: int, emitted_before_frame: int) -> int:
    """Once every window with last frame < B is emitted, frames below ``B - k + 1`` are not needed."""
    return emitted_before_frame - k + 1


def purge_frames(frames: pa.Table, k: int, emitted_before_frame: int) -> pa.Table:
    """Drop the (key, frame) rows no window with last frame >= ``emitted_before_frame`` uses."""
    keep = _int64(frames, FRAME)[0] >= first_needed_frame(k, emitted_before_frame)
    return frames.filter(pa.array(keep))


def _int64(table: pa.Table, name: str) -> tuple[np.ndarray, np.ndarray | None]:
    arr = column(table, name)
    if pa.types.is_timestamp(arr.type) and arr.type.unit != "us":
        arr = arr.cast(pa.timestamp("us", arr.type.tz), safe=False)  # Spark's unit
    elif not (pa.types.is_integer(arr.type) or pa.types.is_timestamp(arr.type)):
        raise WindowError(f"column {name!r} has type {arr.type}; give a timestamp or int64 µs column")
    values, valid = to_numpy(arr, name)
    return values.astype(np.int64, copy=False), valid


def _events_with_ts(events: pa.Table, ts_col: str) -> tuple[pa.Table, np.ndarray]:
    ts, valid = _int64(events, ts_col)
    if valid is not None:
        events, ts = events.filter(pa.array(valid)), ts[valid]
    return events, ts


def accumulate_frames(events: pa.Table, key_cols: Sequence[str], ts_col: str, slide_us: int,
                      ops: Mapping[str, AggregateOperation]) -> pa.Table:
    """Stage 1: events -> one row per (key, frame): ``key_cols``, ``frame``, state columns."""
    events, ts = _events_with_ts(events, ts_col)
    if FRAME in key_cols or FRAME in events.column_names:
        raise WindowError(f"column name {FRAME!r} is reserved for the frame index; rename it")
    events = events.append_column(FRAME, pa.array(frame_of(ts, slide_us)))
    return accumulate_all(events, [*key_cols, FRAME], ops)


def combine_frames(frames: pa.Table, key_cols: Sequence[str],
                   ops: Mapping[str, AggregateOperation]) -> pa.Table:
    """Stage 2: merge partial rows of the same (key, frame) from any partitions or batches."""
    return combine_all(frames, [*key_cols, FRAME], ops)


def _take(states: States, idx: np.ndarray) -> States:
    return {k: v[idx] for k, v in states.items()}


def _merge_present(op: AggregateOperation, a: States, pa_: np.ndarray, b: States,
                   pb: np.ndarray) -> tuple[States, np.ndarray]:
    """Merge where both sides exist, else take whichever exists (no identity state needed)."""
    m = op.merge(a, b)
    both = pa_ & pb
    return {k: np.where(both, m[k], np.where(pa_, a[k], b[k])) for k in a}, pa_ | pb


def _empty_result(schema: pa.Schema, key_cols: Sequence[str], bounds: Sequence[str],
                  ops: Mapping[str, AggregateOperation]) -> pa.Table:
    fields = [schema.field(c) for c in key_cols] + [pa.field(b, pa.int64()) for b in bounds]
    for prefix, op in ops.items():
        types = {f.name[len(prefix) + 2:]: f.type for f in schema if f.name.startswith(f"{prefix}__")}
        fields.append(pa.field(prefix, op.result_type(types)))
    return pa.schema(fields).empty_table()


def sliding(frames: pa.Table, key_cols: Sequence[str], ops: Mapping[str, AggregateOperation], k: int,
            slide_us: int, *, emit_from_frame: int | None = None, emit_before_frame: int | None = None,
            deduct: bool = True) -> pa.Table:
    """Finished sliding windows of k frames from per-(key, frame) states.

    ``frames`` has ``key_cols``, ``frame`` (int64) and the ops' state columns; several rows
    of one (key, frame) are combined first. Output: ``key_cols``, ``window_start``,
    ``window_end`` (int64 µs, ``start = (w-k+1) * slide``, ``end = (w+1) * slide``), one
    result column per op, for every window with last frame w such that the window holds at
    least one non-empty frame and ``emit_from_frame <= w < emit_before_frame`` (a None
    bound is open). Ops that can deduct use prefix-and-deduct when ``deduct`` is true (float
    results then carry rounding relative to the key's whole frame range, not the window's);
    the others combine frames by doubling. Row order is unspecified.
    """
    if k < 1 or slide_us <= 0:
        raise WindowError(f"need k >= 1 frames per window and a positive slide, got k={k}, slide={slide_us}")
    bounds = (WINDOW_START, WINDOW_END)
    if frames.num_rows == 0:
        return _empty_result(frames.schema, key_cols, bounds, ops)
    keys = group_rows(frames, key_cols)
    f = _int64(frames, FRAME)[0]
    order = np.lexsort((f, keys.ids))
    kid, f = keys.ids[order], f[order]
    states = {p: read_states(frames, p, op) for p, op in ops.items()}
    sorted_states = {p: _take(s, order) for p, (s, _) in states.items()}
    new = np.r_[True, (kid[1:] != kid[:-1]) | (f[1:] != f[:-1])]
    if not new.all():  # uncombined duplicates of a (key, frame)
        g = Grouping(np.cumsum(new) - 1, int(new.sum()), np.flatnonzero(new))
        sorted_states = {p: ops[p].combine_states(s, g) for p, s in sorted_states.items()}
        kid, f, order = kid[new], f[new], order[new]
    # Coordinates that keep keys apart: base[kid] + (frame - first frame of kid + k).
    kfirst = np.flatnonzero(np.r_[True, kid[1:] != kid[:-1]])
    klast = np.r_[kfirst[1:] - 1, len(kid) - 1]
    kmin = f[kfirst]
    span = f[klast] - kmin + 2 * k + 1
    if float(span.astype(np.float64).sum()) >= 2.0**62:
        raise WindowError("frames of the keys span too many slides to index; purge old frames first")
    base = np.cumsum(span) - span

    def coord(key: np.ndarray, frame: np.ndarray) -> np.ndarray:
        return base[key] + (frame - kmin[key] + k)

    fc = coord(kid, f)
    cand = _Candidates.of(kid, f, order, k, emit_from_frame, emit_before_frame)
    w, wkid, wrow = cand.w, cand.kid, cand.row
    wc = coord(wkid, w)
    emit = np.ones(len(w), bool) if emit_from_frame is None else w >= emit_from_frame
    cols = {c: column(frames, c).take(wrow[emit]) for c in key_cols}
    cols[WINDOW_START] = pa.array((w[emit] - k + 1) * slide_us)
    cols[WINDOW_END] = pa.array((w[emit] + 1) * slide_us)
    if deduct and any(op.can_deduct for op in ops.values()):
        # Each emitted window's prefix ends, the same for every deducting op.
        ia = np.searchsorted(fc, wc[emit], "right") - 1
        ib = np.searchsorted(fc, wc[emit] - k, "right") - 1
        has_b = ib >= kfirst[wkid[emit]]
        ib = np.where(has_b, ib, ia)
    for p, op in ops.items():
        if deduct and op.can_deduct:
            prefix = op.scan(sorted_states[p], kfirst[kid])
            a, b = _take(prefix, ia), _take(prefix, ib)
            with np.errstate(all="ignore"):
                d = op.deduct(a, b)
            result = {s: np.where(has_b, d[s], a[s]) for s in a}
        else:
            result = _doubling(op, sorted_states[p], cand, k, emit)
        cols[p] = op.finish(result).cast(op.result_type(states[p][1]))
    return pa.table(cols)


class _Candidates:
    """The windows ``sliding`` computes, laid out so that looking back by d windows is index
    arithmetic: per key, the union of ``[f, f + k - 1]`` over its frames as contiguous runs
    of consecutive windows, clipped to what the emitted windows read (an emitted w reads
    windows ``w-k+1 .. w`` only)."""

    def __init__(self, w: np.ndarray, kid: np.ndarray, row: np.ndarray, start: np.ndarray,
                 frame: np.ndarray, is_frame: np.ndarray):
        self.w, self.kid, self.row = w, kid, row
        self.pos = np.arange(len(w))
        self.start = start  # per window: the position of its run's first window
        self.frame = frame  # per window w: the sorted index of frame w (0 where there is none)
        self.is_frame = is_frame  # per window w: frame w holds events

    @classmethod
    def of(cls, kid: np.ndarray, f: np.ndarray, order: np.ndarray, k: int, emit_from: int | None,
           emit_before: int | None) -> _Candidates:
        new_run = np.r_[True, (kid[1:] != kid[:-1]) | (f[1:] > f[:-1] + k)]
        run = np.flatnonzero(new_run)
        run_end = np.r_[run[1:] - 1, len(f) - 1]
        lo, hi = f[run], f[run_end] + k - 1
        if emit_from is not None:
            lo = np.maximum(lo, emit_from - k + 1)
        if emit_before is not None:
            hi = np.minimum(hi, emit_before - 1)
        live = hi >= lo
        rlo, rhi, rkid, rrow = lo[live], hi[live], kid[run][live], order[run][live]
        lengths = rhi - rlo + 1
        offsets = np.cumsum(lengths) - lengths
        total = int(lengths.sum())
        pos = np.arange(total)
        start = np.repeat(offsets, lengths)
        w = np.repeat(rlo, lengths) + (pos - start)
        # Frame f is window w = f of its run (if not clipped away).
        rid = np.cumsum(new_run) - 1
        ok = live[rid] & (f >= lo[rid]) & (f <= hi[rid])
        live_id = (np.cumsum(live) - 1)[rid[ok]]
        frame_pos = offsets[live_id] + (f[ok] - rlo[live_id])
        frame = np.zeros(total, np.int64)
        frame[frame_pos] = np.flatnonzero(ok)
        is_frame = np.zeros(total, bool)
        is_frame[frame_pos] = True
        return cls(w, np.repeat(rkid, lengths), np.repeat(rrow, lengths), start, frame, is_frame)

    def back(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        """(position, found) of window ``w - d`` for every window w (0 < d < k), looked up in
        w's own run only. A block that reaches back past its run's start covers no frame of
        the run before (runs of a key are more than k - 1 empty frames apart), so any window
        whose k frames it serves finds it empty either way."""
        j = self.pos - d
        found = j >= self.start
        return np.where(found, j, 0), found


def _doubling(op: AggregateOperation, frame_states: States, cand: _Candidates, k: int,
              emit: np.ndarray) -> States:
    """Combine of frames ``w-k+1 .. w`` at the candidate windows ``emit`` selects.

    W_m(w) combines frames w-m+1..w; W_2m(w) = W_m(w) + W_m(w-m). The result adds W_m blocks
    for the set bits of k. A window outside the candidates has only empty frames behind it
    (for m <= k), so a failed look back means "nothing there".
    """
    block, present = _take(frame_states, cand.frame), cand.is_frame
    result: States | None = None
    have = np.zeros(len(cand.w), bool)
    acc, m = 0, 1
    while m <= k:
        if k & m:
            if result is None:
                result, have = block, present
            else:
                j, fnd = cand.back(acc)
                result, have = _merge_present(op, result, have, _take(block, j), present[j] & fnd)
            acc += m
        if 2 * m <= k:
            j, fnd = cand.back(m)
            block, present = _merge_present(op, block, present, _take(block, j), present[j] & fnd)
        m *= 2
    assert result is not None and have[emit].all()
    return _take(result, np.flatnonzero(emit))


def partial_sessions(events: pa.Table, key_cols: Sequence[str], ts_col: str, gap_us: int,
                     ops: Mapping[str, AggregateOperation], *, merge_touching: bool = True) -> pa.Table:
    """Sessions of one batch: ``key_cols``, ``session_start``, ``session_end``, state columns.

    Sort by (key, ts); a session breaks where the key changes or the next event is more
    than ``gap`` after the previous one (``>= gap`` when ``merge_touching`` is false).
    """
    if gap_us <= 0:
        raise WindowError(f"session gap must be positive, got {gap_us} µs")
    events, ts = _events_with_ts(events, ts_col)
    keys = group_rows(events, key_cols)
    order = np.lexsort((ts, keys.ids))
    kid, t = keys.ids[order], ts[order]
    step = t[1:] - t[:-1]
    brk = np.r_[True, (kid[1:] != kid[:-1]) | ((step > gap_us) if merge_touching else (step >= gap_us))]
    return _sessions(events, key_cols, ops, order, brk, t, t + gap_us, accumulate=True)


def merge_sessions(sessions: pa.Table, key_cols: Sequence[str], ops: Mapping[str, AggregateOperation],
                   *, merge_touching: bool = True) -> pa.Table:
    """Merge session rows of a key whose intervals overlap (or touch, see module doc).

    Rows may come from any batches or partitions, in any order; already merged rows are
    fine. Sort by (key, start); a row starts a new session when it begins after the running
    maximum of the ends before it within the key.
    """
    if sessions.num_rows == 0:
        return sessions
    keys = group_rows(sessions, key_cols)
    start, end = _int64(sessions, SESSION_START)[0], _int64(sessions, SESSION_END)[0]
    order = np.lexsort((start, keys.ids))
    kid, s, e = keys.ids[order], start[order], end[order]
    # Segmented running max of the ends: ranks shifted by key so no key sees another's ends.
    uniq, rank = np.unique(e, return_inverse=True)
    shifted = kid * len(uniq) + rank.reshape(-1)
    run_end = uniq[np.maximum.accumulate(shifted) - kid * len(uniq)]
    before = run_end[:-1]
    brk = np.r_[True, (kid[1:] != kid[:-1]) | ((s[1:] > before) if merge_touching else (s[1:] >= before))]
    return _sessions(sessions, key_cols, ops, order, brk, s, run_end, accumulate=False)


def _sessions(table: pa.Table, key_cols: Sequence[str], ops: Mapping[str, AggregateOperation],
              order: np.ndarray, brk: np.ndarray, starts: np.ndarray, ends: np.ndarray,
              *, accumulate: bool) -> pa.Table:
    """Group the sorted rows ``order`` into sessions at ``brk``; starts/ends are in sorted order."""
    if len(order) == 0:
        if accumulate:
            table = table.append_column(SESSION_START, pa.array([], pa.int64()))
            table = table.append_column(SESSION_END, pa.array([], pa.int64()))
            return accumulate_all(table, [*key_cols, SESSION_START, SESSION_END], ops)
        return table
    first = np.flatnonzero(brk)
    last = np.r_[first[1:] - 1, len(order) - 1]
    ids = np.empty(len(order), np.int64)
    ids[order] = np.cumsum(brk) - 1
    g = Grouping(ids, len(first), order[first])
    cols = {c: column(table, c).take(g.first) for c in key_cols}
    cols[SESSION_START], cols[SESSION_END] = pa.array(starts[first]), pa.array(ends[last])
    for p, op in ops.items():
        if accumulate:
            write_states(cols, p, op.accumulate_states(table, g), op.state_types(table.schema))
        else:
            states, types = read_states(table, p, op)
            write_states(cols, p, op.combine_states(states, g), types)
    return pa.table(cols)


def split_sessions(sessions: pa.Table, watermark_us: int) -> tuple[pa.Table, pa.Table]:
    """(closed, open): closed sessions end at or before the watermark and can be emitted."""
    closed = _int64(sessions, SESSION_END)[0] <= watermark_us
    return sessions.filter(pa.array(closed)), sessions.filter(pa.array(~closed))


def finish_sessions(sessions: pa.Table, ops: Mapping[str, AggregateOperation]) -> pa.Table:
    """Keys, ``session_start``, ``session_end`` and one result column per op."""
    return finish_all(sessions, ops)
