"""Kafka connectors: replayable source and two-phase-commit sink (placeholders for now)."""

from spark_ext.connector import NotBuiltSink, NotBuiltSource


class KafkaSource(NotBuiltSource):
    name = "kafka"


class KafkaSink(NotBuiltSink):
    name = "kafka"
