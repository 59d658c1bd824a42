"""JMS-style acknowledging source over STOMP (placeholder for now)."""

from spark_ext.connector import NotBuiltSource


class JmsSource(NotBuiltSource):
    name = "jms"
