"""ActiveMQ Artemis over STOMP: the acknowledging queue source and the queue sink (``jms``),
each imported when first named (``spark_ext.registry.lazy_exports``)."""

from typing import TYPE_CHECKING

from spark_ext.registry import lazy_exports

if TYPE_CHECKING:
    from spark_ext.connectors.jms.sink import JmsSink
    from spark_ext.connectors.jms.source import JmsSource

__all__ = ["JmsSink", "JmsSource"]

__getattr__ = lazy_exports(__name__, {"JmsSink": "sink", "JmsSource": "source"})
