"""ActiveMQ Artemis over STOMP: the acknowledging queue source and the queue sink (``jms``)."""

from spark_ext.connectors.jms.sink import JmsSink
from spark_ext.connectors.jms.source import JmsSource

__all__ = ["JmsSink", "JmsSource"]
