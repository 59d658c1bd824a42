"""Kafka connectors: the replayable source and the two-phase-commit sink, each imported
when first named (``spark_ext.registry.lazy_exports``)."""

from typing import TYPE_CHECKING

from spark_ext.registry import lazy_exports

if TYPE_CHECKING:
    from spark_ext.connectors.kafka.sink import KafkaSink
    from spark_ext.connectors.kafka.source import KafkaSource

__all__ = ["KafkaSink", "KafkaSource"]

__getattr__ = lazy_exports(__name__, {"KafkaSink": "sink", "KafkaSource": "source"})
