"""Sliding and session windows against brute-force oracles built from Spark's definitions."""

from __future__ import annotations

import math
import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_ext.windows import aggregate as agg
from spark_ext.windows import frames as fr
from spark_ext.windows.frames import WindowError
from tests.support.aggregate_oracle import (
    OPS,
    ORACLE,
    Row,
    check,
    rows,
    split,
    sum_of_squares,
    table,
    value_range,
)

SLIDES = st.sampled_from([1, 2, 3, 5, 7])
KS = st.sampled_from([1, 2, 3, 5])
SEEDS = st.integers(0, 2**32)


def oracle_windows(events: list[Row], slide: int, k: int, lo: int | None = None,
                   hi: int | None = None) -> dict[tuple, dict]:
    """Spark's window(): every start aligned to slide with start <= ts < start + size."""
    size, out = slide * k, {}
    starts = {(e[0], s) for e in events for s in range(e[1] - size + 1, e[1] + 1) if s % slide == 0}
    per_key: dict[str | None, list[Row]] = {}
    for e in events:
        per_key.setdefault(e[0], []).append(e)
    for key, start in starts:
        last_frame = (start + size) // slide - 1
        if (lo is None or last_frame >= lo) and (hi is None or last_frame < hi):
            group = [e for e in per_key[key] if start <= e[1] < start + size]
            out[(key, start, start + size)] = {n: f(group) for n, f in ORACLE.items()}
    return out


def by_window(t: pa.Table) -> dict[tuple, dict]:
    return {(r["k"], r["window_start"], r["window_end"]): r for r in t.to_pylist()}


@settings(max_examples=120, deadline=None)
@given(rows, SLIDES, KS, SEEDS, st.integers(1, 4), st.booleans(), st.booleans(),
       st.one_of(st.none(), st.integers(-60, 60)), st.one_of(st.none(), st.integers(-60, 60)))
def test_sliding_windows_from_any_split_equal_the_oracle(events, slide, k, seed, parts, deduct, combine,
                                                         lo, hi):
    partials = [fr.accumulate_frames(table(p), ["k"], "ts", slide, OPS) for p in split(events, seed, parts)]
    frames = pa.concat_tables(partials)
    if combine:  # else sliding() meets uncombined duplicates of a (key, frame) and merges them itself
        frames = fr.combine_frames(frames, ["k"], OPS)
    got = fr.sliding(frames, ["k"], OPS, k, slide, deduct=deduct, emit_from_frame=lo, emit_before_frame=hi)
    check(by_window(got), oracle_windows(events, slide, k, lo, hi), list(OPS))


@settings(max_examples=60, deadline=None)
@given(rows, SLIDES, KS, SEEDS, st.integers(1, 5))
def test_streaming_emission_with_watermarks_and_purging_emits_each_window_once(events, slide, k, seed, parts):
    batches = split(sorted(events, key=lambda e: e[1]), seed, parts)
    batches = [sorted(b, key=lambda e: e[1]) for b in batches]
    state, emitted_before, emitted = None, None, []
    for i, batch in enumerate(batches):
        later = [e[1] for b in batches[i + 1:] for e in b]
        watermark = min(later) if later else 2**60  # no later event is late
        part = fr.accumulate_frames(table(batch), ["k"], "ts", slide, OPS)
        state = fr.combine_frames(part if state is None else pa.concat_tables([state, part]), ["k"], OPS)
        bound = fr.frames_closed_by(watermark, slide)
        emitted += fr.sliding(state, ["k"], OPS, k, slide, emit_from_frame=emitted_before,
                              emit_before_frame=bound).to_pylist()
        state, emitted_before = fr.purge_frames(state, k, bound), bound
    got = {(r["k"], r["window_start"], r["window_end"]): r for r in emitted}
    assert len(got) == len(emitted)
    check(got, oracle_windows(events, slide, k), list(OPS))


def test_deduct_and_combine_paths_agree_on_larger_data_including_user_ops():
    ops = {**OPS, "ss": sum_of_squares("v"), "range": value_range("v")}
    rng = np.random.default_rng(3)
    n = 20_000
    t = pa.table({"k": rng.integers(0, 20, n).astype(str), "ts": rng.integers(-10**6, 10**6, n),
                  "v": rng.normal(1e3, 1e2, n), "i": rng.integers(-10**9, 10**9, n),
                  "x": rng.normal(5, 2, n)})
    frames = fr.accumulate_frames(t, ["k"], "ts", 10_000, ops)
    a = by_window(fr.sliding(frames, ["k"], ops, 7, 10_000, deduct=True))
    b = by_window(fr.sliding(frames, ["k"], ops, 7, 10_000, deduct=False))
    assert len(a) > 3000
    check(a, b, list(ops))


def test_seed_example_30s_window_sliding_by_10s_counts_events():
    def at(mm_ss: str) -> int:
        mm, ss = mm_ss.split(":")
        return (int(mm) * 60 + int(ss)) * 1_000_000
    times = ["1:21", "1:04", "1:30", "1:12", "1:48", "1:01", "1:35", "1:25", "1:09", "1:39", "1:44",
             "1:18", "1:29", "1:33", "1:41"]  # disordered; frames of 10 s hold 3, 2, 3, 4, 3 events
    events = pa.table({"k": ["key"] * len(times), "ts": pa.array([at(x) for x in times], pa.timestamp("us"))})
    ops = {"count": agg.count()}
    k = fr.frames_per_window(30_000_000, 10_000_000)
    frames = fr.accumulate_frames(events, ["k"], "ts", 10_000_000, ops)
    counts = {(r["window_start"], r["window_end"]): r["count"]
              for r in fr.sliding(frames, ["k"], ops, k, 10_000_000).to_pylist()}
    assert counts == {(at("0:40"), at("1:10")): 3, (at("0:50"), at("1:20")): 5, (at("1:00"), at("1:30")): 8,
                      (at("1:10"), at("1:40")): 9, (at("1:20"), at("1:50")): 10,
                      (at("1:30"), at("2:00")): 7, (at("1:40"), at("2:10")): 3}
    # "At 1:30 the 30-second rate was 8/30 events per second; 20 s later it was 10/30."
    closed = fr.sliding(frames, ["k"], ops, k, 10_000_000,
                        emit_before_frame=fr.frames_closed_by(at("1:30"), 10_000_000))
    assert max(closed.column("window_end").to_pylist()) == at("1:30")


def test_frame_of_floors_negative_timestamps_and_windows_validate():
    assert fr.frame_of(np.array([-11, -10, -1, 0, 9, 10]), 10).tolist() == [-2, -1, -1, 0, 0, 1]
    assert fr.frames_per_window(60, 20) == 3
    with pytest.raises(WindowError, match="not a multiple"):
        fr.frames_per_window(50, 20)
    with pytest.raises(WindowError, match="positive"):
        fr.frames_per_window(0, 20)
    with pytest.raises(WindowError, match="gap must be positive"):
        fr.partial_sessions(table([]), ["k"], "ts", 0, OPS)
    with pytest.raises(WindowError, match="type string"):
        fr.accumulate_frames(pa.table({"k": ["a"], "ts": ["x"]}), ["k"], "ts", 10, OPS)


def test_null_timestamps_are_dropped_and_empty_inputs_give_typed_empty_outputs():
    t = pa.table({"k": ["a", "a"], "ts": pa.array([None, 5], pa.timestamp("us", tz="UTC")),
                  "v": [1.0, 2.0], "i": [1, 2], "x": [1.0, 1.0]})
    got = fr.sliding(fr.accumulate_frames(t, ["k"], "ts", 10, OPS), ["k"], OPS, 1, 10).to_pylist()
    assert [(r["window_start"], r["n"], r["sv"]) for r in got] == [(0, 1, 2.0)]
    empty = fr.sliding(fr.accumulate_frames(table([]), ["k"], "ts", 10, OPS), ["k"], OPS, 3, 10)
    assert empty.num_rows == 0 and empty.schema.field("si").type == pa.int64()
    sessions = fr.merge_sessions(fr.partial_sessions(table([]), ["k"], "ts", 5, OPS), ["k"], OPS)
    assert fr.finish_sessions(sessions, OPS).num_rows == 0


def test_purge_keeps_exactly_the_frames_later_windows_need():
    events = table([("a", t, 1.0, 1, 1.0) for t in range(0, 100, 10)])
    frames = fr.accumulate_frames(events, ["k"], "ts", 10, OPS)
    kept = fr.purge_frames(frames, 3, emitted_before_frame=6)
    assert kept.column("frame").to_pylist() == [4, 5, 6, 7, 8, 9]
    assert fr.first_needed_frame(3, 6) == 4


def oracle_sessions(events: list[Row], gap: int, touching: bool) -> dict[tuple, dict]:
    """Events sorted per key; a session continues while the next event is within the gap."""
    out = {}
    for key in {e[0] for e in events}:
        evs = sorted((e for e in events if e[0] == key), key=lambda e: e[1])
        group = [evs[0]]
        for e in [*evs[1:], None]:
            if e is not None and (e[1] - group[-1][1] < gap or (touching and e[1] - group[-1][1] == gap)):
                group.append(e)
                continue
            out[(key, group[0][1], group[-1][1] + gap)] = {n: f(group) for n, f in ORACLE.items()}
            if e is not None:
                group = [e]
    return out


def by_session(t: pa.Table) -> dict[tuple, dict]:
    return {(r["k"], r["session_start"], r["session_end"]): r for r in t.to_pylist()}


@settings(max_examples=120, deadline=None)
@given(rows, st.integers(1, 12), SEEDS, st.integers(1, 5), st.booleans())
def test_sessions_merged_from_any_batches_in_any_order_equal_the_oracle(events, gap, seed, parts, touching):
    partials = [fr.partial_sessions(table(p), ["k"], "ts", gap, OPS, merge_touching=touching)
                for p in split(events, seed, parts)]
    every = pa.concat_tables(partials)
    shuffled = every.take(pa.array(random.Random(seed).sample(range(every.num_rows), every.num_rows),
                                   pa.int64()))
    merged = fr.merge_sessions(shuffled, ["k"], OPS, merge_touching=touching)
    want = oracle_sessions(events, gap, touching)
    check(by_session(fr.finish_sessions(merged, OPS)), want, list(OPS))
    state = None  # incremental: fold batches one at a time into merged state
    for p in partials:
        state = fr.merge_sessions(p if state is None else pa.concat_tables([state, p]), ["k"], OPS,
                                  merge_touching=touching)
    assert state is not None
    check(by_session(fr.finish_sessions(state, OPS)), want, list(OPS))


@settings(max_examples=60, deadline=None)
@given(rows, st.integers(1, 12), SEEDS, st.integers(1, 5))
def test_sessions_closed_by_the_watermark_are_final(events, gap, seed, parts):
    batches = [sorted(b, key=lambda e: e[1]) for b in split(sorted(events, key=lambda e: e[1]), seed, parts)]
    state, emitted = None, []
    for i, batch in enumerate(batches):
        later = [e[1] for b in batches[i + 1:] for e in b]
        part = fr.partial_sessions(table(batch), ["k"], "ts", gap, OPS)
        state = fr.merge_sessions(part if state is None else pa.concat_tables([state, part]), ["k"], OPS)
        closed, state = fr.split_sessions(state, min(later) - 1 if later else 2**62)
        emitted += fr.finish_sessions(closed, OPS).to_pylist()
    got = {(r["k"], r["session_start"], r["session_end"]): r for r in emitted}
    assert len(got) == len(emitted) and (state is None or state.num_rows == 0)
    check(got, oracle_sessions(events, gap, True), list(OPS))


def test_session_boundary_events_exactly_gap_apart():
    t = table([("a", 10, 1.0, 1, None), ("a", 0, 2.0, 2, None), ("a", 25, 3.0, 3, None)])
    ops = {"n": agg.count()}
    spark_like = by_session(fr.finish_sessions(fr.partial_sessions(t, ["k"], "ts", 10, ops), ops))
    assert {k: v["n"] for k, v in spark_like.items()} == {("a", 0, 20): 2, ("a", 25, 35): 1}
    strict = fr.finish_sessions(fr.partial_sessions(t, ["k"], "ts", 10, ops, merge_touching=False), ops)
    assert {k: v["n"] for k, v in by_session(strict).items()} == {("a", 0, 10): 1, ("a", 10, 20): 1,
                                                                 ("a", 25, 35): 1}
    # A late-arriving event bridging two sessions merges them (Jet's "event merges two windows").
    bridge = fr.partial_sessions(table([("a", 18, 0.0, 0, None)]), ["k"], "ts", 10, ops)
    merged = fr.merge_sessions(pa.concat_tables([fr.partial_sessions(t, ["k"], "ts", 10, ops), bridge]),
                               ["k"], ops)
    assert {k: v["n"] for k, v in by_session(fr.finish_sessions(merged, ops)).items()} == {("a", 0, 35): 4}


def test_sliding_variance_is_stable_on_a_large_offset_on_both_paths():
    rng = np.random.default_rng(11)
    ts = rng.integers(0, 200 * 1000, 40_000)
    x = 1e9 + rng.normal(0, 1.0, len(ts))
    gaps = (ts // 1000) % 7 == 0  # frames with events but no non-null x: empty variance states
    t = pa.table({"k": np.zeros(len(ts), np.int64), "ts": ts, "x": pa.array(x, mask=gaps)})
    ops = {"var": agg.variance("x"), "n": agg.count()}
    partials = [fr.accumulate_frames(t.slice(a, 10_000), ["k"], "ts", 1000, ops)
                for a in range(0, len(ts), 10_000)]
    for deduct in (False, True):
        out = fr.sliding(pa.concat_tables(partials), ["k"], ops, 10, 1000, deduct=deduct).to_pylist()
        assert len(out) == 209
        for r in out:
            xs = x[(ts >= r["window_start"]) & (ts < r["window_end"]) & ~gaps]
            if len(xs) < 2:
                assert r["var"] is None
                continue
            mean = math.fsum(xs) / len(xs)
            assert math.isclose(r["var"], math.fsum((xs - mean) ** 2) / (len(xs) - 1), rel_tol=1e-9), deduct
