"""The queue sink's log entries, and how one fits in the broker's message properties.

An entry is one message of the log queue; its state is JSON in string properties. The
sink reads the log back through the broker's management listing, which cuts every string
property to the address's ``management-message-attribute-size-limit`` (256 characters by
default, then ``", + N more"``). A decision grows with the batch's winners (200 tasks
after any shuffle at Spark's defaults) and with the sink id inside every token, so the
JSON is split over numbered properties of ``PART`` characters each, and the entry says
how many parts and how long the whole is: a cut part is caught, never parsed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spark_ext import formats
from spark_ext.connectors.jms import wire
from spark_ext.errors import FatalCommitError

SEQ_HEADER = "spark_ext_seq"
#: Entries written before the split: the whole JSON in one property.
RECORD_HEADER = "spark_ext_record"
#: ``<parts>,<length>`` of the JSON, whose parts are ``spark_ext_record_0``, ``_1``, ...
PARTS_HEADER = "spark_ext_record_parts"
PART_PREFIX = "spark_ext_record_"
#: Characters per part: under the listing's default cut (256) with room to spare.
PART = 200
SIZE_LIMIT_SETTING = "management-message-attribute-size-limit"


@dataclass(frozen=True)
class Winner:
    token: str
    rows: int


@dataclass(frozen=True)
class JmsDecision:
    """Batch ``batch_id`` of query ``query_id`` commits these attempts' messages."""

    batch_id: int
    query_id: str
    winners: tuple[Winner, ...]
    run_id: str = ""  # Spark's run that decided it ("": not known)


@dataclass(frozen=True)
class SinkState:
    """One entry of the log: the sink's whole state after one change."""

    seq: int
    epoch: int
    decision: JmsDecision | None
    done: bool
    nonce: str = ""

    def encode(self) -> str:
        """The JSON; winners' tokens share the sink id, epoch and batch, written once."""
        d = self.decision
        body: Any = None
        if d is not None:
            tokens = [w.token for w in d.winners]
            prefix = _common_prefix(tokens) if len(tokens) > 1 else ""
            body = [d.batch_id, d.query_id, prefix, [[w.token[len(prefix):], w.rows] for w in d.winners]]
            if d.run_id:
                body.append(d.run_id)
        return json.dumps({formats.KEY: formats.QUEUE_LOG.current, "s": self.seq, "e": self.epoch,
                           "f": self.done, "n": self.nonce, "d": body},
                          separators=(",", ":"))

    @staticmethod
    def decode(raw: str) -> SinkState:
        v = json.loads(raw)
        formats.QUEUE_LOG.of(v, "the queue sink's log")
        d = v["d"]
        decision = None
        if d is not None:
            prefix, winners = ("", d[2]) if len(d) == 3 else (d[2], d[3])  # 3: written before the prefix
            run = str(d[4]) if len(d) > 4 else ""  # 5: with the run that decided it
            decision = JmsDecision(int(d[0]), d[1], tuple(Winner(prefix + t, int(r)) for t, r in winners),
                                   run)
        return SinkState(int(v["s"]), int(v["e"]), decision, bool(v["f"]), v.get("n", ""))

    def headers(self) -> str:
        """The entry's STOMP header lines (escaped), the JSON in parts."""
        raw = self.encode()
        parts = [raw[i:i + PART] for i in range(0, len(raw), PART)]
        lines = [f"{SEQ_HEADER}:{self.seq}", f"{PARTS_HEADER}:{len(parts)},{len(raw)}"]
        lines += [f"{PART_PREFIX}{i}:{wire.escape(p)}" for i, p in enumerate(parts)]
        return "\n".join(lines)


def _common_prefix(tokens: list[str]) -> str:
    first, last = min(tokens), max(tokens)
    n = 0
    while n < len(first) and first[n] == last[n]:
        n += 1
    return first[:n]


def read_entry(listed: Mapping[str, Any], queue: str) -> SinkState | None:
    """The state in one listed log message (None: not an entry). A part the broker cut
    raises, naming the setting that cut it."""
    if PARTS_HEADER in listed:
        count, length = (int(x) for x in str(listed[PARTS_HEADER]).split(","))
        raw = "".join(str(listed.get(f"{PART_PREFIX}{i}", "")) for i in range(count))
        if len(raw) != length:
            raise FatalCommitError(
                f"the broker cut an entry of the sink's log {queue} when listing it ({len(raw)} of {length} "
                f"characters): its address setting {SIZE_LIMIT_SETTING} is below {PART}. Raise it for "
                f"'{queue}' (or remove the override; the default is 256) in broker.xml and restart the query")
        return SinkState.decode(raw)
    if RECORD_HEADER in listed:
        return SinkState.decode(str(listed[RECORD_HEADER]))
    return None
