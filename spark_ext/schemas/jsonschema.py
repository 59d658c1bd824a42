"""JSON Schema values to typed Arrow columns, parsed by Arrow's JSON reader (C++).

The reader schema's object properties are the column's struct fields, every one nullable
(a JSON document may leave any out, as Spark's ``from_json`` reads them): ``integer`` as
long, ``number`` as double, ``string``, ``boolean``, arrays of their items, nested objects
as structs, ``["null", T]`` and ``oneOf``/``anyOf`` of null and one type as ``T``, local
``$ref``s followed. A writer's documents carry their own field names, so versions that
add or drop properties read into the reader's columns: a property the reader lacks is
ignored, one the writer lacks is null. A document of the wrong shape (a string where the
reader has a number) is reported by row.
"""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.json as pj
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from spark_ext.schemas.avro import SchemaError

_SIMPLE: dict[str, tuple[DataType, pa.DataType]] = {
    "integer": (LongType(), pa.int64()), "number": (DoubleType(), pa.float64()),
    "string": (StringType(), pa.string()), "boolean": (BooleanType(), pa.bool_()),
}


def spark_type(schema: str | Any) -> DataType:
    """The Spark type of documents of ``schema`` (JSON text or parsed)."""
    doc = json.loads(schema) if isinstance(schema, str) else schema
    return _type(doc, doc, "the schema", ())


def resolve(s: Any, root: Any, where: str) -> Any:
    ref = s.get("$ref") if isinstance(s, dict) else None
    if ref is None:
        return s
    if not ref.startswith("#/"):
        raise SchemaError(f"{where}: $ref {ref!r} points outside the schema; only local references are read")
    node = root
    for part in ref[2:].split("/"):
        if not isinstance(node, dict) or part not in node:
            raise SchemaError(f"{where}: $ref {ref!r} names nothing in the schema")
        node = node[part]
    return node


def _type(s: Any, root: Any, where: str, seen: tuple[str, ...]) -> DataType:
    if isinstance(s, dict) and "$ref" in s:
        if s["$ref"] in seen:
            raise SchemaError(f"{where}: $ref {s['$ref']!r} contains itself; Spark's columns cannot hold a "
                              "recursive type")
        return _type(resolve(s, root, where), root, where, (*seen, s["$ref"]))
    if not isinstance(s, dict):
        raise SchemaError(f"{where}: {s!r} is not a JSON Schema")
    for key in ("oneOf", "anyOf"):
        if key in s:
            rest = [b for b in s[key] if resolve(b, root, where).get("type") != "null"]
            if len(rest) != 1:
                raise SchemaError(f"{where}: {key} of several types has no Spark column type; give the "
                                  "property one type (or null and one type)")
            return _type(rest[0], root, where, seen)
    kind = s.get("type")
    if isinstance(kind, list):
        rest = [k for k in kind if k != "null"]
        if len(rest) != 1:
            raise SchemaError(f"{where}: type {kind} has no Spark column type; give it one type (or null and "
                              "one)")
        kind = rest[0]
    if kind is None and "properties" in s:
        kind = "object"
    if kind in _SIMPLE:
        return _SIMPLE[kind][0]
    if kind == "array":
        items = s.get("items")
        if not isinstance(items, dict):
            raise SchemaError(f"{where}: an array needs one 'items' schema")
        return ArrayType(_type(items, root, f"{where}[]", seen), True)
    if kind == "object":
        props = s.get("properties")
        if not props:
            raise SchemaError(f"{where}: an object without 'properties' has no Spark column type (maps of "
                              "additionalProperties are not read yet)")
        return StructType([StructField(name, _type(p, root, f"{where}.{name}", seen), True)
                           for name, p in props.items()])
    raise SchemaError(f"{where}: type {kind!r} is not one Spark reads")


def _arrow(t: DataType) -> pa.DataType:
    if isinstance(t, StructType):
        return pa.struct([pa.field(f.name, _arrow(f.dataType), True) for f in t.fields])
    if isinstance(t, ArrayType):
        return pa.list_(pa.field("element", _arrow(t.elementType), True))
    for spark, arrow in _SIMPLE.values():
        if t == spark:
            return arrow
    raise SchemaError(f"{t.simpleString()} has no JSON reading")


class JsonReader:
    """Reads JSON documents (one per row, after a header) into the reader schema's column."""

    def __init__(self, schema: str) -> None:
        self.spark = spark_type(schema)
        self.arrow = _arrow(self.spark)
        if not pa.types.is_struct(self.arrow):
            raise SchemaError("the schema's documents are not objects; only objects are read as columns")

    def decode(self, values: pa.Array, rows: np.ndarray, skip: int) -> tuple[pa.Array, dict[int, str]]:
        """``values`` whose ``rows`` mask is set, each a JSON document after ``skip`` bytes;
        other rows null. Returns the column and the rows whose document does not parse."""
        n = len(values)
        if n == 0:
            return pa.nulls(0, self.arrow), {}
        # Only objects: a document that is not one (null, a number, nothing) reads as no row or
        # several, and Arrow's reader is not to be given a bare null.
        rows = rows.copy()
        bad = {i: "the document is not a JSON object" for i in _not_objects(values, rows, skip)}
        rows[list(bad)] = False
        table = self._parse(_lines(values, rows, skip))
        if table is None or table.num_rows != n:  # the documents that do not read as one row each
            for i in np.flatnonzero(rows).tolist():
                one = _lines(values.slice(i, 1), rows[i:i + 1], skip)
                got = self._parse(one)
                if got is None or got.num_rows != 1:
                    bad[i] = self._why(one) if got is None else "the value holds several JSON documents"
            rows[list(bad)] = False
            table = self._parse(_lines(values, rows, skip))
            if table is None or table.num_rows != n:
                raise SchemaError(f"{n} documents read as {table.num_rows if table else 'no'} rows")
        fields = [table.column(f.name).combine_chunks() for f in self.arrow]
        mask = pa.array(~rows)
        return pa.StructArray.from_arrays(fields, fields=list(self.arrow), mask=mask), bad

    def _options(self) -> tuple[pj.ReadOptions, pj.ParseOptions]:
        schema = pa.schema(list(self.arrow))
        return (pj.ReadOptions(use_threads=False, block_size=1 << 26),
                pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"))

    def _parse(self, text: bytes) -> pa.Table | None:
        read, parse = self._options()
        try:
            return pj.read_json(io.BytesIO(text), read_options=read, parse_options=parse)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None

    def _why(self, text: bytes) -> str:
        read, parse = self._options()
        try:
            pj.read_json(io.BytesIO(text), read_options=read, parse_options=parse)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            return f"the document does not fit the reader schema: {str(e).splitlines()[0][:300]}"
        return "the document does not parse"


def _not_objects(values: pa.Array, rows: np.ndarray, skip: int) -> list[int]:
    """The rows set in ``rows`` whose document's first byte other than whitespace is not ``{``."""
    if values.type != pa.binary():
        values = values.cast(pa.binary())
    buf = values.buffers()
    offs = np.frombuffer(buf[1], np.int32)[values.offset:values.offset + len(values) + 1]
    data = buf[2].to_pybytes() if buf[2] is not None else b""
    out = []
    for i in np.flatnonzero(rows).tolist():
        doc = data[offs[i] + skip:offs[i + 1]].lstrip(b" \t\r\n")
        if not doc.startswith(b"{"):
            out.append(i)
    return out


def _lines(values: pa.Array, rows: np.ndarray, skip: int) -> bytes:
    """Each row's document (its bytes after ``skip``; ``{}`` where ``rows`` is not set), one a
    line. JSON has raw newlines only as whitespace between tokens, so they become spaces."""
    if values.type != pa.binary():
        values = values.cast(pa.binary())
    buf = values.buffers()
    offs = np.frombuffer(buf[1], np.int32)[values.offset:values.offset + len(values) + 1].astype(np.int64)
    data = np.frombuffer(buf[2], np.uint8) if buf[2] is not None else np.zeros(0, np.uint8)
    data = np.concatenate([data, np.frombuffer(b"{}", np.uint8)])
    starts = np.where(rows, offs[:-1] + skip, len(data) - 2)
    lengths = np.where(rows, offs[1:] - offs[:-1] - skip, 2)
    if (lengths < 0).any():
        raise ValueError("a value is shorter than the wire format's header")
    ends = np.cumsum(lengths)
    total = int(ends[-1]) if len(ends) else 0
    index = np.arange(total) - np.repeat(ends - lengths - starts, lengths)
    body = data[index]
    body[(body == 10) | (body == 13)] = 32
    return np.insert(body, ends, 10).tobytes()
