"""What the driver checks of the Kafka sink's input at query start, without the record
encoding's imports (NumPy, pyarrow, aiokafka): Spark plans every micro-batch's write in
fresh Python processes, and each one imports what the plan names."""

from __future__ import annotations

from spark_ext.errors import ConfigurationError

__all__ = ["CODECS", "SinkSchemaError", "check_schema"]

# Kafka's names -> the codec bits of a record batch's attributes.
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


class SinkSchemaError(ConfigurationError):
    """The DataFrame's columns do not fit Spark's Kafka sink schema."""


def check_schema(fields: dict[str, object], topic_option: str | None) -> None:
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
