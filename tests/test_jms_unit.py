"""The queue source's pure logic: received messages to Arrow, message IDs in offsets."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from connectors.jms.client import Message
from connectors.jms.ids import pack_ids, unpack_ids
from connectors.jms.source import to_arrow
from spark_ext.errors import ConnectorError


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
