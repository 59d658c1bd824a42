"""The options that write a sink's key or value column in a schema registry format.

Apart from the writers (``encoding``), so a query whose columns are ``raw`` plans and
commits without loading them: the driver's planning and commit workers start at a
query's first batch, and every import there is paid before it commits.
"""

from __future__ import annotations

from spark_ext.errors import InvalidOptionError
from spark_ext.options import Option, Options
from spark_ext.schemas.registry import REGISTRY_OPTIONS

STRATEGIES = ("topic", "record", "topic_record")
FORMATS = ("raw", "avro", "protobuf", "json-schema")
KINDS = {"avro": "AVRO", "protobuf": "PROTOBUF", "json-schema": "JSON"}  # the registry's schemaType

SINK_FORMAT_OPTIONS = (
    Option("valueFormat", "`raw`: the `value` column is string or binary, sent as it is. `avro`: any "
           "column type, encoded with the writer schema in the schema registry's wire format; a row the "
           "schema refuses is a row error (dead letters where configured). `protobuf`: a struct column, "
           "encoded as the writer's message in that wire format. `json-schema`: a struct column, written "
           "as a JSON document (as Spark's `to_json` writes it) in that wire format.", default="raw"),
    Option("keyFormat", "The same for the `key` column.", default="raw"),
    Option("valueSchema", "The writer schema: Avro JSON, `.proto` text for protobuf, a JSON Schema for "
           "json-schema.",
           shown="derived from the column's type: for Avro records for structs, `[\"null\", T]` with a null "
           "default for nullable fields; for protobuf one proto3 message, fields numbered in column order; "
           "for json-schema an object of the fields, nullable ones `oneOf` null and their type"),
    Option("keySchema", "The same for the key.", shown="derived from the column's type"),
    Option("valueMessage", "With valueFormat protobuf: the writer's message, by full name (needed when "
           "`valueSchema` holds several); the derived schema's message name.", shown="`topLevelRecord`"),
    Option("keyMessage", "The same for the key.", shown="`topLevelRecord`"),
    Option("subjectNameStrategy", "The subject a schema is registered under: `topic` (`<topic>-value`, "
           "`<topic>-key`), `record` (the record's full name) or `topic_record` (`<topic>-<record name>`); "
           "`topic` and `topic_record` need option `topic`.", default="topic"),
    Option("valueSubject", "The subject, whatever the strategy.", shown="by `subjectNameStrategy`"),
    Option("keySubject", "The same for the key.", shown="by `subjectNameStrategy`"),
    Option("autoRegisterSchemas", "Register the writer schema at query start (the registry applies the "
           "subject's compatibility rule); `false`: it must already be registered under the subject.",
           default=True),
    *REGISTRY_OPTIONS,
)


def column_format(opts: Options, column: str) -> str:
    """The format option ``<column>Format`` names (``raw`` when unset), checked."""
    option = f"{column}Format"
    fmt = (opts.get_str(option.lower()) or "raw").strip().lower()
    if fmt not in FORMATS:
        raise InvalidOptionError(f"option {option!r} is {fmt!r}; expected one of {', '.join(FORMATS)}")
    return fmt
