"""Kafka connectors: the replayable source and the two-phase-commit sink."""

from spark_ext.connectors.kafka.sink import KafkaSink
from spark_ext.connectors.kafka.source import KafkaSource

__all__ = ["KafkaSink", "KafkaSource"]
