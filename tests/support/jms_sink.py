"""What the queue sink leaves on the real Artemis, read with the broker's management API."""

from __future__ import annotations

import json
from typing import Any

from spark_ext.connectors.jms.session import BrokerSession, ManagementError
from spark_ext.connectors.jms.sink.config import QUEUE_PREFIX
from spark_ext.connectors.jms.sink.records import TXN_HEADER


def session(services: Any) -> BrokerSession:
    return BrokerSession(services.stomp_host, int(services.stomp_port), services.stomp_user,
                         services.stomp_password, 10.0)


def staged_tokens(services: Any, sink_id: str) -> list[str]:
    """The attempts with messages in the sink's staging queue (none if it does not exist)."""
    with session(services) as s:
        try:
            listed = s.call(f"queue.{QUEUE_PREFIX}{sink_id}.staging", "listMessagesAsJSON", "")
        except ManagementError as e:
            if "AMQ229067" in str(e):  # no such queue: the sink never staged anything
                return []
            raise
    return sorted({m[TXN_HEADER] for m in json.loads(listed) if TXN_HEADER in m})


def count(services: Any, queue: str) -> int:
    with session(services) as s:
        return int(s.call(f"queue.{queue}", "countMessages", ""))
