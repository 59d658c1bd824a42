"""Acknowledging queue source: ``hzsource`` connector ``jms`` (ActiveMQ Artemis over STOMP)."""

from spark_ext.connectors.jms.source import JmsSource

__all__ = ["JmsSource"]
