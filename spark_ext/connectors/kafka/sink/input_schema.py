"""The DataFrame columns the Kafka sink takes: those of Spark's built-in Kafka sink.
Driver, at query start."""

from __future__ import annotations

from typing import Any

from spark_ext.errors import ConfigurationError


class SinkSchemaError(ConfigurationError):
    """The DataFrame's columns do not fit Spark's Kafka sink schema."""


def check_schema(fields: dict[str, Any], topic_option: str | None) -> None:
    """Driver, at query start: the input columns must be those of Spark's Kafka sink."""
    if "value" not in fields:
        raise SinkSchemaError(
            "the Kafka sink needs a 'value' column (string or binary); "
            f"the DataFrame has {sorted(fields)}. Select or alias one, e.g. to_json(struct(*)) AS value"
        )
    kinds = {
        "value": {"string", "binary"}, "key": {"string", "binary"}, "topic": {"string"},
        "partition": {"int"}, "headers": {"array<struct<key:string,value:binary>>"},
    }
    for name, ok in kinds.items():
        if name in fields and str(fields[name]) not in ok:
            raise SinkSchemaError(
                f"column {name!r} has type {fields[name]}; the Kafka sink takes {' or '.join(sorted(ok))}. "
                f"Cast it, e.g. CAST({name} AS {sorted(ok)[0]})"
            )
    if "topic" not in fields and not topic_option:
        raise SinkSchemaError("no topic: set option 'topic' or add a string column 'topic'")
