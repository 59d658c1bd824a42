"""The Kafka sink's decision, and how it fits in consumer-group offset metadata.

A decision names every winning task (transactional id, producer id, epoch), so it grows
with the batch's task count, and Spark's settings, not ours, decide that count (200
after any shuffle at the defaults). Offset metadata holds at most the broker's
``offset.metadata.max.bytes`` (4096 by default) per partition. A decision is JSON,
compressed when that is longer, and split over partitions 0, 1, ... of the commit topic
when even that does not fit; all its parts are committed in one transaction (or one
OffsetCommit for the kept copy), each part naming its index and the count, so a reader
finds a whole decision or none.
"""

from __future__ import annotations

import base64
import json
import re
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from spark_ext import formats
from spark_ext.connectors.kafka.client.transactions import Producer
from spark_ext.errors import FatalCommitError

#: What the broker's default offset.metadata.max.bytes (4096) leaves for one part.
META_LIMIT = 3900
_PART = re.compile(r"^m(\d+)\.(\d+):")  # a part of a split decision: m<count>.<index>:


class TornDecisionError(FatalCommitError):
    """A part of a split decision is missing or belongs to another batch."""


@dataclass(frozen=True)
class Decision:
    batch_id: int
    query_id: str
    checkpoint: str | None
    winners: tuple[Producer, ...]
    run_id: str = ""  # Spark's run that decided it ("": not known)
    rows: int | None = None  # the records the batch commits (None: not kept)

    def _json(self) -> str:
        doc: dict[str, object] = {formats.KEY: formats.KAFKA_DECISION.current, "b": self.batch_id,
                                  "q": self.query_id, "c": self.checkpoint,
                                  "w": [[w.transactional_id, w.producer_id, w.epoch] for w in self.winners]}
        if self.run_id:
            doc["r"] = self.run_id
        if self.rows is not None:
            doc["n"] = self.rows
        return json.dumps(doc, separators=(",", ":"))

    def parts(self, limit: int = META_LIMIT) -> list[str]:
        """The decision as offset metadata of at most ``limit`` characters each: one part
        (JSON, or ``z:`` and compressed JSON) or, split, ``m<count>.<index>:`` parts."""
        raw = self._json()
        if len(raw) <= limit:
            return [raw]
        packed = "z:" + base64.b64encode(zlib.compress(raw.encode(), 9)).decode()
        if len(packed) <= limit:
            return [packed]
        room = limit - 16  # the part's own header
        pieces = [packed[i:i + room] for i in range(0, len(packed), room)]
        return [f"m{len(pieces)}.{i}:{p}" for i, p in enumerate(pieces)]

    @staticmethod
    def decode(meta: str) -> Decision:
        """One part's metadata (an unsplit decision)."""
        raw = zlib.decompress(base64.b64decode(meta[2:])).decode() if meta.startswith("z:") else meta
        d = json.loads(raw)
        formats.KAFKA_DECISION.of(d, "the Kafka sink's decision (its commit group's offset metadata)")
        return Decision(int(d["b"]), d["q"], d.get("c"), tuple(Producer(t, p, e) for t, p, e in d["w"]),
                        str(d.get("r", "")), None if d.get("n") is None else int(d["n"]))


def split_count(first: str) -> int:
    """How many partitions the decision whose partition-0 metadata is ``first`` spans."""
    m = _PART.match(first)
    return int(m.group(1)) if m else 1


def join(first: str, rest: Callable[[list[int]], dict[int, tuple[int, str]]], offset: int,
         where: str) -> Decision:
    """The decision whose partition-0 metadata is ``first`` (committed at ``offset``);
    ``rest(partitions)`` reads the other parts' (offset, metadata)."""
    count = split_count(first)
    if count == 1:
        return Decision.decode(first)
    others = rest(list(range(1, count)))
    metas: Sequence[str] = [first] + [_checked(others.get(i, (-1, "")), i, count, offset, where)
                                      for i in range(1, count)]
    if not first.startswith(f"m{count}.0:"):
        raise TornDecisionError(f"{where}: the first part of a split decision is malformed")
    return Decision.decode("".join(m[m.index(":") + 1:] for m in metas))


def _checked(got: tuple[int, str], index: int, count: int, offset: int, where: str) -> str:
    off, meta = got
    if off != offset or not meta.startswith(f"m{count}.{index}:"):
        raise TornDecisionError(
            f"{where}: part {index} of {count} of the decision committed at offset {offset} is missing "
            f"(found offset {off}); the parts are committed together, so the commit topic's partitions "
            "changed or the group was edited by hand. Run 'spark-ext doctor kafka list' to see the sink")
    return meta
