"""The queue source's pure logic: STOMP frames cut and decoded, to Arrow; message IDs in offsets."""

from __future__ import annotations

import itertools
import json
import socket
import statistics
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
import stomp

from spark_ext.connectors.jms import wire
from spark_ext.connectors.jms.client import stable_message_id
from spark_ext.connectors.jms.ids import pack_ids, unpack_ids
from spark_ext.connectors.jms.source import to_arrow
from spark_ext.errors import ConnectorError
from tests.support.waiting import wait_for


def stomp_frame(cmd: str, headers: dict[str, str], body: bytes) -> bytes:
    """A frame as stomp.py encodes it (an independent encoder), with its NUL."""
    frame = stomp.utils.Frame(cmd, {**headers, "content-length": str(len(body))}, body)
    return b"".join(stomp.utils.encode(x) for x in stomp.utils.convert_frame(frame))


def message(i: int, body: bytes, headers: dict[str, str], ts: int) -> bytes:
    h = {"subscription": "s", "message-id": f"9,{100 + i}", "ack": f"ack{i}", "destination": "/queue/q",
         "redelivered": "true" if i % 2 else "false", **headers}
    if ts:
        h["timestamp"] = str(ts)
    return stomp_frame("MESSAGE", h, body)


def arrow_of(frames: list[bytes]) -> list[dict]:
    cut, used = wire.cut(b"".join(frames))
    assert used == sum(len(f) for f in frames)
    ids = [stable_message_id(wire.header(f, b"\nmessage-id:") or "") for f in cut]
    return to_arrow(ids, [data for data, _ in cut], "/queue/default").to_pylist()


def test_messages_become_one_row_each_with_their_headers_text_and_time():
    rows = arrow_of([message(0, "héllo".encode(), {"priority": "4", "app-id": "p-1"}, 1_700_000_000_123),
                     message(1, b"", {}, 0),
                     message(2, b"x", {"k": "v"}, 5)])
    assert [r["message_id"] for r in rows] == ["100", "101", "102"]  # Artemis's stable part
    assert [r["body_text"] for r in rows] == ["héllo", "", "x"]
    headers = [dict(r["headers"]) for r in rows]
    assert headers[0]["priority"] == "4" and headers[0]["app-id"] == "p-1"
    assert headers[2]["k"] == "v" and all("ack" not in h and "subscription" not in h for h in headers)
    assert rows[0]["timestamp"] == datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC)
    assert rows[1]["timestamp"] is None  # the broker sent no timestamp
    assert [r["redelivered"] for r in rows] == [False, True, False]
    assert {r["destination"] for r in rows} == {"/queue/q"}


def test_a_body_that_is_not_utf8_keeps_its_bytes_and_gets_replacement_characters_as_text():
    rows = arrow_of([message(0, b"ok", {}, 1), message(1, b"\xff\xfe\x00ab\x00", {}, 1)])
    assert rows[1]["body"] == b"\xff\xfe\x00ab\x00"  # NUL bytes inside: content-length decides
    assert rows[1]["body_text"] == "\ufffd\ufffd\x00ab\x00"
    assert rows[0]["body_text"] == "ok"


def test_frames_are_cut_across_any_split_of_the_stream_heart_beats_skipped():
    stream = (b"\n" + message(0, b"a\x00b", {}, 1) + b"\n\n" + message(1, b"second", {"x": "y"}, 2)
              + b"RECEIPT\nreceipt-id:r1\n\n\x00")
    whole, used = wire.cut(stream)
    assert used == len(stream) and [wire.command(f) for f in whole] == ["MESSAGE", "MESSAGE", "RECEIPT"]
    for split in range(1, len(stream)):
        got, used = wire.cut(stream[:split])
        rest, used2 = wire.cut(stream[used:])
        assert [d for d, _ in got + rest] == [d for d, _ in whole], split
        assert used + used2 == len(stream)
    assert wire.header(whole[2], b"\nreceipt-id:") == "r1"
    assert wire.parse_message(whole[1][0]) == ({"subscription": "s", "message-id": "9,101", "ack": "ack1",
                                                "destination": "/queue/q", "redelivered": "true", "x": "y",
                                                "timestamp": "2", "content-length": "6"}, b"second")


def test_headers_are_unescaped_and_the_first_of_a_repeated_name_wins():
    frame = b"MESSAGE\r\nid:a\\cb\\nc\\\\d\r\nid:second\r\nmessage-id:7\r\n\r\nbody\x00"
    (f,), used = wire.cut(frame)
    assert used == len(frame)
    assert wire.header(f, b"\nid:") == "a:b\nc\\d"
    assert wire.parse_message(f[0]) == ({"id": "a:b\nc\\d", "message-id": "7"}, b"body")


@pytest.mark.parametrize("ids", [
    [str(2158433556 + 2 * i) for i in range(20_000)],  # Artemis message IDs
    ["7", "3", "0", "12", "12"],  # not ascending, a zero, a repeat
    ["007", "7"],  # digits, but "007" is not how 7 is written: kept as strings
    ["007", "7", "pay-1", "\u00e9\n,\"x", ""],  # not canonical integers: kept as strings
    ["\u0661\u0662"],  # digits, but not ASCII ones
    [],
])
def test_batch_ids_come_back_exactly_from_their_packed_form(ids):
    packed = pack_ids(ids)
    assert isinstance(packed, str)
    assert unpack_ids(json.loads(json.dumps(packed))) == ids  # through the offset's JSON


def test_packed_artemis_ids_are_small_and_old_offsets_still_read():
    ids = [str(2158433556 + 2 * i) for i in range(20_000)]
    assert len(pack_ids(ids)) < 1_000 < len(json.dumps(ids)) // 200
    assert unpack_ids(["5", "a"]) == ["5", "a"]  # an offset written as a plain list


@pytest.mark.parametrize("bad", ["d:not base64!", "z:" + "QUJD", "x:abc"])
def test_unreadable_ids_in_an_offset_fail_with_a_clear_error(bad):
    with pytest.raises(ConnectorError, match="message IDs"):
        unpack_ids(bad)


def test_ack_frames_are_what_stomp_py_sends_and_odd_ids_round_trip():
    from spark_ext.connectors.jms.client import _ack_frame
    for ack_id in ["1,2158433556", "x", "ID:broker-1-0:1:1:1"]:
        sent, used = wire.cut(_ack_frame(ack_id))
        assert wire.header(sent[0], b"\nid:") == ack_id and used == len(_ack_frame(ack_id))
    assert _ack_frame("1,2158433556") == stomp_frame("ACK", {"id": "1,2158433556"}, b"").replace(
        b"content-length:0\n", b"")
    assert _ack_frame("1,2", "spark-ext-ack-1-2") == stomp_frame(
        "ACK", {"id": "1,2", "receipt": "spark-ext-ack-1-2"}, b"").replace(b"content-length:0\n", b"")


def _agreed(heartbeat_ms: int,
            talk: Callable[[socket.socket], None]) -> tuple[wire.StompSocket, socket.socket]:
    """Our socket, logged in to a fake peer that agrees to ``heartbeat_ms`` heart-beats both
    ways and then runs ``talk`` on the connection, on a thread of its own."""
    server = socket.create_server(("127.0.0.1", 0))

    def peer() -> None:
        conn, _ = server.accept()
        conn.recv(65536)  # CONNECT
        conn.sendall(f"CONNECTED\nversion:1.2\nheart-beat:{heartbeat_ms},{heartbeat_ms}\n\n\x00".encode())
        talk(conn)
        conn.close()

    threading.Thread(target=peer, daemon=True).start()
    sock = wire.StompSocket("127.0.0.1", server.getsockname()[1], 2.0)
    sock.login(None, None, heartbeat_ms, 2.0)
    return sock, server


def test_a_silent_broker_is_noticed_by_missing_heart_beats_and_ours_are_sent():
    """A fake peer (the pure timing logic; the real broker's heart-beats keep a 45 s idle
    connection up, checked by hand): it agrees to 200 ms heart-beats, then says nothing."""
    got: list[bytes] = []

    def listen(conn: socket.socket) -> None:
        conn.settimeout(3)
        try:
            while data := conn.recv(65536):
                got.append(data)
        except OSError:
            pass

    sock, server = _agreed(200, listen)
    closed = threading.Event()
    t0 = time.monotonic()
    sock.start(lambda frames: None, lambda frame: None, closed.set)
    assert closed.wait(5), "a silent broker was not noticed"
    assert 0.4 <= time.monotonic() - t0 < 2.0
    assert b"\n" in got  # our heart-beats went out meanwhile
    sock.close()
    server.close()


def test_our_heart_beats_go_out_at_twice_the_agreed_rate():
    """Artemis drops a connection that sent nothing for twice the agreed interval (its
    connection TTL): sent at the agreed rate, a short stall of the process (a loaded host)
    could cost the connection. A fake peer agrees to 400 ms and beats every 100 ms; ours
    must come at least every 300 ms."""
    beats: list[float] = []
    done = threading.Event()

    def beat_and_listen(conn: socket.socket) -> None:
        conn.settimeout(0.1)
        while not done.is_set():
            conn.sendall(b"\n")
            try:
                if conn.recv(65536):
                    beats.append(time.monotonic())
            except TimeoutError:
                pass

    sock, server = _agreed(400, beat_and_listen)
    sock.start(lambda frames: None, lambda frame: None, lambda: None)
    wait_for(lambda: len(beats) >= 9, "nine of our heart-beats", timeout=10)
    done.set()
    sock.close()
    server.close()
    gaps = [b - a for a, b in itertools.pairwise(beats)]
    assert statistics.median(gaps) < 0.3, gaps  # 0.2-0.3 s; 0.4 s at the agreed rate


@pytest.mark.parametrize(("setting", "named"), [
    ({"IDCacheSize": 10}, "id-cache-size is 10"),
    ({"PersistIDCache": False}, "persist-id-cache"),
    ({"PersistenceEnabled": False}, "persistence-enabled"),
])
def test_queue_sink_refuses_broker_settings_it_cannot_be_exactly_once_with(setting, named):
    from spark_ext.connectors.jms.sink.connector import BrokerSettingError, _check_broker

    defaults = {"PersistenceEnabled": True, "PersistIDCache": True, "IDCacheSize": 20000}
    _check_broker(defaults)  # the defaults pass
    with pytest.raises(BrokerSettingError, match=named):
        _check_broker({**defaults, **setting})


def test_queue_sink_frames_escape_headers_and_refuse_reserved_names():
    import pyarrow as pa

    from spark_ext.connectors.jms.sink.records import BadMessageError, common_headers, send_frames

    common = common_headers("/queue/q", True, "tx", {"spark_ext_txn": "t"})
    rb = pa.record_batch({"body": pa.array(["a:b"]),
                          "headers": pa.array([[("k:1", "v\nx")]], pa.map_(pa.string(), pa.string()))})
    frame = next(send_frames(rb, common))
    headers, body = wire.parse_message(frame[:-1])
    assert headers["k:1"] == "v\nx" and headers["transaction"] == "tx" and body == b"a:b"
    assert b"content-length" not in frame  # a string body: a TextMessage
    bad = pa.record_batch({"body": pa.array(["x"]),
                           "headers": pa.array([[("destination", "/queue/other")]],
                                               pa.map_(pa.string(), pa.string()))})
    with pytest.raises(BadMessageError, match="'destination'"):
        next(send_frames(bad, common))


@pytest.mark.parametrize("value,window", [(None, None), ("auto", None), ("AUTO", None), ("-1", -1), ("0", -1),
                                          ("1048576", 1048576)])
def test_consumer_window_size_is_auto_unless_a_number_is_given(value, window):
    from spark_ext.connectors.jms.config import JmsSourceConfig
    from spark_ext.options import Options

    opts = {"destination": "/queue/q", **({"consumerWindowSize": value} if value is not None else {})}
    assert JmsSourceConfig.parse(Options(opts, "hzsource")).window_bytes == window


def test_a_consumer_window_size_that_is_not_a_number_or_auto_is_refused_naming_the_option():
    from spark_ext.connectors.jms.config import JmsSourceConfig
    from spark_ext.errors import SparkExtError
    from spark_ext.options import Options

    with pytest.raises(SparkExtError, match="consumerWindowSize"):
        JmsSourceConfig.parse(Options({"destination": "/queue/q", "consumerWindowSize": "big"}, "hzsource"))


@pytest.mark.parametrize("closes", [True, False])
def test_a_brokers_goodbye_error_read_before_its_close_is_a_lost_connection_not_a_failed_query(
        monkeypatch, tmp_path, closes):
    """A broker closes its connection right after an ERROR frame (shutting down, or its
    connection TTL expired on a stalled host). The receiving thread reads the ERROR first;
    a plan that looked then, before the close was seen, failed the query with the
    broker's text instead of planning nothing and reconnecting. Made certain here: a fake
    broker sends the ERROR, the plan starts once it was read, the close comes 300 ms later.
    An ERROR the broker does not follow with its close still fails the query, naming it."""
    from spark_ext.connectors.jms.config import JmsSourceConfig
    from spark_ext.connectors.jms.source import JmsStreamReader, ReadMaxRows
    from spark_ext.monitoring import cards
    from spark_ext.options import Options

    monkeypatch.setenv(cards.ENV, str(tmp_path / "no-exporter"))  # no gauges thread
    server = socket.create_server(("127.0.0.1", 0))
    say_goodbye, closed = threading.Event(), threading.Event()

    def broker() -> None:
        conn, _ = server.accept()
        buf = b""
        while b"SUBSCRIBE" not in buf or b"\x00" not in buf.split(b"SUBSCRIBE", 1)[1]:
            buf += conn.recv(65536)
            if buf.startswith(b"CONNECT") and b"CONNECTED" not in buf and b"\x00" in buf:
                conn.sendall(b"CONNECTED\nversion:1.2\nheart-beat:0,0\n\n\x00")
                buf += b"CONNECTED"  # answered
        sub = buf.split(b"SUBSCRIBE", 1)[1]
        receipt = sub.split(b"\nreceipt:", 1)[1].split(b"\n", 1)[0]
        sub_id = sub.split(b"\nid:", 1)[1].split(b"\n", 1)[0]
        conn.sendall(b"RECEIPT\nreceipt-id:" + receipt + b"\n\n\x00")
        for i in range(2):
            conn.sendall(b"MESSAGE\nsubscription:" + sub_id + f"\nmessage-id:{i + 1}\ndestination:/queue/q\n"
                         f"ack:a{i}\ncontent-length:1\n\nx\x00".encode())
        say_goodbye.wait(10)
        conn.sendall(b"ERROR\nmessage:AMQ229014: Did not receive data from /127.0.0.1 within the 20000ms "
                     b"connection TTL. The connection will now be closed.\n\n\x00")
        closed.wait(0.3 if closes else 30)
        conn.close()

    threading.Thread(target=broker, daemon=True).start()
    cfg = JmsSourceConfig.parse(Options({"host": "127.0.0.1", "port": str(server.getsockname()[1]),
                                         "destination": "/queue/q"}, "test"))
    reader = JmsStreamReader(cfg)
    try:
        start = reader.initialOffset()
        first = reader.latestOffset(start, ReadMaxRows(10))
        assert unpack_ids(first["ids"]) == ["1", "2"]
        rx = reader.rx
        say_goodbye.set()
        wait_for(lambda: bool(rx._error), "the receiving thread to read the ERROR")
        assert rx.connected  # its close is still to come
        if not closes:
            with pytest.raises(ConnectorError, match="reported: AMQ229014"):
                reader.latestOffset(first, ReadMaxRows(10))
            return
        assert reader.latestOffset(first, ReadMaxRows(10)) == first  # nothing new; reconnect next time
        assert not rx.connected
    finally:
        closed.set()
        reader.stop()
        server.close()
