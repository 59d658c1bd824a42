"""A sink's key or value column written in the schema registry's wire format.

On the driver, at query start: the writer schema (given, or derived from the column's
Spark type), the subject (by Kafka's usual naming strategies), and its id, registered
when ``autoRegisterSchemas`` is on (the registry then applies the subject's compatibility
rule) or looked up when it is off. Executors encode with that id; they never register.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
from pyspark.sql.types import DataType

from spark_ext.errors import InvalidOptionError
from spark_ext.options import Options
from spark_ext.schemas import jsonschema_write, protobuf, protobuf_write
from spark_ext.schemas.avro import PRIMITIVES, SchemaError
from spark_ext.schemas.avro_write import Writer, header, schema_of
from spark_ext.schemas.encoded import Encoded
from spark_ext.schemas.protobuf_write import message_header
from spark_ext.schemas.registry import RegistryConfig, RegistryError, client
from spark_ext.schemas.sink_options import KINDS, STRATEGIES, column_format


@dataclass(frozen=True)
class SinkFormat:
    """How a sink writes one column: the writer schema and, once ``registered`` at query
    start, its id (-1 before: the commit step, which plans without preparing, never asks
    the registry)."""

    column: str
    format: str
    subject: str
    schema: str
    registry: RegistryConfig
    auto_register: bool
    schema_id: int = -1
    message: str = ""  # protobuf: the writer's message, by full name
    descriptor: bytes = b""  # protobuf: the compiled file (executors need no protoc)

    def registered(self) -> SinkFormat:
        """Driver, preparing a batch: the schema registered (or found) under the subject."""
        if self.schema_id >= 0:
            return self
        kind = KINDS[self.format]
        schema_id = _registered(self.registry, self.subject, self.schema, kind, self.auto_register)
        return replace(self, schema_id=schema_id)

    @staticmethod
    def parse(opts: Options, column: str, spark: DataType | None, topic: str | None) -> SinkFormat | None:
        """Driver, at query start: None for ``raw``; else the schema, registered or found."""
        option = f"{column}Format"
        fmt = column_format(opts, column)
        if fmt == "raw":
            return None
        if spark is None:
            raise InvalidOptionError(f"option {option}={fmt}, and the DataFrame has no {column!r} column")
        registry = RegistryConfig.parse(opts, f"option {option}={fmt}")
        given = opts.get_str(f"{column}schema")
        if fmt == "protobuf":
            return _protobuf(opts, column, spark, topic, registry, given)
        if fmt == "json-schema":
            return _json_schema(opts, column, spark, topic, registry, given)
        if opts.get_str(f"{column}message") is not None:
            raise InvalidOptionError(f"option '{column}Message' applies to {option}=protobuf; drop it")
        try:
            schema: Any = schema_of(spark) if given is None else \
                given.strip() if given.strip() in PRIMITIVES else json.loads(given)
            text = json.dumps(schema)
            writer = Writer(text)
            writer.check(spark, column)
        except json.JSONDecodeError as e:
            raise InvalidOptionError(f"option '{column}Schema' is not JSON: {e}") from None
        except SchemaError as e:
            raise InvalidOptionError(f"option {option}=avro: {e}") from None
        subject = _subject(opts, column, writer.schema, topic)
        auto = opts.get_bool("autoregisterschemas", True)
        return SinkFormat(column, fmt, subject, text, registry, auto)

    def encode(self, col: pa.Array) -> Encoded:
        """Executor: the column as the wire format's values; refused rows come out null."""
        assert self.schema_id >= 0, "encoding before the schema was registered"
        if self.format == "protobuf":
            writer, path = _proto_writer(self.descriptor, self.message)
            return writer.encode(col, message_header(self.schema_id, path), self.column)
        return _writer(self.format, self.schema).encode(col, header(self.schema_id), self.column)


def _json_schema(opts: Options, column: str, spark: DataType, topic: str | None, registry: RegistryConfig,
                 given: str | None) -> SinkFormat:
    option = f"{column}Format"
    if opts.get_str(f"{column}message") is not None:
        raise InvalidOptionError(f"option '{column}Message' applies to {option}=protobuf; drop it")
    try:
        schema = jsonschema_write.schema_of(spark) if given is None else json.loads(given)
        jsonschema_write.JsonWriter(schema).check(spark, column)
    except json.JSONDecodeError as e:
        raise InvalidOptionError(f"option '{column}Schema' is not JSON: {e}") from None
    except SchemaError as e:
        raise InvalidOptionError(f"option {option}=json-schema: {e}") from None
    title = schema.get("title")
    subject = _subject(opts, column, {"type": "record" if title else "object", "name": title}, topic)
    auto = opts.get_bool("autoregisterschemas", True)
    return SinkFormat(column, "json-schema", subject, json.dumps(schema), registry, auto)


def _protobuf(opts: Options, column: str, spark: DataType, topic: str | None, registry: RegistryConfig,
              given: str | None) -> SinkFormat:
    option = f"{column}Format"
    protobuf.installed(f"option {option}=protobuf")
    message = opts.get_str(f"{column}message")
    try:
        text = protobuf_write.schema_of(spark, message or "topLevelRecord") if given is None else given
        fdp = protobuf.file_descriptor(text, f"{column}.proto")
        names = protobuf.message_names(fdp)
        if message is None:
            if len(names) != 1:
                raise SchemaError(f"option '{column}Schema' holds messages {', '.join(names)}: set option "
                                  f"'{column}Message' to the one to write")
            message = names[0]
        elif given is None:
            message = names[0]
        pool = protobuf.pool_of([fdp])
        try:
            desc = pool.FindMessageTypeByName(message)
        except KeyError:
            raise SchemaError(f"option '{column}Message' is {message!r}, which the schema does not hold; it "
                              f"holds {', '.join(names)} (full names, with the package)") from None
        protobuf_write.ProtoWriter(desc).check(spark, column)
    except SchemaError as e:
        raise InvalidOptionError(f"option {option}=protobuf: {e}") from None
    subject = _subject(opts, column, {"type": "record", "name": message}, topic)
    auto = opts.get_bool("autoregisterschemas", True)
    return SinkFormat(column, "protobuf", subject, text, registry, auto, message=message,
                      descriptor=fdp.SerializeToString())


def _subject(opts: Options, column: str, schema: Any, topic: str | None) -> str:
    explicit = opts.get_str(f"{column}subject")
    if explicit is not None:
        return explicit
    strategy = (opts.get_str("subjectnamestrategy") or "topic").strip().lower()
    if strategy not in STRATEGIES:
        raise InvalidOptionError(f"option 'subjectNameStrategy' is {strategy!r}; expected "
                                 f"{', '.join(STRATEGIES)}")
    name = schema.get("name") if schema["type"] == "record" else None
    if strategy != "topic" and name is None:
        raise InvalidOptionError(f"subjectNameStrategy {strategy} names the subject after the {column}'s "
                                 "record, "
                                 f"and its schema is a {schema['type']}: use strategy topic or option "
                                 f"'{column}Subject'")
    if strategy == "record":
        return str(name)
    if topic is None:
        raise InvalidOptionError(f"subjectNameStrategy {strategy} names the subject after the topic, and "
                                 "rows name their topics in a column: set option 'topic', strategy "
                                 f"record, or option '{column}Subject'")
    return f"{topic}-{column}" if strategy == "topic" else f"{topic}-{name}"


def _registered(registry: RegistryConfig, subject: str, text: str, kind: str, auto: bool) -> int:
    from confluent_kafka.schema_registry import Schema
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    c = client(registry)
    try:
        if auto:
            return int(c.register_schema(subject, Schema(text, kind)))
        return int(c.lookup_schema(subject, Schema(text, kind)).schema_id)
    except SchemaRegistryError as e:
        if e.http_status_code == 409:
            raise InvalidOptionError(
                f"the schema registry refused the writer schema for subject {subject!r}: it is not "
                f"compatible with the subject's versions under its compatibility rule ({e.error_message}). "
                "Write columns "
                "a reader of the subject can read (add fields with defaults, keep the others' types), or "
                "register a new subject (option 'valueSubject')") from None
        if e.http_status_code == 404 and not auto:
            raise InvalidOptionError(
                f"the writer schema is not registered under subject {subject!r}, and autoRegisterSchemas is "
                "false: register it (the schema is the column's, printed by spark_ext.schemas.avro_write."
                "schema_of), or turn autoRegisterSchemas on") from None
        raise RegistryError(f"the schema registry at {registry.url} refused subject {subject!r}: HTTP "
                            f"{e.http_status_code} ({e.error_message})") from None
    except Exception as e:  # noqa: BLE001 - connection errors come as httpx's
        raise RegistryError(f"the schema registry at {registry.url} did not answer for subject {subject!r}: "
                            f"{type(e).__name__}: {e}") from None


_writers: dict[tuple[str, str], Writer | jsonschema_write.JsonWriter] = {}
_proto_writers: dict[tuple[bytes, str], tuple[protobuf_write.ProtoWriter, tuple[int, ...]]] = {}
_lock = threading.Lock()


def _proto_writer(descriptor: bytes, message: str) -> tuple[protobuf_write.ProtoWriter, tuple[int, ...]]:
    """This process's writer of ``message`` and the message's indexes in its file."""
    from google.protobuf import descriptor_pb2

    with _lock:
        got = _proto_writers.get((descriptor, message))
        if got is None:
            fdp = descriptor_pb2.FileDescriptorProto.FromString(descriptor)
            desc = protobuf.pool_of([fdp]).FindMessageTypeByName(message)
            got = _proto_writers[(descriptor, message)] = (protobuf_write.ProtoWriter(desc),
                                                            protobuf_write.path_of(desc))
        return got


def _writer(fmt: str, schema: str) -> Writer | jsonschema_write.JsonWriter:
    with _lock:
        w = _writers.get((fmt, schema))
        if w is None:
            w = _writers[(fmt, schema)] = jsonschema_write.JsonWriter(schema) if fmt == "json-schema" else \
                Writer(schema)
        return w
