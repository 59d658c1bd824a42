"""What one topic's settings allow a single record: read on the driver at query start
(``TOPIC_KEYS``, ``TopicRules.of``), applied to rows by the writer (``rules``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

BATCH_FRAMING = 512  # what a record batch's size estimate may leave out of the bytes the broker counts
TOPIC_KEYS = ("max.message.bytes", "segment.bytes", "cleanup.policy")


@dataclass(frozen=True)
class TopicRules:
    """The settings of one topic that refuse single records."""

    max_bytes: int | None = None
    segment_bytes: int | None = None
    compacted: bool = False

    @property
    def batch_bytes(self) -> int | None:
        """Where the sink cuts record batches for this topic (None: its limit is not known)."""
        known = [n for n in (self.max_bytes, self.segment_bytes) if n is not None]
        return max(1024, min(known) - BATCH_FRAMING) if known else None

    @staticmethod
    def of(configs: Mapping[str, str | None]) -> TopicRules:
        """From a DescribeConfigs answer (absent settings: the broker's rule is not applied)."""
        def num(name: str) -> int | None:
            v = configs.get(name)
            return int(v) if v is not None else None
        policy = configs.get("cleanup.policy") or ""
        return TopicRules(num("max.message.bytes"), num("segment.bytes"), "compact" in policy.split(","))
