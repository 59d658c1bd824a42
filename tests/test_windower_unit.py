"""The windower: which windows a watermark closes, what it keeps, what is late (pure logic)."""

from __future__ import annotations

import pyarrow as pa

from spark_ext.windows import aggregate as agg
from spark_ext.windows.windower import HIDDEN_COUNT, LateEvents, SessionWindower, SlidingWindower, drop_late

OPS = {"n": agg.count(), "total": agg.sum("v")}
S = 1_000_000  # one second in µs


def events(rows: list[tuple[str, int, int]]) -> pa.Table:
    k, t, v = zip(*rows, strict=True)
    return pa.table({"k": list(k), "ts": pa.array([x * S for x in t], pa.int64()), "v": list(v)})


def windows(out: pa.Table) -> list[tuple]:
    d = out.to_pydict()
    return sorted(zip(d["k"], [s // S for s in d["window_start"]], [e // S for e in d["window_end"]],
                      d["n"], d["total"], strict=True))


def test_sliding_emits_each_window_once_when_the_watermark_passes_its_end_and_purges_old_frames():
    w = SlidingWindower(("k",), "ts", OPS, 2 * S, 2)  # 4 s windows every 2 s
    state = w.fold(events([("a", 1, 10), ("a", 3, 20), ("b", 5, 1)]))
    out, keep = w.emit(state, -(2**62), 4 * S)
    assert windows(out) == [("a", -2, 2, 1, 10), ("a", 0, 4, 2, 30)]
    out, keep = w.emit(keep, 4 * S, 4 * S)
    assert out is None  # the watermark closed no new frame: nothing again
    out, keep = w.emit(keep, 4 * S, 8 * S)
    assert windows(out) == [("a", 2, 6, 1, 20), ("b", 2, 6, 1, 1), ("b", 4, 8, 1, 1)]
    assert keep.num_rows == 0  # no open window needs a frame any more


def test_late_partials_are_those_whose_last_window_was_emitted_and_their_events_are_counted():
    w = SlidingWindower(("k",), "ts", HIDDEN_COUNT.added_to(OPS), 2 * S, 2)
    new = w.fold(events([("a", 1, 10), ("a", 1, 11), ("a", 3, 20), ("b", 9, 1)]))
    assert "hzn__n" in new.column_names  # the hidden count's column, as old checkpoints hold it
    kept, dropped = drop_late(w, new, 4 * S)  # frame 0's last window [0, 4) is closed
    assert dropped == LateEvents(2)
    assert sorted(kept.column("k").to_pylist()) == ["a", "b"]
    assert drop_late(w, new, -(2**62)) == (new, LateEvents(0))


def test_sessions_close_once_the_watermark_reaches_their_end_and_merge_across_calls():
    w = SessionWindower(("k",), "ts", OPS, 5 * S)
    state = w.fold(events([("a", 0, 1), ("a", 3, 2), ("a", 20, 4)]))
    out, keep = w.emit(state, -(2**62), 10 * S)
    assert windows(out) == [("a", 0, 8, 2, 3)]
    more = w.fold(events([("a", 22, 8)]))
    out, keep = w.emit(pa.concat_tables([keep, more]), 10 * S, 30 * S)
    assert windows(out) == [("a", 20, 27, 2, 12)]
    assert keep.num_rows == 0
