"""Kafka connectors: the replayable source (built) and the two-phase-commit sink (to come)."""

from connectors.kafka.source import KafkaSource
from spark_ext.connector import NotBuiltSink

__all__ = ["KafkaSink", "KafkaSource"]


class KafkaSink(NotBuiltSink):
    name = "kafka"
