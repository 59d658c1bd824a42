"""Queue sink: ``hzsink`` connector ``jms`` (ActiveMQ Artemis over STOMP)."""

from spark_ext.connectors.jms.sink.connector import JmsSink

__all__ = ["JmsSink"]
