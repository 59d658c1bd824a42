"""The windows' wire and state encoding (spark_ext.windows.state): typed in code, unchanged on disk."""

from __future__ import annotations

import json
from dataclasses import replace

import pyarrow as pa
import pytest

from spark_ext.windows import state as ws
from spark_ext.windows.clock import Clock, ClockState, PartitionMark
from spark_ext.windows.frames import WindowError
from spark_ext.windows.state import BucketState, RowKind, StreamOutput, WindowDefinition
from spark_ext.windows.windower import LateEvents

S = 1_000_000  # µs
NOW = 1_700_000_000_000_000.0
# A bucket's meta exactly as the code before typed state wrote it (clock advanced once at NOW
# with partitions 0 and 3, 7 late events, 4 buckets).
OLD_META = ('{"wm": 35000000, "parts": {"0": [100000000, 1700000000000000.0], "3": [40000000, '
            '1700000000000000.0]}, "late": 7, "buckets": 4, "now": 1700000000000000.0}')


# What the code that wrote OLD_META built: one clock column, as it always had.
DEF = WindowDefinition("sliding", 30 * S, 10 * S, 0, ("k",), ("n",), "digest", ("partition",))


class FakeGroupState:
    """Spark's GroupState as stage 2 uses it: exists, get, update."""

    def __init__(self, value: tuple[bytes, str] | None = None) -> None:
        self.value = value

    @property
    def exists(self) -> bool:
        return self.value is not None

    @property
    def get(self) -> tuple[bytes, str]:
        assert self.value is not None
        return self.value

    def update(self, value: tuple[bytes, str]) -> None:
        self.value = value


def test_a_state_row_written_before_typed_state_loads_and_the_clock_carries_on_from_it():
    partials = pa.table({"k": ["a"], "frame": pa.array([3], pa.int64()), "hzn__n": pa.array([2], pa.int64())})
    kept, bucket = ws.load(FakeGroupState((ws.to_ipc(partials), OLD_META)), 4, DEF)
    assert kept == partials
    marks = {0: PartitionMark(100 * S, NOW), 3: PartitionMark(40 * S, NOW)}
    assert bucket == BucketState(4, ClockState(35 * S, marks, NOW), 7, DEF)
    moved = Clock(5 * S, 10 * S).advance(bucket.clock, NOW + S, [(3, 60 * S)])
    assert moved.watermark == 55 * S


def test_the_encoding_is_the_old_one_and_a_format_version_so_older_code_reads_new_state():
    assert json.loads(ws.encode_meta(ws.decode_meta(OLD_META, 4))) == {"v": 1, **json.loads(OLD_META)}
    gs = FakeGroupState()
    ws.save(gs, pa.table({"x": [1]}), BucketState(2))  # before any call: no "now", as before
    assert gs.get[1] == '{"v": 1, "wm": -4611686018427387904, "parts": {}, "late": 0, "buckets": 2}'


def test_a_checkpoint_built_with_other_buckets_is_refused_and_none_means_fresh():
    with pytest.raises(WindowError, match="buckets=4"):
        ws.load(FakeGroupState((ws.to_ipc(pa.table({"x": [1]})), OLD_META)), 8, DEF)
    assert ws.load(FakeGroupState(), 8, DEF) == (None, BucketState(8, Clock.fresh(), 0, DEF))


def test_after_returns_a_new_bucket_state_and_adds_the_late_events():
    before = ws.decode_meta(OLD_META, 4)
    moved = Clock(5 * S, 10 * S).advance(before.clock, NOW + S, [])
    after = before.after(moved, LateEvents(3))
    assert (after.late_total, after.clock, after.buckets) == (10, moved, 4)
    assert before == ws.decode_meta(OLD_META, 4)


def test_the_wire_carries_partials_and_seen_marks_with_the_old_kind_values():
    partials = pa.table({ws.BUCKET: pa.array([1, 0, 1], pa.int64()), "v": pa.array([10, 20, 30], pa.int64())})
    ts = pa.array([5 * S, 9 * S, 7 * S], pa.int64())
    batch = ws.wire_batch(ws.partial_rows(partials), ws.watermark_rows(ts, pa.array([0, 0, 2]), 2))
    assert batch.column(ws.KIND).to_pylist() == [0, 0, 1, 1, 1, 1]  # 0: partials, 1: seen (unchanged)
    bucket1 = pa.Table.from_batches([batch]).filter(pa.compute.equal(batch.column(ws.BUCKET), 1))
    wire = ws.read_wire_table(bucket1, partials.schema)
    assert wire.partials.column("v").to_pylist() == [10, 30]
    assert sorted(wire.seen) == [(0, 9 * S), (2, 7 * S)]
    pandas_wire = ws.read_wire_frames([bucket1.to_pandas()], partials.schema)
    assert pandas_wire.partials == wire.partials and sorted(pandas_wire.seen) == sorted(wire.seen)
    assert ws.read_wire_frames([], partials.schema).seen == []
    assert [int(k) for k in RowKind] == [0, 1]


def test_a_task_whose_every_timestamp_is_null_sends_no_partials():
    empty = pa.table({ws.BUCKET: pa.array([], pa.int64()), "v": pa.array([], pa.int64())})
    assert ws.partial_rows(empty)[ws.PAYLOAD] == []
    assert ws.wire_batch(ws.partial_rows(empty)).num_rows == 0


def test_late_events_leave_stage_2_as_one_marker_row_beside_the_windows():
    output = StreamOutput(pa.schema([pa.field("k", pa.string(), nullable=False), pa.field("n", pa.int64())]))
    windows = pa.table({"k": ["a", "b"], "n": pa.array([1, 2], pa.int64())})
    rows = output.rows(windows, LateEvents(5))
    assert rows.schema == output.schema and all(f.nullable for f in rows.schema)
    assert rows.to_pylist() == [{"k": "a", "n": 1, "__late": None}, {"k": "b", "n": 2, "__late": None},
                                {"k": None, "n": None, "__late": 5}]
    assert output.rows(windows, LateEvents(0)).num_rows == 2  # nothing late: no marker


@pytest.mark.parametrize("change,named", [
    ({"slide_us": 15 * S}, "slide 10 s -> 15 s"),
    ({"size_us": 60 * S}, "size 30 s -> 60 s"),
    ({"kind": "session", "size_us": 0, "slide_us": 0, "gap_us": 5 * S}, "kind sliding -> session"),
    ({"keys": ("k", "j")}, "keys k -> k, j"),
    ({"results": ("n", "total"), "partials": "other"}, "aggregations n -> n, total"),
    ({"partials": "other"}, "an aggregation's state or an input column's type"),
])
def test_state_kept_under_another_definition_is_refused_naming_the_change(change, named):
    now = replace(DEF, **change)
    gs = FakeGroupState()
    ws.save(gs, pa.table({"x": [1]}), BucketState(4, definition=DEF))
    with pytest.raises(WindowError, match=f"({named}).*new checkpointLocation"):
        ws.load(gs, 4, now)
    assert ws.load(gs, 4, DEF)[1].definition == DEF


def test_a_changed_clock_key_keeps_the_watermark_and_forgets_the_marks():
    """Marks under the old key would never be seen again and would hold the watermark."""
    gs = FakeGroupState((ws.to_ipc(pa.table({"x": [1]})), OLD_META))  # keyed by partition number
    rekeyed = replace(DEF, clock=("topic", "partition"))
    _, bucket = ws.load(gs, 4, rekeyed)
    assert (bucket.clock.watermark, bucket.clock.parts, bucket.definition) == (35 * S, {}, rekeyed)
    ws.save(gs, pa.table({"x": [1]}), bucket)
    assert ws.load(gs, 4, rekeyed)[1] == bucket  # kept with the new key from then on
