"""The queue source's conversion of received messages to Arrow (pure logic)."""

from __future__ import annotations

from datetime import UTC, datetime

from connectors.jms.client import Message
from connectors.jms.source import to_arrow


def msg(i: int, body: bytes, headers: dict[str, str], ts: int) -> Message:
    return Message(f"id{i}", body, headers, "/queue/q", ts, i % 2 == 1, f"ack{i}")


def test_messages_become_one_row_each_with_their_headers_text_and_time():
    ms = [msg(0, "héllo".encode(), {"priority": "4", "app-id": "p-1"}, 1_700_000_000_123),
          msg(1, b"", {}, 0),
          msg(2, b"x", {"k": "v"}, 5)]
    rows = to_arrow(ms).to_pylist()
    assert [r["message_id"] for r in rows] == ["id0", "id1", "id2"]
    assert [r["body_text"] for r in rows] == ["héllo", "", "x"]
    assert [r["headers"] for r in rows] == [[("priority", "4"), ("app-id", "p-1")], [], [("k", "v")]]
    assert rows[0]["timestamp"] == datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC)
    assert rows[1]["timestamp"] is None  # the broker sent no timestamp
    assert [r["redelivered"] for r in rows] == [False, True, False]


def test_a_body_that_is_not_utf8_keeps_its_bytes_and_gets_replacement_characters_as_text():
    ms = [msg(0, b"ok", {}, 1), msg(1, b"\xff\xfeab", {}, 1)]
    rows = to_arrow(ms).to_pylist()
    assert rows[1]["body"] == b"\xff\xfeab"
    assert rows[1]["body_text"] == "\ufffd\ufffdab"
    assert rows[0]["body_text"] == "ok"
