"""Arrow columns to protobuf messages (``_proto.c``'s encoder), and the ``.proto`` a column's
Spark type is written with when no schema is given.

The writer's message is compiled from ``.proto`` text (given, or derived here) with protoc;
columns are matched to its fields by name, and every column must have a field. The bytes
are protobuf's own serialization (fields in number order, packed repeated scalars, default
values of fields without presence left out), so any protobuf reader reads them.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DayTimeIntervalType,
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

from spark_ext.schemas import _proto
from spark_ext.schemas.avro import SchemaError
from spark_ext.schemas.avro_write import arrow_type, small_type
from spark_ext.schemas.encoded import Encoded, encode_column
from spark_ext.schemas.protobuf import (
    INT32_TYPES,
    INT64_TYPES,
    T_BOOL,
    T_BYTES,
    T_DOUBLE,
    T_ENUM,
    T_FIXED32,
    T_FIXED64,
    T_FLOAT,
    T_INT32,
    T_INT64,
    T_MESSAGE,
    T_SFIXED32,
    T_SFIXED64,
    T_SINT32,
    T_SINT64,
    T_STRING,
    T_UINT32,
    T_UINT64,
    TIME_TYPES,
    repeated,
)

# Encoder node kinds (``_proto.c``: W_*) and flags.
(W_VARINT32, W_UVARINT32, W_VARINT64, W_SINT32, W_SINT64, W_FIXED32, W_FIXED64, W_FLOAT, W_DOUBLE, W_BOOL,
 W_BYTES, W_ENUM, W_MESSAGE, W_TIME, W_LIST, W_MAP) = range(16)
W_IMPLICIT, W_PACKED, W_DURATION, W_REQUIRED = 1, 2, 4, 8

_KIND = {T_INT32: W_VARINT32, T_UINT32: W_UVARINT32, T_INT64: W_VARINT64, T_UINT64: W_VARINT64,
         T_SINT32: W_SINT32, T_SINT64: W_SINT64, T_FIXED32: W_FIXED32, T_SFIXED32: W_FIXED32,
         T_FIXED64: W_FIXED64, T_SFIXED64: W_FIXED64, T_FLOAT: W_FLOAT, T_DOUBLE: W_DOUBLE, T_BOOL: W_BOOL,
         T_STRING: W_BYTES, T_BYTES: W_BYTES, T_ENUM: W_ENUM}
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TIMESTAMP = "google/protobuf/timestamp.proto"
_DURATION = "google/protobuf/duration.proto"


def schema_of(spark: DataType, message: str = "topLevelRecord") -> str:
    """proto3 text for a column of Spark type ``spark`` (a struct): one message, fields numbered
    in column order, every singular scalar ``optional`` (so a null reads back null and a zero
    zero, where a field without presence would read back null for both), structs as nested
    messages, arrays as repeated fields, maps as maps, timestamps as Timestamp, day-time
    intervals as Duration."""
    if not isinstance(spark, StructType):
        raise SchemaError(f"a protobuf message is written from a struct column, and the column is "
                          f"{spark.simpleString()}: wrap it, e.g. struct(col) as value")
    imports: set[str] = set()
    body = _message(spark, message, imports, "")
    head = ['syntax = "proto3";', *(f'import "{i}";' for i in sorted(imports))]
    return "\n".join(head) + "\n\n" + body


def _message(st: StructType, name: str, imports: set[str], indent: str) -> str:
    if not _IDENT.fullmatch(name):
        raise SchemaError(f"{name!r} is not a protobuf message name")
    lines = [f"{indent}message {name} {{"]
    nested: list[str] = []
    taken = {f.name for f in st.fields}  # a message's fields and nested messages share one scope
    json_names: dict[str, str] = {}
    for f in st.fields:
        other = json_names.setdefault(_json_name(f.name), f.name)
        if other != f.name:
            raise SchemaError(f"fields {other!r} and {f.name!r} have one JSON name, {_json_name(f.name)!r}, "
                              "which proto3 refuses: rename one")
    for number, f in enumerate(st.fields, start=1):
        if not _IDENT.fullmatch(f.name):
            raise SchemaError(f"column field {f.name!r} is not a protobuf field name (letters, digits and _, "
                              "not first a digit): rename it")
        t = f.dataType
        label = ""
        if isinstance(t, ArrayType):
            if isinstance(t.elementType, ArrayType | MapType):
                raise SchemaError(f"field {f.name!r} is an array of {t.elementType.simpleString()}, which "
                                  "protobuf cannot repeat: wrap the inner one in a struct")
            label, t = "repeated ", t.elementType
        elif not isinstance(t, StructType | MapType | TimestampType | TimestampNTZType | DayTimeIntervalType):
            label = "optional "  # messages have presence already
        if isinstance(t, MapType):
            key = _scalar(t.keyType, f"{f.name} key", imports)
            if key not in ("string", "int32", "int64", "bool"):
                raise SchemaError(f"map {f.name!r} has {t.keyType.simpleString()} keys; protobuf map keys "
                                  "are strings, integers or booleans")
            value = _type_name(t.valueType, f.name, imports, nested, taken, indent)
            lines.append(f"{indent}  map<{key}, {value}> {f.name} = {number};")
            continue
        lines.append(f"{indent}  {label}{_type_name(t, f.name, imports, nested, taken, indent)} {f.name} = "
                     f"{number};")
    return "\n".join([lines[0], *nested, *lines[1:], f"{indent}}}"]) + "\n"


def _json_name(name: str) -> str:
    """protoc's default JSON name of a field: underscores dropped, the next letter capitalized."""
    out, upper = [], False
    for c in name:
        if c == "_":
            upper = True
        else:
            out.append(c.upper() if upper else c)
            upper = False
    return "".join(out)


def _type_name(t: DataType, field: str, imports: set[str], nested: list[str], taken: set[str],
               indent: str) -> str:
    if isinstance(t, StructType):
        name = "".join(p[:1].upper() + p[1:] for p in field.split("_") if p)
        if not _IDENT.fullmatch(name):  # _1, as tuples name their fields
            name = f"M{name}"
        while name in taken:
            name += "_"
        taken.add(name)
        nested.append(_message(t, name, imports, indent + "  ").rstrip("\n"))
        return name
    if isinstance(t, ArrayType | MapType):
        raise SchemaError(f"field {field!r} holds {t.simpleString()} inside a map or array, which protobuf "
                          "cannot: wrap it in a struct")
    return _scalar(t, field, imports)


def _scalar(t: DataType, field: str, imports: set[str]) -> str:
    if isinstance(t, BooleanType):
        return "bool"
    if isinstance(t, ByteType | ShortType | IntegerType):
        return "int32"
    if isinstance(t, LongType):
        return "int64"
    if isinstance(t, FloatType):
        return "float"
    if isinstance(t, DoubleType):
        return "double"
    if isinstance(t, StringType):
        return "string"
    if isinstance(t, BinaryType):
        return "bytes"
    if isinstance(t, TimestampType | TimestampNTZType):
        imports.add(_TIMESTAMP)
        return "google.protobuf.Timestamp"
    if isinstance(t, DayTimeIntervalType):
        imports.add(_DURATION)
        return "google.protobuf.Duration"
    raise SchemaError(f"field {field!r} is {t.simpleString()}, which has no protobuf type here: cast it (a "
                      "decimal to string, a date to timestamp) or give option 'valueSchema'")


class ProtoWriter:
    """Encodes struct columns as one message (a ``Descriptor``)."""

    def __init__(self, desc: Any) -> None:
        self.desc = desc

    def check(self, spark: DataType, what: str) -> None:
        """Driver: can a column of ``spark`` type be written as this message? Raises
        ``SchemaError`` naming the first field that cannot."""
        empty = pa.nulls(0, small_type(arrow_type(spark)))
        _Builder().message(empty, self.desc, what, 1)

    def encode(self, column: pa.Array, header: bytes, name: str = "value") -> Encoded:
        """Executor: every row of ``column`` as ``header`` + its message; a null row is a null
        (a tombstone)."""
        if small_type(column.type) != column.type:
            column = column.cast(small_type(column.type))

        def run(part: pa.Array) -> tuple[Any, ...]:
            b = _Builder()
            b.message(part, self.desc, name, 1)
            return _proto.encode(b.nodes, len(part), header)

        return encode_column(column, run)


class _Builder:
    """The encoder's nodes for one Arrow array and message, parents before children."""

    def __init__(self) -> None:
        self.nodes: list[tuple[Any, ...]] = []

    def _add(self, kind: int, number: int, flags: int, name: str, arr: pa.Array, offsets: Any = None,
             data: Any = None, en: Any = None) -> int:
        valid = arr.buffers()[0] if arr.null_count else None
        self.nodes.append((kind, number, flags, name, valid, arr.offset, offsets, data, (), en, -1))
        return len(self.nodes) - 1

    def _oneof(self, at: int, group: int) -> None:
        row = list(self.nodes[at])
        row[10] = group
        self.nodes[at] = tuple(row)

    def _children(self, at: int, kids: list[int]) -> None:
        row = list(self.nodes[at])
        row[8] = tuple(kids)
        self.nodes[at] = tuple(row)

    def message(self, arr: pa.Array, desc: Any, name: str, number: int, flags: int = 0) -> int:
        t = arr.type
        if not pa.types.is_struct(t):
            raise SchemaError(f"{name} is {t}, and the schema writes it as message {desc.full_name}")
        at = self._add(W_MESSAGE, number, flags, name, arr)
        fields = {f.name: f for f in desc.fields}
        extra = [c.name for c in t if c.name not in fields]
        if extra:
            raise SchemaError(f"{name} has field(s) {extra}, which message {desc.full_name} has not: drop "
                              "them or write with a schema that has them")
        cols = sorted(((fields[c.name], i) for i, c in enumerate(t)), key=lambda p: p[0].number)
        oneofs = {o.full_name: k for k, o in enumerate(desc.oneofs)}
        kids = []
        for f, i in cols:
            kid = self.field(arr.field(i), f, f"{name}.{f.name}")
            if f.containing_oneof is not None:
                self._oneof(kid, oneofs[f.containing_oneof.full_name])
            kids.append(kid)
        self._children(at, kids)
        return at

    def field(self, arr: pa.Array, f: Any, name: str) -> int:
        t = arr.type
        if repeated(f) and f.type == T_MESSAGE and f.message_type.GetOptions().map_entry:
            if not pa.types.is_map(t):
                raise SchemaError(f"{name} is {t}, and the schema writes it as a map")
            at = self._add(W_MAP, f.number, 0, name, arr, offsets=arr.buffers()[1])
            entries = arr.values
            kf, vf = f.message_type.fields_by_number[1], f.message_type.fields_by_number[2]
            key = self.value(entries.field(0), kf, f"{name} key", 0)
            value = self.value(entries.field(1), vf, f"{name}[]", 0)
            self._children(at, [key, value])
            return at
        if repeated(f):
            if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
                raise SchemaError(f"{name} is {t}, and the schema writes it as a repeated field")
            scalar = f.type not in (T_STRING, T_BYTES, T_MESSAGE)
            packed = scalar and getattr(f, "is_packed", True)  # proto3's default; proto2's and [packed=false]
            at = self._add(W_LIST, f.number, W_PACKED if packed else 0, name, arr, offsets=arr.buffers()[1])
            self._children(at, [self.value(arr.values, f, f"{name}[]", 0)])
            return at
        required = W_REQUIRED if getattr(f, "is_required", False) else 0
        return self.value(arr, f, name, (0 if f.has_presence else W_IMPLICIT) | required)

    def value(self, arr: pa.Array, f: Any, name: str, flags: int) -> int:
        t = arr.type
        if f.type == T_MESSAGE:
            full = f.message_type.full_name
            if full in TIME_TYPES:
                want = pa.types.is_timestamp(t) if full.endswith("Timestamp") else pa.types.is_duration(t)
                if not want:
                    raise SchemaError(f"{name} is {t}, and the schema writes it as {full}")
                plain = arr.view(pa.int64())
                duration = W_DURATION if full.endswith("Duration") else 0
                return self._add(W_TIME, f.number, duration, name, plain, data=plain.buffers()[1])
            return self.message(arr, f.message_type, name, f.number, flags)
        kind = _KIND.get(f.type)
        if kind is None:
            raise SchemaError(f"{name}: the schema's field type {f.type} is not one this sink writes")
        if f.type in (T_STRING, T_BYTES, T_ENUM):
            if not (pa.types.is_string(t) or (pa.types.is_binary(t) and f.type == T_BYTES)):
                as_ = "bytes" if f.type == T_BYTES else "a string" if f.type == T_STRING else "an enum"
                raise SchemaError(f"{name} is {t}, and the schema writes it as {as_}")
            bufs = arr.buffers()
            data = bufs[2] if bufs[2] is not None else pa.py_buffer(b"")
            en = None
            if f.type == T_ENUM:
                pairs = sorted((v.name.encode(), v.number) for v in f.enum_type.values)
                en = (np.array([n for _, n in pairs], dtype=np.int32).tobytes(), [s for s, _ in pairs])
            return self._add(kind, f.number, flags, name, arr, bufs[1], data, en)
        if f.type == T_BOOL:
            if not pa.types.is_boolean(t):
                raise SchemaError(f"{name} is {t}, and the schema writes it as bool")
            return self._add(kind, f.number, flags, name, arr, data=arr.buffers()[1])
        target = (pa.int32() if f.type in INT32_TYPES else pa.int64() if f.type in INT64_TYPES else
                  pa.float32() if f.type == T_FLOAT else pa.float64())
        same = pa.types.is_integer(t) == pa.types.is_integer(target) and \
            pa.types.is_floating(t) == pa.types.is_floating(target)
        numeric = pa.types.is_integer(t) or pa.types.is_floating(t)
        fits = (numeric and same and t.bit_width <= target.bit_width) or \
            (pa.types.is_integer(t) and f.type == T_DOUBLE and t.bit_width <= 32)
        if not fits:
            raise SchemaError(f"{name} is {t}, and the schema writes it as {_name(f.type)}")
        plain = arr.cast(target) if t != target else arr
        return self._add(kind, f.number, flags, name, plain, data=plain.buffers()[1])


def _name(t: int) -> str:
    return {T_INT32: "int32", T_UINT32: "uint32", T_SINT32: "sint32", T_FIXED32: "fixed32",
            T_SFIXED32: "sfixed32", T_INT64: "int64", T_UINT64: "uint64", T_SINT64: "sint64",
            T_FIXED64: "fixed64", T_SFIXED64: "sfixed64", T_FLOAT: "float", T_DOUBLE: "double"}.get(t, str(t))


def message_header(schema_id: int, path: tuple[int, ...]) -> bytes:
    """The wire format's header for a message at ``path`` in its file: magic byte, schema id,
    message indexes (a single 0 for the first message, as Confluent's serializers write it)."""
    head = b"\0" + int(schema_id).to_bytes(4, "big")
    if path == (0,):
        return head + b"\0"
    return head + _zigzag(len(path)) + b"".join(_zigzag(i) for i in path)


def _zigzag(v: int) -> bytes:
    z = (v << 1) ^ (v >> 63)
    out = bytearray()
    while True:
        b = z & 0x7F
        z >>= 7
        if z:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def path_of(desc: Any) -> tuple[int, ...]:
    """A message's indexes in its file: top-level position, then nested positions."""
    path: list[int] = []
    d = desc
    while d.containing_type is not None:
        path.append(d.containing_type.nested_types.index(d))
        d = d.containing_type
    path.append(list(d.file.message_types_by_name.values()).index(d))
    return tuple(reversed(path))
