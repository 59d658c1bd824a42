"""Kafka connectors: the replayable source and the two-phase-commit sink.

The classes load on first use (PEP 562): Spark plans a sink's micro-batches in fresh
Python processes, and a sink's planning should not pay for the source's imports."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spark_ext.connectors.kafka.sink import KafkaSink
    from spark_ext.connectors.kafka.source import KafkaSource

__all__ = ["KafkaSink", "KafkaSource"]


def __getattr__(name: str) -> Any:
    if name == "KafkaSink":
        from spark_ext.connectors.kafka.sink import KafkaSink
        return KafkaSink
    if name == "KafkaSource":
        from spark_ext.connectors.kafka.source import KafkaSource
        return KafkaSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
