"""ActiveMQ Artemis over STOMP: the acknowledging queue source and the queue sink (``jms``).

The classes load on first use (PEP 562): Spark plans a sink's micro-batches in fresh
Python processes, and a sink's planning should not pay for the source's imports."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spark_ext.connectors.jms.sink import JmsSink
    from spark_ext.connectors.jms.source import JmsSource

__all__ = ["JmsSink", "JmsSource"]


def __getattr__(name: str) -> Any:
    if name == "JmsSink":
        from spark_ext.connectors.jms.sink import JmsSink
        return JmsSink
    if name == "JmsSource":
        from spark_ext.connectors.jms.source import JmsSource
        return JmsSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
