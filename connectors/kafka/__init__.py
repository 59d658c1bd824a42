"""Kafka connectors: the replayable source and the two-phase-commit sink."""

from connectors.kafka.sink import KafkaSink
from connectors.kafka.source import KafkaSource

__all__ = ["KafkaSink", "KafkaSource"]
