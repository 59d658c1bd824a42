"""Acknowledging queue source: ``hzsource`` connector ``jms`` (ActiveMQ Artemis over STOMP)."""

from connectors.jms.source import JmsSource

__all__ = ["JmsSource"]
