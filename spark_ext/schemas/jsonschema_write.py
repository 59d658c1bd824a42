"""Arrow columns to JSON documents (``_json.c``), and the JSON Schema a column's Spark type is
written with when no schema is given.

Documents are what Spark's ``to_json`` writes for the column: a null property left out,
timestamps as RFC 3339 in UTC (``TIMESTAMP_NTZ`` without an offset), dates as
``YYYY-MM-DD``, binary as base64, decimals as exact numbers, floats in the fewest digits
that read back as the same float, maps as objects whose keys are cast to strings as Spark
casts them. With a given schema, columns are matched to its properties by
name and their types checked at query start; per row the sink checks ``required``
properties (a null there is a row error) and numbers JSON cannot hold (NaN, infinities).
Other keywords (patterns, bounds, enums) are not checked: the registry's readers validate
against the schema if they are set to.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from spark_ext.schemas import _json
from spark_ext.schemas.avro import SchemaError
from spark_ext.schemas.avro_write import arrow_type, small_type
from spark_ext.schemas.encoded import Encoded, encode_column
from spark_ext.schemas.jsonschema import resolve

# Encoder node kinds (``_json.c``: J_*) and flags.
(J_BOOL, J_INT32, J_INT64, J_FLOAT, J_DOUBLE, J_STRING, J_BASE64, J_TIMESTAMP, J_DATE, J_DECIMAL, J_OBJECT,
 J_ARRAY, J_MAP) = range(13)
J_REQUIRED = 1


def schema_of(spark: DataType, title: str = "topLevelRecord") -> dict[str, Any]:
    """A JSON Schema (draft 7) for documents of a struct column: an object whose properties are
    the fields, a nullable one as ``{"oneOf": [{"type": "null"}, T]}`` (the shape of Confluent's
    optional fields, so a later version may add or drop it), the others ``required``."""
    if not isinstance(spark, StructType):
        raise SchemaError(f"a JSON document is written from a struct column, and the column is "
                          f"{spark.simpleString()}: wrap it, e.g. struct(col) as value")
    return {"$schema": "http://json-schema.org/draft-07/schema#", "title": title, **_object(spark)}


def _object(st: StructType) -> dict[str, Any]:
    props = {f.name: ({"oneOf": [{"type": "null"}, _type(f.dataType, f.name)]} if f.nullable
                      else _type(f.dataType, f.name)) for f in st.fields}
    out: dict[str, Any] = {"type": "object", "properties": props}
    required = [f.name for f in st.fields if not f.nullable]
    if required:
        out["required"] = required
    return out


def _type(t: DataType, name: str) -> dict[str, Any]:
    if isinstance(t, StructType):
        return _object(t)
    if isinstance(t, ArrayType):
        item = _type(t.elementType, f"{name}[]")
        return {"type": "array", "items": {"oneOf": [{"type": "null"}, item]} if t.containsNull else item}
    if isinstance(t, MapType):
        value = _type(t.valueType, f"{name}[]")
        values = {"oneOf": [{"type": "null"}, value]} if t.valueContainsNull else value
        return {"type": "object", "additionalProperties": values}
    if isinstance(t, BooleanType):
        return {"type": "boolean"}
    if isinstance(t, ByteType | ShortType | IntegerType | LongType):
        return {"type": "integer"}
    if isinstance(t, FloatType | DoubleType | DecimalType):
        return {"type": "number"}
    if isinstance(t, StringType):
        return {"type": "string"}
    if isinstance(t, BinaryType):
        return {"type": "string", "contentEncoding": "base64"}
    if isinstance(t, TimestampType):
        return {"type": "string", "format": "date-time"}
    if isinstance(t, TimestampNTZType):
        return {"type": "string"}  # RFC 3339's date-time needs an offset, which a local time has not
    if isinstance(t, DateType):
        return {"type": "string", "format": "date"}
    raise SchemaError(f"field {name!r} is {t.simpleString()}, which has no JSON type here: cast it or give "
                      "option 'valueSchema'")


class JsonWriter:
    """Encodes struct columns as JSON documents of one schema."""

    def __init__(self, schema: str | dict[str, Any]) -> None:
        self.schema = json.loads(schema) if isinstance(schema, str) else schema
        if not isinstance(self.schema, dict):
            raise SchemaError("the schema is not a JSON object")

    def check(self, spark: DataType, what: str) -> None:
        """Driver: can a column of ``spark`` type be written with this schema? Raises
        ``SchemaError`` naming the first field that cannot."""
        _Builder(self.schema).node(pa.nulls(0, small_type(arrow_type(spark))), self.schema, what, b"", 0)

    def encode(self, column: pa.Array, header: bytes, name: str = "value") -> Encoded:
        """Executor: every row of ``column`` as ``header`` + its document; a null row is a null
        (a tombstone)."""
        if small_type(column.type) != column.type:
            column = column.cast(small_type(column.type))

        def run(part: pa.Array) -> tuple[Any, ...]:
            b = _Builder(self.schema)
            b.node(part, self.schema, name, b"", 0)
            return _json.encode(b.nodes, len(part), header)

        return encode_column(column, run)


def _boolean(s: Any, label: str) -> Any:
    """A boolean schema as an object: ``true`` takes anything; ``false`` nothing, which no
    column can be written as."""
    if s is True:
        return {}
    if s is False:
        raise SchemaError(f"{label}: the schema is false, which admits no value")
    return s


def _kinds(s: Any) -> set[str]:
    """The JSON types a (resolved) schema takes; every type when it names none."""
    for key in ("oneOf", "anyOf"):
        if key in s:
            return set().union(*(_kinds(b) for b in s[key]))
    kind = s.get("type")
    if kind is None:
        return {"object"} if "properties" in s else \
            {"null", "boolean", "integer", "number", "string", "array", "object"}
    return set(kind) if isinstance(kind, list) else {kind}


def _branch(s: Any, root: Any, want: str, where: str) -> Any:
    """The branch of a oneOf / anyOf that takes ``want``."""
    for key in ("oneOf", "anyOf"):
        if key in s:
            for b in s[key]:
                b = resolve(b, root, where)
                if want in _kinds(b):
                    return _branch(b, root, want, where)
    return s


class _Builder:
    """The encoder's nodes for one Arrow array and schema, parents before children."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.nodes: list[tuple[Any, ...]] = []

    def _add(self, kind: int, flags: int, key: bytes, label: str, arr: pa.Array, offsets: Any = None,
             data: Any = None, param: int = 0) -> int:
        valid = arr.buffers()[0] if arr.null_count else None
        self.nodes.append((kind, flags, key, label, valid, arr.offset, offsets, data, (), param))
        return len(self.nodes) - 1

    def _children(self, at: int, kids: list[int]) -> None:
        row = list(self.nodes[at])
        row[8] = tuple(kids)
        self.nodes[at] = tuple(row)

    def node(self, arr: pa.Array, s: Any, label: str, key: bytes, flags: int) -> int:
        s = resolve(_boolean(s, label), self.root, label)
        t = arr.type
        kinds = _kinds(s)
        if pa.types.is_struct(t):
            s = self._want(s, "object", label, t)
            at = self._add(J_OBJECT, flags, key, label, arr)
            props = s.get("properties") or {}
            required = set(s.get("required") or ())
            if s.get("additionalProperties") is False:
                extra = [f.name for f in t if f.name not in props]
                if extra:
                    raise SchemaError(f"{label} has field(s) {extra}, which the schema's object does not "
                                      "allow (additionalProperties false): drop them or write with a schema "
                                      "that has them")
            kids = []
            for i, f in enumerate(t):
                child = props.get(f.name, {})
                fkey = json.dumps(f.name).encode() + b":"
                kids.append(self.node(arr.field(i), child, f"{label}.{f.name}", fkey,
                                      J_REQUIRED if f.name in required else 0))
            self._children(at, kids)
            return at
        if pa.types.is_list(t):
            s = self._want(s, "array", label, t)
            at = self._add(J_ARRAY, flags, key, label, arr, offsets=arr.buffers()[1])
            items = resolve(_boolean(s.get("items", True), label), self.root, label)
            item_flags = 0 if "null" in _kinds(items) else J_REQUIRED
            self._children(at, [self.node(arr.values, items, f"{label}[]", b"", item_flags)])
            return at
        if pa.types.is_map(t):
            s = self._want(s, "object", label, t)
            at = self._add(J_MAP, flags, key, label, arr, offsets=arr.buffers()[1])
            entries = arr.values
            value_schema = _boolean(s.get("additionalProperties", True), label)
            vflags = 0 if "null" in _kinds(resolve(value_schema, self.root, label)) else J_REQUIRED
            # a key of any type is written as Spark casts it to a string (the encoder quotes it)
            knode = self.node(entries.field(0), {}, f"{label} key", b"", J_REQUIRED)
            self._children(at, [knode, self.node(entries.field(1), value_schema, f"{label}[]", b"", vflags)])
            return at
        if pa.types.is_boolean(t):
            self._want(s, "boolean", label, t)
            return self._add(J_BOOL, flags, key, label, arr, data=arr.buffers()[1])
        if pa.types.is_integer(t):
            if "integer" not in kinds:
                self._want(s, "number", label, t)
            wide = pa.int32() if t.bit_width <= 32 and pa.types.is_signed_integer(t) else pa.int64()
            plain = arr if t == wide else arr.cast(wide)
            kind = J_INT32 if plain.type == pa.int32() else J_INT64
            return self._add(kind, flags, key, label, plain, data=plain.buffers()[1])
        if pa.types.is_floating(t) or pa.types.is_decimal(t):
            self._want(s, "number", label, t)
            if pa.types.is_decimal(t):
                return self._add(J_DECIMAL, flags, key, label, arr, data=arr.buffers()[1], param=t.scale)
            kind = J_FLOAT if t == pa.float32() else J_DOUBLE
            return self._add(kind, flags, key, label, arr, data=arr.buffers()[1])
        if pa.types.is_timestamp(t) or pa.types.is_date32(t):
            self._want(s, "string", label, t)
            plain = arr.view(pa.int64() if pa.types.is_timestamp(t) else pa.int32())
            if pa.types.is_timestamp(t) and t.unit != "us":
                raise SchemaError(f"{label} is {t}; Spark's timestamps are microseconds")
            kind = J_TIMESTAMP if pa.types.is_timestamp(t) else J_DATE
            local = int(pa.types.is_timestamp(t) and t.tz is None)  # Spark's TIMESTAMP_NTZ: no Z
            return self._add(kind, flags, key, label, plain, data=plain.buffers()[1], param=local)
        if pa.types.is_string(t) or pa.types.is_binary(t):
            self._want(s, "string", label, t)
            bufs = arr.buffers()
            kind = J_STRING if pa.types.is_string(t) else J_BASE64
            return self._add(kind, flags, key, label, arr, bufs[1], bufs[2] or pa.py_buffer(b""))
        raise SchemaError(f"{label} is {t}, which has no JSON type here")

    def _want(self, s: Any, kind: str, label: str, t: pa.DataType) -> Any:
        kinds = _kinds(s)
        if kind not in kinds and not (kind == "integer" and "number" in kinds):
            raise SchemaError(f"{label} is {t}, and the schema writes it as {' or '.join(sorted(kinds))}")
        return resolve(_branch(s, self.root, kind, label), self.root, label)
