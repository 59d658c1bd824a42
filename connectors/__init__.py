"""Connector registry: ``option("connector", ...)`` -> the class that implements it.

Values are ``module:Class`` strings imported on first use, so a query that reads Kafka
never imports the STOMP or database clients.
"""

from __future__ import annotations

SOURCES: dict[str, str] = {
    "kafka": "connectors.kafka:KafkaSource",
    "jms": "connectors.jms:JmsSource",
}

SINKS: dict[str, str] = {
    "kafka": "connectors.kafka:KafkaSink",
    "jdbc": "connectors.jdbc:JdbcSink",
}
