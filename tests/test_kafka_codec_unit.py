"""The C record-batch decoder (``spark_ext.connectors.kafka.codec``) against aiokafka's
row-by-row decoder, the source's reader before it: the same records, offsets, timestamps,
keys, values and headers, and the same next position, for any mix of codecs, null keys and
values, headers, transactions committed and aborted, control batches, offset gaps, a
range's bounds falling anywhere, and a response cut inside its last batch.

(Against Kafka's own Java producer and consumer on the real broker: test_kafka_codec.py.)
"""

from __future__ import annotations

import itertools
import struct

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark_ext.connectors.kafka import codec
from tests.support.kafka_records import Spec, build, reference, response, rows_of

_bytes = st.one_of(st.none(), st.binary(max_size=40))
_header = st.tuples(st.text(max_size=8), _bytes)
_record = st.tuples(_bytes, _bytes, st.lists(_header, max_size=3), st.integers(0, 10_000))


@st.composite
def _responses(draw):
    """Batches of two transactional producers (7 and 8) and a plain one, with markers; the
    aborted list a broker would send for them."""
    specs: list[Spec] = []
    aborted: list[tuple[int, int]] = []
    first_of: dict[int, int] = {}
    off = draw(st.integers(0, 50))
    start = off
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["plain", "txn", "marker"]))
        gap = draw(st.integers(0, 3))
        if kind == "marker" and first_of:
            pid = draw(st.sampled_from(sorted(first_of)))
            abort = draw(st.booleans())
            if abort:
                aborted.append((first_of[pid], pid))
            del first_of[pid]
            spec = Spec([], producer_id=pid, control=0 if abort else 1, offset_gap=gap)
        else:
            pid = draw(st.sampled_from([7, 8])) if kind == "txn" else -1
            spec = Spec(draw(st.lists(_record, min_size=1, max_size=6)),
                        codec=draw(st.sampled_from([0, 1, 2, 3, 4])), producer_id=pid,
                        transactional=pid >= 0, log_append=draw(st.booleans()) and pid < 0, offset_gap=gap)
            if pid >= 0:
                first_of.setdefault(pid, off + gap)
        specs.append(spec)
        off += gap + (1 if spec.control is not None else len(spec.records))
    buf, end_off = response(specs, start)
    return buf, start, end_off, aborted


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_responses(), st.integers(0, 60), st.integers(0, 120), st.booleans(), st.booleans(),
       st.integers(0, 200))
def test_the_c_decoder_reads_what_aiokafkas_reads(resp, pos_at, end_at, committed, headers, cut):
    buf, first, last, aborted = resp
    pos = first + pos_at % (last - first + 1)
    end = pos + end_at % (last - pos + 2)
    cut_buf = buf[:max(len(buf) - cut, 0)] if cut < 100 else buf  # a response cut inside its last batch
    want_pos, want_done, want_rows = reference(cut_buf, pos, end, committed, aborted)
    got = codec.decode(cut_buf, pos, end, "t", 3, committed, aborted, headers)
    rows = rows_of(got.batch)
    if not headers:
        want_rows = [(*r[:5], None) for r in want_rows]
    assert (got.pos, got.done) == (want_pos, want_done)
    assert rows == want_rows
    if got.batch is not None:
        assert set(got.batch.column("topic").to_pylist()) == {"t"}
        assert set(got.batch.column("partition").to_pylist()) == {3}
        assert got.batch.schema.names[-1] == ("headers" if headers else "timestampType")


def test_a_batch_whose_crc_does_not_match_is_refused_naming_its_offset():
    raw = bytearray(build(Spec([(b"k", b"value", [], 0)]), 42))
    raw[-1] ^= 0xFF
    with pytest.raises(ValueError, match="batch at offset 42 fails its CRC-32C check"):
        codec.decode(bytes(raw), 0, 100, "t", 0, False, [], False)


def test_a_message_set_before_format_v2_is_refused_naming_the_fix():
    raw = bytearray(build(Spec([(b"k", b"v", [], 0)]), 5))
    raw[16] = 1  # magic
    said = r"message format v1; spark-ext reads v2.*log\.message\.format\.version"
    with pytest.raises(ValueError, match=said):
        codec.decode(bytes(raw), 0, 100, "t", 0, False, [], False)


def test_a_record_running_past_its_batch_is_refused():
    raw = bytearray(build(Spec([(b"k", b"v", [], 0)]), 9))
    raw[61] = 0x7E  # the first record's length: 63 bytes, more than the batch holds
    from aiokafka.record.util import calc_crc32c

    struct.pack_into(">I", raw, 17, calc_crc32c(bytes(raw[21:])))
    with pytest.raises(ValueError, match="batch at offset 9 is malformed: a record's length"):
        codec.decode(bytes(raw), 0, 100, "t", 0, False, [], False)


def test_the_checksum_is_crc32c():
    assert codec.crc32c(b"123456789") == 0xE3069283  # the standard check value
    assert codec.crc32c(b"123456789", portable=True) == 0xE3069283


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.integers(0, 7))
def test_the_crc_instruction_and_the_table_agree_with_aiokafka_at_any_length_and_alignment(data, skip):
    """The CPU's crc32 path starts unaligned and ends on a partial word; the table path is
    what a CPU without the instruction runs: both must be Kafka's checksum."""
    from aiokafka.record.util import calc_crc32c

    view = memoryview(bytes(skip) + data)[skip:]  # the data at every offset from a word boundary
    want = calc_crc32c(data)
    assert codec.crc32c(view) == codec.crc32c(view, portable=True) == want


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200), st.integers(1, 2**31 - 1), st.integers(-(2**63), 2**63 - 1),
       st.integers(-(2**63), 2**63 - 1), st.integers(-1, 2**63 - 1), st.integers(-1, 2**15 - 1),
       st.integers(-1, 2**31 - 1), st.booleans())
def test_a_batch_is_framed_as_kafkas_v2_layout_says(records, count, base_ts, max_ts, pid, epoch, seq, txn):
    """The C framing against the layout written out field by field (KIP-98's v2 batch)."""
    tail = struct.pack(">hiqqqhii", 0x10 if txn else 0, count - 1, base_ts, max_ts, pid, epoch, seq,
                       count) + records
    want = struct.pack(">qiibI", 0, len(tail) + 9, -1, 2, codec.crc32c(tail, portable=True)) + tail
    assert codec.batch(bytearray(records), count, base_ts, max_ts, 0, txn, pid, epoch, seq) == want


def test_a_producers_transaction_after_its_aborted_one_is_read_under_read_committed():
    """The ABORT marker closes the producer's aborted transaction: its next one is visible
    (a generated mix reaches this order too rarely to rely on)."""
    specs = [Spec([(b"a", b"1", [], 0)], producer_id=7, transactional=True),
             Spec([], producer_id=7, control=0),
             Spec([(b"b", b"2", [], 0)], producer_id=7, transactional=True),
             Spec([], producer_id=7, control=1)]
    buf, _ = response(specs)
    got = codec.decode(buf, 0, 100, "t", 0, True, [(0, 7)], False)
    assert [r[3] for r in rows_of(got.batch)] == [b"b"] and got.pos == 4
    assert reference(buf, 0, 100, True, [(0, 7)])[2] == rows_of(got.batch)


# --- the sink's encoder -------------------------------------------------------------------

_HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


Rows = list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]] | None]]


def _arrow(rows: Rows) -> pa.RecordBatch:
    heads = [[{"key": k, "value": v} for k, v in r[2]] if r[2] is not None else None for r in rows]
    keys, values = pa.array([r[0] for r in rows], pa.binary()), pa.array([r[1] for r in rows], pa.binary())
    return pa.record_batch([keys, values, pa.array(heads, _HEADERS_TYPE)], names=["key", "value", "headers"])


_row = st.tuples(_bytes, _bytes, st.one_of(st.none(), st.lists(_header, max_size=3)))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_row, min_size=1, max_size=12), min_size=1, max_size=4),
       st.sampled_from([0, 1, 2, 3, 4]), st.sampled_from([100, 300, 1 << 20]), st.booleans())
def test_the_c_encoder_writes_batches_aiokafka_reads_back_row_for_row(calls, codec_id, limit, transactional):
    """Rows added in several calls (each its own timestamp) to one partition come back from
    aiokafka's decoder as they went in, in order, in batches no larger than the limit unless
    one record alone is; each batch's CRC holds and its sequence follows the last."""
    from aiokafka.record.memory_records import MemoryRecords

    from spark_ext.connectors.kafka.sink.records import Batcher, columns

    b = Batcher(5 if transactional else -1, 2, transactional, codec_id, limit)
    sent: list[tuple[bytes, int]] = []
    want: list[tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...] | None]] = []
    for i, rows in enumerate(calls):
        ts = 1_700_000_000_000 + 1000 * i
        batch = _arrow(rows)
        sent += [(data, n) for _, data, n in b.add(("t", 0), columns(batch, np.arange(len(rows))), ts)]
        want += [(ts, k, v, tuple(h) if h else None) for k, v, h in rows]
    sent += [(data, n) for _, data, n in b.drain()]
    got, seq = [], 0
    for data, n in sent:
        batch = MemoryRecords(data).next_batch()
        assert batch.validate_crc() and batch.base_sequence == seq and batch.is_transactional == transactional
        records = list(batch)
        assert len(records) == n and (n == 1 or len(data) <= limit + 64 or codec_id)
        seq += n
        got += [(r.timestamp, r.key, r.value, tuple(r.headers) if r.headers else None) for r in records]
        assert [r.offset for r in records] == list(range(n))
    assert got == want
    assert b.sequences[("t", 0)] == len(want)
    ours = [r for data, _ in sent
            for r in rows_of(codec.decode(data, 0, 10**9, "t", 0, False, [], True).batch)]
    assert [(r[1], r[3], r[4], r[5]) for r in ours] == want


@settings(max_examples=300, deadline=None)
@given(st.lists(_row, min_size=1, max_size=40), st.lists(st.integers(0, 40), max_size=6), st.randoms(),
       st.booleans())
def test_each_partition_s_rows_are_encoded_from_a_slice_of_the_batch_taken_once(rows, cuts, rnd, large):
    """The sink takes a batch's columns once, in partition order, and encodes each partition
    from a zero-copy slice of them: slices at any row (validity bitmaps not starting on a
    byte, offsets not starting at 0, headers' list offsets into the whole entries) must be
    encoded as the same rows copied out alone."""
    from spark_ext.connectors.kafka.sink.records import Batcher, columns

    batch = _arrow(rows)
    if large:  # Spark's large types, cast once before the slices
        batch = batch.cast(pa.schema([("key", pa.large_binary()), ("value", pa.large_binary()),
                                      ("headers", pa.large_list(_HEADERS_TYPE.value_type))]))
    order = np.arange(len(rows))
    rnd.shuffle(order)
    grouped = columns(batch, order)
    bounds = sorted({0, len(rows), *(min(c, len(rows)) for c in cuts)})
    b = Batcher(-1, 0, False, 0, 1 << 20)
    sent: dict[int, list[bytes]] = {}
    for part, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        for (_, p), data, _ in b.add(("t", part), grouped.slice(lo, hi), 7):
            sent.setdefault(p, []).append(data)
    for (_, p), data, _ in b.drain():
        sent.setdefault(p, []).append(data)
    for part, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        got = [(r[3], r[4], r[5]) for data in sent.get(part, [])
               for r in rows_of(codec.decode(data, 0, 10**9, "t", part, False, [], True).batch)]
        assert got == [(k, v, tuple(h) if h else None) for k, v, h in (rows[i] for i in order[lo:hi])]


def test_spark_s_large_arrow_types_are_encoded_as_the_plain_ones():
    """With spark.sql.execution.arrow.useLargeVarTypes Spark hands the sink 64-bit offsets: the
    records must be the same (read as 32-bit, they were silently wrong)."""
    from spark_ext.connectors.kafka.sink.records import Batcher, columns

    large = pa.large_list(pa.struct([("key", pa.large_string()), ("value", pa.large_binary())]))
    cols = [pa.array(["k1", None], pa.large_string()), pa.array([b"v1", b"value2"], pa.large_binary()),
            pa.array([[{"key": "hk", "value": b"x"}], None], large)]
    batch = pa.record_batch(cols, names=["key", "value", "headers"])
    b = Batcher(-1, 0, False, 0, 1 << 20)
    sent = [data for _, data, _ in [*b.add(("t", 0), columns(batch, np.arange(2)), 5), *b.drain()]]
    rows = [r for data in sent for r in rows_of(codec.decode(data, 0, 10, "t", 0, False, [], True).batch)]
    assert [(r[3], r[4], r[5]) for r in rows] == [(b"k1", b"v1", (("hk", b"x"),)), (None, b"value2", None)]


def test_buffers_that_do_not_hold_the_rows_are_refused_not_read_past():
    """Fewer offsets than rows, or offsets past the data: an error, never a read beyond."""
    two = pa.array([b"v1", b"value2"], pa.binary()).buffers()
    with pytest.raises(ValueError, match="value column's buffers are not 5 items of 32-bit offsets"):
        codec.encode(5, None, (None, two[1], two[2]), None, 0, 0, codec.HEADER, 1 << 20)
    with pytest.raises(ValueError, match="key column's buffers are not 2 items"):
        codec.encode(2, (None, two[1], pa.py_buffer(b"v1")), None, None, 0, 0, codec.HEADER, 1 << 20)


def test_a_batch_that_does_not_decompress_is_a_value_error_naming_the_codec():
    raw = bytearray(build(Spec([(b"k", b"v" * 200, [], 0)], codec=1), 3))
    assert struct.unpack_from(">h", raw, 21)[0] & 7 == 1
    raw[70:80] = bytes(10)
    from aiokafka.record.util import calc_crc32c

    struct.pack_into(">I", raw, 17, calc_crc32c(bytes(raw[21:])))
    with pytest.raises(ValueError, match="gzip records do not decompress"):
        codec.decode(bytes(raw), 0, 100, "t", 0, False, [], False)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary(max_size=40)), min_size=1, max_size=60), st.integers(1, 1000),
       st.integers(0, 59))
def test_keys_are_partitioned_as_kafkas_default_partitioner_does(keys, count, skip):
    """The C partitioner against kafka-python's murmur2 (Java's ``Utils.murmur2``), every key
    length's tail, null keys -1, and a slice of the column read in place."""
    from kafka.partitioner.default import murmur2

    col = pa.array(keys, pa.binary())
    skip = min(skip, len(keys) - 1)
    for arr, ks in ((col, keys), (col.slice(skip), keys[skip:])):
        want = [-1 if k is None else (murmur2(k) & 0x7FFFFFFF) % count for k in ks]
        assert codec.partitions(arr, count).tolist() == want
