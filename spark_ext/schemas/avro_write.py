"""Typed Arrow columns to Avro values in the schema registry's wire format, encoded in C.

The writer schema is the one the sink registers (or finds) in the registry: given by the
user, or derived from the column's Spark type the way the registry's own serializers
shape optional fields (``["null", T]`` with a null default, so later versions can add
and drop them under BACKWARD compatibility). ``check`` refuses, at query start, a column
the schema cannot be written from; per row, a value the schema refuses (a null where
the schema takes none, a string that is no enum symbol, a decimal too wide for its
fixed size) is reported with its row, never half-written.
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
    NullType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from spark_ext.schemas import _avro
from spark_ext.schemas.avro import SchemaError, parse
from spark_ext.schemas.encoded import Encoded, encode_column

(E_NULL, E_BOOL, E_INT, E_LONG, E_FLOAT, E_DOUBLE, E_BYTES, E_FIXED, E_ENUM, E_DEC_BYTES, E_DEC_FIXED,
 E_RECORD, E_ARRAY, E_MAP, E_MEMBERS) = range(15)


def schema_of(spark: DataType, name: str = "topLevelRecord", namespace: str = "") -> Any:
    """The Avro schema (as JSON data) a column of Spark type ``spark`` is written with."""
    if isinstance(spark, StructType):
        fields = []
        for f in spark.fields:
            t = schema_of(f.dataType, f.name, f"{namespace}.{name}" if namespace else name)
            nullable = f.nullable and t != "null"  # a union may not hold null twice
            fields.append({"name": f.name, "type": ["null", t], "default": None} if nullable
                          else {"name": f.name, "type": t})
        out: dict[str, Any] = {"type": "record", "name": name, "fields": fields}
        if namespace:
            out["namespace"] = namespace
        return out
    if isinstance(spark, ArrayType):
        items = schema_of(spark.elementType, name, namespace)
        nullable = spark.containsNull and items != "null"
        return {"type": "array", "items": ["null", items] if nullable else items}
    if isinstance(spark, MapType):
        if not isinstance(spark.keyType, StringType):
            raise SchemaError(f"{name}: Avro maps have string keys, and this map's keys are "
                              f"{spark.keyType.simpleString()}; cast them to string")
        values = schema_of(spark.valueType, name, namespace)
        nullable = spark.valueContainsNull and values != "null"
        return {"type": "map", "values": ["null", values] if nullable else values}
    simple: list[tuple[Any, Any]] = [
        (BooleanType, "boolean"), ((ByteType, ShortType, IntegerType), "int"), (LongType, "long"),
        (FloatType, "float"), (DoubleType, "double"), (StringType, "string"), (BinaryType, "bytes"),
        (NullType, "null"), (DateType, {"type": "int", "logicalType": "date"}),
        (TimestampType, {"type": "long", "logicalType": "timestamp-micros"}),
        (TimestampNTZType, {"type": "long", "logicalType": "local-timestamp-micros"}),
    ]
    for kinds, avro in simple:
        if isinstance(spark, kinds):
            return avro
    if isinstance(spark, DecimalType):
        return {"type": "bytes", "logicalType": "decimal", "precision": spark.precision, "scale": spark.scale}
    raise SchemaError(f"{name}: Spark's {spark.simpleString()} has no Avro type; cast it")


class Writer:
    """Encodes columns with one writer schema."""

    def __init__(self, schema: str | Any) -> None:
        self.text = schema if isinstance(schema, str) else json.dumps(schema)
        self.schema = parse(schema)

    def check(self, spark: DataType, what: str) -> None:
        """Driver: can a column of ``spark`` type be written with this schema? Raises
        ``SchemaError`` naming the first field that cannot."""
        empty = pa.nulls(0, small_type(arrow_type(spark)))
        _Builder(0).node(empty, self.schema, what)

    def encode(self, column: pa.Array, header: bytes, name: str = "value") -> Encoded:
        """Executor: every row of ``column`` (called ``name`` in messages) as ``header`` +
        its Avro datum. A null row is a null key or value (a tombstone), as the registry's
        serializers send it, unless the schema itself takes null."""
        if small_type(column.type) != column.type:
            column = column.cast(small_type(column.type))

        def run(part: pa.Array) -> tuple[Any, ...]:
            b = _Builder(len(part))
            b.node(part, self.schema, name)
            return _avro.encode(b.nodes, len(part), header)

        return encode_column(column, run, tombstones=not _nullable(self.schema))


def arrow_type(spark: DataType) -> pa.DataType:
    """The Arrow type Spark hands a Python data source for ``spark``."""
    from pyspark.sql.types import StructField

    from spark_ext import compat

    return compat.to_arrow_schema(StructType([StructField("c", spark)])).field("c").type


class _Builder:
    """The encoder's nodes for one Arrow array and schema, parents before children."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.nodes: list[tuple[Any, ...]] = []

    def _add(self, kind: int, param: int, nullb: int, valb: int, name: str, arr: pa.Array | None,
             offsets: Any = None, data: Any = None, symbols: list[bytes] | None = None,
             valid: Any = None) -> int:
        if arr is not None and valid is None:
            valid = arr.buffers()[0] if arr.null_count else None
        self.nodes.append((kind, param, nullb, valb, name, valid, arr.offset if arr is not None else 0,
                           offsets, data, (), symbols))
        return len(self.nodes) - 1

    def _children(self, at: int, kids: list[int]) -> None:
        row = list(self.nodes[at])
        row[9] = tuple(kids)
        self.nodes[at] = tuple(row)

    def node(self, arr: pa.Array, s: Any, name: str, nullb: int = -1, valb: int = -1) -> int:
        kind, t = s["type"], arr.type
        if kind == "union":
            branches = s["branches"]
            nb = next((i for i, b in enumerate(branches) if b["type"] == "null"), -1)
            rest = [(i, b) for i, b in enumerate(branches) if b["type"] != "null"]
            if len(rest) == 1:
                return self.node(arr, rest[0][1], name, nb, rest[0][0])
            if not rest:
                return self._add(E_NULL, 0, nb, nb, name, arr, valid=_none_valid(arr.offset + len(arr)))
            if pa.types.is_struct(t) and [f.name for f in t] == [f"member{k}" for k in range(len(rest))]:
                at = self._add(E_MEMBERS, 0, nb, -1, name, arr)
                kids = [self.node(arr.field(k), b, f"{name}.member{k}", -1, i)
                        for k, (i, b) in enumerate(rest)]
                self._children(at, kids)
                return at
            for i, b in rest:
                if _fits(t, b):
                    return self.node(arr, b, name, nb, i)
            raise SchemaError(f"{name} is {t}, which no branch of the schema's union takes")
        if not _fits(t, s):
            raise SchemaError(f"{name} is {_spark_name(t)}, and the schema writes it as {_avro_name(s)}")
        logical = s.get("logicalType")
        bufs = arr.buffers()
        if kind == "null":
            return self._add(E_NULL, 0, nullb, valb, name, arr)
        if kind == "boolean":
            return self._add(E_BOOL, 0, nullb, valb, name, arr, data=bufs[1])
        if kind in ("int", "long", "float", "double"):
            target = {"int": pa.int32(), "long": pa.int64(), "float": pa.float32(),
                      "double": pa.float64()}[kind]
            plain = arr.view(pa.int64()) if pa.types.is_timestamp(t) else \
                arr.view(pa.int32()) if pa.types.is_date32(t) else arr
            if plain.type != target:
                plain = plain.cast(target)
            code = {"int": E_INT, "long": E_LONG, "float": E_FLOAT, "double": E_DOUBLE}[kind]
            millis = kind == "long" and logical in ("timestamp-millis", "local-timestamp-millis")
            return self._add(code, 1000 if millis else 1, nullb, valb, name, plain, data=plain.buffers()[1])
        if logical == "decimal" and pa.types.is_decimal(t):
            if kind == "fixed":
                return self._add(E_DEC_FIXED, int(s["size"]), nullb, valb, name, arr, data=bufs[1])
            return self._add(E_DEC_BYTES, 0, nullb, valb, name, arr, data=bufs[1])
        if kind in ("string", "bytes", "fixed", "enum"):
            plain = arr.cast(pa.binary()) if t not in (pa.binary(), pa.string()) else arr
            pb = plain.buffers()
            data = pb[2] if pb[2] is not None else pa.py_buffer(b"")
            if kind == "enum":
                return self._add(E_ENUM, 0, nullb, valb, name, plain, pb[1], data,
                                 [sym.encode() for sym in s["symbols"]])
            code, size = (E_FIXED, int(s["size"])) if kind == "fixed" else (E_BYTES, 0)
            return self._add(code, size, nullb, valb, name, plain, pb[1], data)
        if kind == "record":
            at = self._add(E_RECORD, 0, nullb, valb, name, arr)
            have = {f.name for f in t}
            extra = sorted(have - {f["name"] for f in s["fields"]})
            if extra:
                raise SchemaError(f"{name} has field(s) {extra}, which record {s.get('name')} of the schema "
                                  "does "
                                  "not: drop them or register a schema that has them")
            kids = []
            for f in s["fields"]:
                fname = f"{name}.{f['name']}"
                if f["name"] in have:
                    kids.append(self.node(arr.field(f["name"]), f["type"], fname))
                elif _nullable(f["type"]):
                    absent = pa.nulls(len(arr), pa.null())
                    kids.append(self._absent(absent, f["type"], fname))
                else:
                    raise SchemaError(f"{fname} is in the schema and not in the column, and the schema does "
                                      "not take a null for it")
            self._children(at, kids)
            return at
        if kind == "array":
            at = self._add(E_ARRAY, 0, nullb, valb, name, arr, offsets=bufs[1])
            self._children(at, [self.node(arr.values, s["items"], f"{name}[]")])
            return at
        if kind == "map":
            at = self._add(E_MAP, 0, nullb, valb, name, arr, offsets=bufs[1])
            entries = arr.values
            keys = self.node(entries.field(0), {"type": "string"}, f"{name} key")
            values = self.node(entries.field(1), s["values"], f"{name}[]")
            self._children(at, [keys, values])
            return at
        raise SchemaError(f"{name}: the schema's {kind!r} is not an Avro type")

    def _absent(self, arr: pa.Array, s: Any, name: str) -> int:
        nb = next(i for i, b in enumerate(s["branches"]) if b["type"] == "null")
        return self._add(E_NULL, 0, nb, nb, name, arr, valid=_none_valid(arr.offset + len(arr)))


def _none_valid(n: int) -> bytes:
    return bytes((n + 7) // 8) or b"\0"


def _nullable(s: Any) -> bool:
    return s["type"] == "union" and any(b["type"] == "null" for b in s["branches"])


def _fits(t: pa.DataType, s: Any) -> bool:
    """Can Arrow type ``t`` (Spark's) be written as Avro type ``s`` without losing anything?"""
    kind, logical = s["type"], s.get("logicalType")
    if logical == "decimal":
        return (pa.types.is_decimal(t) and t.scale == int(s.get("scale", 0))
                and t.precision <= int(s["precision"]))
    if kind == "null":
        return pa.types.is_null(t)
    if kind == "boolean":
        return pa.types.is_boolean(t)
    if kind == "int":
        if logical == "date":
            return pa.types.is_date32(t)
        return t in (pa.int8(), pa.int16(), pa.int32())
    if kind == "long":
        if logical in ("timestamp-millis", "timestamp-micros"):
            return pa.types.is_timestamp(t) and t.tz is not None and t.unit == "us"
        if logical in ("local-timestamp-millis", "local-timestamp-micros"):
            return pa.types.is_timestamp(t) and t.tz is None and t.unit == "us"
        return t in (pa.int8(), pa.int16(), pa.int32(), pa.int64())
    if kind == "float":
        return t == pa.float32()
    if kind == "double":
        return t in (pa.float32(), pa.float64())
    if kind in ("string", "enum"):
        return pa.types.is_string(t) or pa.types.is_large_string(t)
    if kind in ("bytes", "fixed"):
        return pa.types.is_binary(t) or pa.types.is_large_binary(t)
    if kind == "record":
        return pa.types.is_struct(t)
    if kind == "array":
        return pa.types.is_list(t) or pa.types.is_large_list(t)
    if kind == "map":
        return pa.types.is_map(t) and pa.types.is_string(t.key_type)
    return False


def _spark_name(t: pa.DataType) -> str:
    return str(t)


def _avro_name(s: Any) -> str:
    logical = s.get("logicalType")
    if logical == "decimal":
        return f"decimal({s.get('precision')}, {s.get('scale', 0)})"
    return f"{logical} ({s['type']})" if logical else str(s["type"])


def header(schema_id: int) -> bytes:
    """The wire format's header: the magic byte and the schema id."""
    return b"\0" + int(schema_id).to_bytes(4, "big")


def small_type(t: pa.DataType) -> pa.DataType:
    """``t`` with Spark's large Arrow types (64-bit offsets) as their 32-bit forms, which
    the encoder reads."""
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_large_list(t) or pa.types.is_list(t):
        f = t.value_field
        return pa.list_(f.with_type(small_type(f.type)))
    if pa.types.is_map(t):
        return pa.map_(t.key_field.with_type(small_type(t.key_type)),
                       t.item_field.with_type(small_type(t.item_type)))
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(small_type(f.type)) for f in t])
    return t
