"""What the queue sink leaves on the real Artemis, read with the broker's management API."""

from __future__ import annotations

from typing import Any

from spark_ext.connectors.jms.session import QueueMissingError


def staged_tokens(services: Any, sink_id: str) -> list[str]:
    """The attempts with messages in the sink's staging queue (none if it does not exist)."""
    from spark_ext.connectors.jms.sink.committer import JmsCommitter
    from spark_ext.connectors.jms.sink.config import JmsSinkConfig
    from spark_ext.guarantees import Guarantee
    from spark_ext.options import Options

    opts = {"host": services.stomp_host, "port": str(services.stomp_port), "user": services.stomp_user,
            "password": services.stomp_password, "destination": "/queue/unused", "sinkid": sink_id}
    committer = JmsCommitter(JmsSinkConfig.parse(Options(opts, "test"), Guarantee.EXACTLY_ONCE))
    try:
        return sorted(committer.staged())
    except QueueMissingError:  # the sink never staged anything
        return []
    finally:
        committer.close()
