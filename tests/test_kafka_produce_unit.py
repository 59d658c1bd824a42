"""The Kafka sink writer's per-row and per-request work, as pure logic: its own
produce-request framing against kafka-python's encoder and decoder, the gather write that
sends it (byte for byte the same request, the record batches uncopied), and the sort that
groups rows by partition. Every Kafka sink test sends the requests to the real broker."""

from __future__ import annotations

import socket
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.producer.produce import ProduceRequest

from spark_ext.connectors.kafka.client import connection
from spark_ext.connectors.kafka.client.produce import PRODUCE_VERSION, encode_produce, uvarint
from spark_ext.connectors.kafka.sink.records import _sort_key

_topics = st.text(min_size=1, max_size=300)  # past 127 bytes: a compact length of two bytes
_batches = st.lists(st.tuples(st.sampled_from(["a", "topic-ü", "x" * 249]) | _topics,
                              st.integers(0, 2**31 - 1), st.binary(min_size=0, max_size=300)),
                    min_size=1, max_size=12)


def _kafka_pythons(cid: int, tid: str | None, acks: int, timeout_ms: int, batches) -> bytes:
    by_topic: dict[str, list] = {}
    for topic, partition, records in batches:
        by_topic.setdefault(topic, []).append(
            ProduceRequest.TopicProduceData.PartitionProduceData(index=partition, records=records))
    req = ProduceRequest(transactional_id=tid, acks=acks, timeout_ms=timeout_ms,
                         topic_data=[ProduceRequest.TopicProduceData(name=t, partition_data=ps)
                                     for t, ps in by_topic.items()])
    req.with_header(correlation_id=cid, client_id="spark-ext")
    return bytes(req.encode(version=PRODUCE_VERSION, header=True, framed=True))


@settings(max_examples=300, deadline=None)
@given(cid=st.integers(0, 2**31 - 1), tid=st.none() | st.text(max_size=200),
       acks=st.sampled_from([-1, 0, 1]), timeout_ms=st.integers(0, 2**31 - 1), batches=_batches)
def test_the_request_is_kafka_pythons_byte_for_byte(cid, tid, acks, timeout_ms, batches):
    parts = encode_produce(cid, tid, acks, timeout_ms, batches)
    assert b"".join(parts) == _kafka_pythons(cid, tid, acks, timeout_ms, batches)
    decoded = ProduceRequest.decode(b"".join(parts)[4:], version=PRODUCE_VERSION, header=True)
    got = [(t.name, p.index, p.records) for t in decoded.topic_data for p in t.partition_data]
    assert sorted(got) == sorted(batches)


def test_the_record_batches_go_uncopied():
    batches = [("t", 0, b"a" * 1000), ("u", 3, b"b" * 2000), ("t", 1, b"c" * 10)]
    parts = encode_produce(1, "tid", -1, 30000, batches)
    assert [id(p) for p in parts[1::2]] == [id(batches[0][2]), id(batches[2][2]), id(batches[1][2])]
    assert sum(len(p) for p in parts[::2]) < 100  # the framing alone is copied


def test_uvarint_is_kafkas():
    assert [uvarint(n) for n in (0, 1, 127, 128, 300, 2**21)] == [
        b"\x00", b"\x01", b"\x7f", b"\x80\x01", b"\xac\x02", b"\x80\x80\x80\x01"]


def test_a_gather_write_cut_short_by_the_kernel_resumes_where_it_stopped():
    """More parts than one sendmsg takes, and more bytes than a socket buffer holds, on a
    socket with a timeout as ``Conn``'s (so the kernel may take part of a write): the
    reader gets every byte once, in order."""
    server = socket.create_server(("127.0.0.1", 0))
    a = socket.create_connection(server.getsockname(), timeout=10)  # as Conn's: writes may stop short
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    b, _ = server.accept()
    server.close()
    conn = connection.Conn.__new__(connection.Conn)
    conn.sock, conn._cid = a, 0
    b.settimeout(10)
    parts = [bytes([i % 251]) * (i % 7000) for i in range(1500)]
    got = bytearray()

    def read() -> None:
        while len(got) < sum(map(len, parts)):
            chunk = b.recv(65536)
            if not chunk:
                return
            got.extend(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        conn.send_parts(lambda cid: parts)
        reader.join(10)
    finally:
        a.close()
        b.close()
    assert not reader.is_alive() and bytes(got) == b"".join(parts)
    assert a.gettimeout() == 10  # the socket's own timeout again, after the per-write ones


def test_a_gather_write_to_a_reader_that_keeps_it_trickling_times_out_as_a_whole():
    """The socket's timeout bounds the whole request, as ``sendall``'s does: a peer that
    takes a little at a time, each write within the timeout, must not keep one request
    going past it (a timeout per write would run until the peer gives up)."""
    a, b = socket.socketpair()  # no TCP window: a read frees room for the next write at once
    a.settimeout(0.5)
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)

    def trickle() -> None:
        end = time.monotonic() + 4
        while time.monotonic() < end:
            try:
                b.recv(2048)
            except OSError:
                return
            time.sleep(0.02)
        b.close()  # gives up: a send still going fails, but not with a timeout

    threading.Thread(target=trickle, daemon=True).start()
    conn = connection.Conn.__new__(connection.Conn)
    conn.sock, conn._cid, conn.host, conn.port = a, 0, "127.0.0.1", 0
    try:
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            conn.send_parts(lambda cid: [b"x" * 65536] * 200)
        assert time.monotonic() - started < 2
    finally:
        a.close()


@settings(max_examples=200, deadline=None)
@given(count=st.sampled_from([1, 4, 64, 1 << 16, (1 << 16) + 1]), run=st.integers(1, 300),
       n=st.integers(0, 3000), top=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_rows_grouped_by_partition_keep_their_order_whichever_sort_groups_them(count, run, n, top, seed):
    """The writer groups a task's rows by partition with one stable sort, as 16-bit keys
    (a radix sort) when partitions are scattered: the order is the plain stable sort's,
    up to the highest partitions (``top``)."""
    rng = np.random.default_rng(seed)
    low = max(0, count - 8) if top else 0
    p = np.repeat(rng.integers(low, count, n // run + 1, dtype=np.int32), run)[:n]
    key = _sort_key(p, count)
    assert np.array_equal(np.argsort(key, kind="stable"), np.argsort(p, kind="stable"))
