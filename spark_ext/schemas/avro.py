"""Avro values to typed Arrow columns, with Avro's schema resolution, decoded in C (``_avro.c``).

The reader schema fixes the column's type, the one Spark's ``from_avro`` gives for it
(records as structs, enums as strings, ``[null, T]`` as a nullable ``T``, other unions as
structs of ``member0``, ``member1``..., logical dates, timestamps and decimals as Spark's
own types). Each writer schema a value names is resolved against it once, by Avro's rules
(fields matched by name or alias, writer-only fields skipped, reader-only fields from
their defaults, numeric promotions, enum symbols by name), into a program the C decoder
runs over a whole column. A writer schema that cannot be resolved is refused when it is
first met, with the reason (``IncompatibleSchemaError``); a value that does not decode
is reported by row.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from spark_ext.errors import SparkExtError
from spark_ext.schemas import _avro
from spark_ext.schemas.outputs import O_BIN, O_BOOL, O_FIXED, O_LIST, O_MAP, O_NULL, O_STRUCT, Shape, build

# Ops (``_avro.c``: OP_*) and conversions (C_*), in the C file's order.
(OP_NULL, OP_BOOL, OP_INT, OP_LONG, OP_FLOAT, OP_DOUBLE, OP_BYTES, OP_FIXED, OP_ENUM, OP_RECORD, OP_ARRAY,
 OP_MAP, OP_UNION, OP_MEMBER, OP_FAIL) = range(15)
C_I32, C_I64, C_F32, C_F64, C_BIN, C_DEC = range(6)

PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
_MICROS = {"timestamp-millis": 1000, "timestamp-micros": 1, "local-timestamp-millis": 1000,
           "local-timestamp-micros": 1}


class SchemaError(SparkExtError, ValueError):
    """An Avro schema that is malformed, or holds what Spark cannot represent."""


class IncompatibleSchemaError(SparkExtError):
    """A writer schema that the reader schema cannot read by Avro's resolution rules."""


# --------------------------------------------------------------------------- parsing


def parse(schema: str | Any) -> Any:
    """The schema (JSON text or its parsed form) with every named type written out in
    place, unions as ``{"type": "union", "branches": [...]}``, names fully qualified.
    A recursive type is refused: Spark's columns cannot hold one."""
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError:
            schema = schema.strip()  # a bare primitive name, unquoted
    return _expand(schema, {}, "", ())


def _full(name: str, namespace: str) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _expand(s: Any, names: dict[str, Any], ns: str, stack: tuple[str, ...]) -> Any:
    if isinstance(s, list):
        return {"type": "union", "branches": [_expand(b, names, ns, stack) for b in s]}
    if isinstance(s, str):
        if s in PRIMITIVES:
            return {"type": s}
        full = _full(s, ns) if _full(s, ns) in names else s
        if full in stack:
            raise SchemaError(f"the Avro type {full!r} contains itself: Spark's columns cannot hold a "
                              "recursive type; give the column a schema without the recursion")
        if full not in names:
            raise SchemaError(f"the Avro schema names type {s!r}, which it does not define")
        return names[full]
    if not isinstance(s, dict) or "type" not in s:
        raise SchemaError(f"not an Avro schema: {s!r}")
    kind = s["type"]
    if isinstance(kind, (dict, list)) or (isinstance(kind, str) and kind not in PRIMITIVES
                                          and kind not in ("record", "error", "enum", "array", "map",
                                                           "fixed")):
        # {"type": <schema>} wraps another schema (logical annotations on it are kept).
        inner = _expand(kind, names, ns, stack)
        return {**inner, "logicalType": s["logicalType"]} if "logicalType" in s else inner
    out = dict(s)
    if kind in ("record", "error", "enum", "fixed"):
        full = _full(s["name"], s.get("namespace", ns))
        out["name"] = full
        inner_ns = full.rsplit(".", 1)[0] if "." in full else ""
        if kind in ("record", "error"):
            out["type"] = "record"
            fields = []
            names[full] = out  # placeholder for the recursion check's message
            for f in s.get("fields", []):
                fields.append({**f, "type": _expand(f["type"], names, inner_ns, (*stack, full))})
            out["fields"] = fields
        names[full] = out
        return out
    if kind == "array":
        out["items"] = _expand(s["items"], names, ns, stack)
    elif kind == "map":
        out["values"] = _expand(s["values"], names, ns, stack)
    return out


# --------------------------------------------------------------------------- the reader's shape


def _non_null(branches: list[Any]) -> list[Any]:
    return [b for b in branches if b["type"] != "null"]


class Reader:
    """The reader schema's column and the programs that read writer schemas into it."""

    def __init__(self, schema: str | Any) -> None:
        self.schema = parse(schema)
        self.outs: list[tuple[int, int, tuple[int, ...]]] = []
        self.root = self._shape(self.schema)
        self._code: list[int] = []
        self._strings: list[bytes] = []
        self._consts: list[bytes | None] = []
        self._entries: list[int] = []

    @property
    def spark_type(self) -> DataType:
        return self.root.spark

    # ---- shapes

    def _new(self, kind: int, width: int = 0) -> int:
        self.outs.append((kind, width, ()))
        return len(self.outs) - 1

    def _children(self, out: int, kids: list[Shape]) -> None:
        kind, width, _ = self.outs[out]
        self.outs[out] = (kind, width, tuple(k.out for k in kids))

    def _shape(self, s: Any, nullable: bool = False) -> Shape:
        kind, logical = s["type"], s.get("logicalType")
        if kind == "union":
            rest = _non_null(s["branches"])
            has_null = len(rest) < len(s["branches"])
            if not rest:
                return Shape(self._new(O_NULL), s, NullType(), pa.null(), True)
            if len(rest) == 1:
                return self._shape(rest[0], nullable=has_null)
            types = {b["type"] for b in rest if "logicalType" not in b}
            if len(rest) == 2 and types in ({"int", "long"}, {"float", "double"}):
                wide = {"type": "long" if "long" in types else "double"}
                return self._shape(wide, nullable=has_null)
            out = self._new(O_STRUCT)
            kids = [self._shape(b, nullable=True) for b in rest]
            self._children(out, kids)
            fields = [StructField(f"member{i}", k.spark, True) for i, k in enumerate(kids)]
            arrow = pa.struct([pa.field(f"member{i}", k.arrow, True) for i, k in enumerate(kids)])
            return Shape(out, s, StructType(fields), arrow, has_null, kids, union="struct")
        if kind == "null":
            return Shape(self._new(O_NULL), s, NullType(), pa.null(), True)
        if kind == "boolean":
            return Shape(self._new(O_BOOL), s, BooleanType(), pa.bool_(), nullable)
        if kind == "int":
            if logical == "date":
                return Shape(self._new(O_FIXED, 4), s, DateType(), pa.date32(), nullable)
            return Shape(self._new(O_FIXED, 4), s, IntegerType(), pa.int32(), nullable)
        if kind == "long":
            if logical in ("timestamp-millis", "timestamp-micros"):
                utc = pa.timestamp("us", tz="UTC")
                return Shape(self._new(O_FIXED, 8), s, TimestampType(), utc, nullable)
            if logical in ("local-timestamp-millis", "local-timestamp-micros"):
                return Shape(self._new(O_FIXED, 8), s, TimestampNTZType(), pa.timestamp("us"), nullable)
            return Shape(self._new(O_FIXED, 8), s, LongType(), pa.int64(), nullable)
        if kind == "float":
            return Shape(self._new(O_FIXED, 4), s, FloatType(), pa.float32(), nullable)
        if kind == "double":
            return Shape(self._new(O_FIXED, 8), s, DoubleType(), pa.float64(), nullable)
        if kind in ("bytes", "fixed") and logical == "decimal":
            p, scale = int(s["precision"]), int(s.get("scale", 0))
            if not 0 < p <= 38 or not 0 <= scale <= p:
                raise SchemaError(f"decimal({p}, {scale}) is beyond Spark's decimals (precision 1 to 38, "
                                  "scale 0 to precision)")
            return Shape(self._new(O_FIXED, 16), s, DecimalType(p, scale), pa.decimal128(p, scale), nullable)
        if kind in ("bytes", "fixed"):
            return Shape(self._new(O_BIN), s, BinaryType(), pa.binary(), nullable)
        if kind in ("string", "enum"):
            return Shape(self._new(O_BIN), s, StringType(), pa.string(), nullable)
        if kind == "record":
            out = self._new(O_STRUCT)
            kids = [self._shape(f["type"]) for f in s["fields"]]
            self._children(out, kids)
            names = [f["name"] for f in s["fields"]]
            pairs = list(zip(names, kids, strict=True))
            spark = StructType([StructField(n, k.spark, k.nullable) for n, k in pairs])
            arrow = pa.struct([pa.field(n, k.arrow, k.nullable) for n, k in pairs])
            return Shape(out, s, spark, arrow, nullable, kids)
        if kind == "array":
            out = self._new(O_LIST)
            item = self._shape(s["items"])
            self._children(out, [item])
            return Shape(out, s, ArrayType(item.spark, item.nullable),
                         pa.list_(pa.field("element", item.arrow, item.nullable)), nullable, [item])
        if kind == "map":
            out = self._new(O_MAP)
            key = Shape(self._new(O_BIN), {"type": "string"}, StringType(), pa.string(), False)
            value = self._shape(s["values"])
            self._children(out, [key, value])
            return Shape(out, s, MapType(StringType(), value.spark, value.nullable),
                         pa.map_(pa.string(), pa.field("value", value.arrow, value.nullable)), nullable,
                         [key, value])
        raise SchemaError(f"the Avro type {kind!r} is not one Spark reads")

    # ---- programs

    def add_writer(self, writer: str | Any) -> int:
        """Resolve ``writer`` against the reader schema; the program's index for ``decode``.
        Raises ``IncompatibleSchemaError`` naming what cannot be read."""
        w = parse(writer)
        mark = (len(self._code), len(self._strings), len(self._consts))
        try:
            pc = self._resolve(w, self.root, "the value")
        except IncompatibleSchemaError:
            del self._code[mark[0]:], self._strings[mark[1]:], self._consts[mark[2]:]
            raise
        self._entries.append(pc)
        return len(self._entries) - 1

    def _emit(self, *ops: int) -> int:
        self._code.extend(ops)
        return len(self._code) - len(ops)

    def _string(self, b: bytes) -> int:
        self._strings.append(b)
        return len(self._strings) - 1

    def _fail(self, why: str) -> int:
        return self._emit(OP_FAIL, self._string(why.encode()))

    def _resolve(self, w: Any, r: Shape | None, where: str) -> int:
        """Code reading writer schema ``w`` into shape ``r`` (None: read and drop)."""
        wk = w["type"]
        if wk == "union":
            branches = []
            for b in w["branches"]:
                try:
                    branches.append(self._resolve(b, r, where))
                except IncompatibleSchemaError as e:
                    if r is None:
                        raise
                    # Avro fails only when a value takes this branch.
                    branches.append(self._fail(str(e)))
            return self._emit(OP_UNION, len(branches), *branches)
        if r is None:
            return self._skip(w)
        if r.union == "struct":
            return self._member(w, r, where)
        if wk == "null":
            if not r.nullable:
                raise IncompatibleSchemaError(_never_null(where))
            return self._emit(OP_NULL, r.out)
        return self._same(w, r, where)

    def _member(self, w: Any, r: Shape, where: str) -> int:
        if w["type"] == "null":
            if not r.nullable:
                raise IncompatibleSchemaError(_never_null(where))
            return self._emit(OP_NULL, r.out)
        kids = r.children
        # Avro picks the first reader branch of the same type, else the first it can promote to.
        for exact in (True, False):
            for i, k in enumerate(kids):
                if _matches(w, k.schema, exact):
                    return self._emit(OP_MEMBER, r.out, i, self._resolve(w, k, where))
        raise IncompatibleSchemaError(f"{where}: no branch of the reader's union reads the writer's "
                                      f"{_describe(w)}")

    def _same(self, w: Any, r: Shape, where: str) -> int:
        wk, rk = w["type"], r.schema["type"]
        if rk == "union":  # only a union of nothing but null keeps its union here: it reads no value
            raise IncompatibleSchemaError(f"{where} is {_describe(w)} in the writer's schema and always null "
                                          "in the reader's")
        rschema = r.schema
        rl = rschema.get("logicalType")
        out = r.out
        if not _matches(w, rschema, exact=False):
            raise IncompatibleSchemaError(f"{where} is {_describe(w)} in the writer's schema and "
                                          f"{_describe(rschema)} in the reader's")
        if rl == "decimal":
            wp, ws = w.get("precision"), w.get("scale", 0)
            if w.get("logicalType") != "decimal" or (int(wp), int(ws)) != (int(rschema["precision"]),
                                                                        int(rschema.get("scale", 0))):
                raise IncompatibleSchemaError(f"{where} is {_describe(w)} in the writer's schema and "
                                              f"{_describe(rschema)} in the reader's")
            precision = int(rschema["precision"])
            return self._emit(OP_FIXED, out, C_DEC, int(w["size"]), precision) if wk == "fixed" else \
                self._emit(OP_BYTES, out, C_DEC, precision)
        if wk == "boolean":
            return self._emit(OP_BOOL, out)
        conv = {"int": C_I32, "long": C_I64, "float": C_F32, "double": C_F64}.get(rk, C_BIN)
        # Resolution reads the writer's number as the reader's type says: a reader's timestamp in
        # milliseconds becomes Spark's microseconds, whatever the writer's logical type was.
        mult = _MICROS.get(rl or "", 1) if conv == C_I64 else 1
        if wk == "int":
            return self._emit(OP_INT, out, conv, mult)
        if wk == "long":
            return self._emit(OP_LONG, out, conv, mult)
        if wk == "float":
            return self._emit(OP_FLOAT, out, conv)
        if wk == "double":
            return self._emit(OP_DOUBLE, out)
        if wk in ("bytes", "string"):
            return self._emit(OP_BYTES, out, C_BIN, 0)
        if wk == "fixed":
            return self._emit(OP_FIXED, out, C_BIN, int(w["size"]), 0)
        if wk == "enum":
            return self._enum(w, rschema, out, where)
        if wk == "record":
            return self._record(w, r, where)
        if wk == "array":
            items = self._resolve(w["items"], r.children[0], f"{where}'s items")
            return self._emit(OP_ARRAY, out, items, int(_may_take_no_bytes(w["items"])))
        if wk == "map":
            value = self._resolve(w["values"], r.children[1], f"{where}'s values")
            return self._emit(OP_MAP, out, r.children[0].out, value)
        raise IncompatibleSchemaError(f"{where}: the writer's {wk!r} is not an Avro type")

    def _enum(self, w: Any, rs: Any, out: int, where: str) -> int:
        reader = list(rs["symbols"])
        default = rs.get("default")
        table = []
        for sym in w["symbols"]:
            name = sym if sym in reader else default
            table.append(self._string(name.encode()) if name is not None else -1)
        missing = [s for s in w["symbols"] if s not in reader]
        msg = self._string(f"{where}: the writer's enum symbol (one of {missing}) is not in the reader's "
                           f"{rs.get('name')} and it has no default".encode())
        return self._emit(OP_ENUM, out, len(table), msg, *table)

    def _record(self, w: Any, r: Shape, where: str) -> int:
        rfields = r.schema["fields"] if r.schema["type"] == "record" else \
            _non_null(r.schema["branches"])[0]["fields"]
        # A writer field is the reader's field of its name, else of its alias where the writer has
        # no field of the reader field's own name; each reader field reads one writer field.
        written = {f["name"] for f in w["fields"]}
        by_name = {f["name"]: i for i, f in enumerate(rfields)}
        for i, f in enumerate(rfields):
            if f["name"] not in written:
                for alias in f.get("aliases", ()):
                    by_name.setdefault(alias, i)
        seen: set[int] = set()
        ops = []
        for f in w["fields"]:
            at = by_name.get(f["name"])
            if at is None or at in seen:
                ops.append(self._skip(f["type"]))
            else:
                seen.add(at)
                ops.append(self._resolve(f["type"], r.children[at], f"field {f['name']!r}"))
        defaults: list[int] = []
        for i, f in enumerate(rfields):
            if i in seen:
                continue
            if "default" not in f:
                raise IncompatibleSchemaError(
                    f"the reader's field {f['name']!r} is not in the writer's schema and has no default")
            self._consts.append(_default(f["type"], r.children[i], f["default"], f["name"]))
            defaults += [r.children[i].out, len(self._consts) - 1]
        return self._emit(OP_RECORD, r.out, len(ops), *ops, len(defaults) // 2, *defaults)

    def _skip(self, w: Any) -> int:
        """Code that reads a value of ``w`` and keeps nothing."""
        k = w["type"]
        if k == "union":
            return self._emit(OP_UNION, len(w["branches"]), *[self._skip(b) for b in w["branches"]])
        if k == "null":
            return self._emit(OP_NULL, -1)
        if k == "boolean":
            return self._emit(OP_BOOL, -1)
        if k in ("int", "long"):
            return self._emit(OP_INT if k == "int" else OP_LONG, -1, C_I64, 1)
        if k == "float":
            return self._emit(OP_FLOAT, -1, C_F64)
        if k == "double":
            return self._emit(OP_DOUBLE, -1)
        if k in ("bytes", "string"):
            return self._emit(OP_BYTES, -1, C_BIN, 0)
        if k == "fixed":
            return self._emit(OP_FIXED, -1, C_BIN, int(w["size"]), 0)
        if k == "enum":
            n = len(w["symbols"])
            return self._emit(OP_ENUM, -1, n, 0, *([0] * n))
        if k == "record":
            ops = [self._skip(f["type"]) for f in w["fields"]]
            return self._emit(OP_RECORD, -1, len(ops), *ops, 0)
        if k == "array":
            return self._emit(OP_ARRAY, -1, self._skip(w["items"]), int(_may_take_no_bytes(w["items"])))
        if k == "map":
            return self._emit(OP_MAP, -1, -1, self._skip(w["values"]))
        raise SchemaError(f"the writer's schema holds {k!r}, not an Avro type")

    # ---- decoding

    def decode(self, values: pa.Array, progs: np.ndarray, skip: int) -> tuple[pa.Array | None, int, str]:
        """``values`` (binary) read by program ``progs[i]`` each (-1: a null row), after ``skip``
        header bytes. Returns (column, -1, "") or (None, row, why) for the first row that
        does not decode."""
        if values.type != pa.binary():
            values = values.cast(pa.binary())
        if values.offset:
            values = pa.concat_arrays([values])  # buffers starting at row 0
        vb = values.buffers()
        assert vb[1] is not None and len(values) == len(progs)
        data = vb[2] if vb[2] is not None else pa.py_buffer(b"")
        bad, result = _avro.decode(self._code_bytes(), self._entries, self.outs, self._strings, self._consts,
                                   (vb[0] if values.null_count else None, vb[1], data),
                                   np.ascontiguousarray(progs, dtype=np.int32), skip)
        if bad is not None:
            return None, int(bad), str(result)
        assert not isinstance(result, str)
        return build(self.root, result), -1, ""

    def _code_bytes(self) -> bytes:
        return np.asarray(self._code, dtype=np.int32).tobytes()


def _never_null(where: str) -> str:
    return f"{where} may be null in the writer's schema, never in the reader's"


def _matches(w: Any, r: Any, exact: bool) -> bool:
    """Avro's "schemas match" on the two types' kinds (records and enums by kind; promotions
    unless ``exact``)."""
    wk, rk = w["type"], r["type"]
    if wk == rk:
        if wk in ("fixed",):
            return int(w["size"]) == int(r["size"])
        if exact and wk in ("record", "enum", "fixed"):
            return w.get("name", "").rsplit(".", 1)[-1] == r.get("name", "").rsplit(".", 1)[-1]
        return True
    if exact:
        return False
    return (wk, rk) in {("int", "long"), ("int", "float"), ("int", "double"), ("long", "float"),
                        ("long", "double"), ("float", "double"), ("string", "bytes"), ("bytes", "string")}


def _describe(s: Any) -> str:
    k = s["type"]
    logical = s.get("logicalType")
    if logical == "decimal":
        return f"decimal({s.get('precision')}, {s.get('scale', 0)})"
    if k in ("record", "enum", "fixed"):
        return f"{k} {s.get('name')}"
    return f"{logical} ({k})" if logical else k


def _may_take_no_bytes(s: Any) -> bool:
    """Can a value of ``s`` be written in no bytes (null, an empty record, fixed of size 0)?
    An array of such items may count more items than it has bytes left."""
    k = s["type"]
    if k == "null":
        return True
    if k == "fixed":
        return int(s["size"]) == 0
    if k == "record":
        return all(_may_take_no_bytes(f["type"]) for f in s["fields"])
    return False


def _default(s: Any, shape: Shape, value: Any, name: str) -> bytes | None:
    """A reader field's default (of the union's first branch, for a union), in the Arrow
    layout of the field's output ``shape`` (None: null)."""
    if s["type"] == "union":  # Avro: the default is of the union's first branch
        s = s["branches"][0]
    if value is None or s["type"] == "null":
        if not shape.nullable:
            raise IncompatibleSchemaError(f"the reader's field {name!r} takes a null default where it holds "
                                          "no null")
        return None
    if shape.union == "struct":
        raise IncompatibleSchemaError(f"the reader's field {name!r} is a union of several types with a "
                                      f"default {json.dumps(value)[:80]}, which is not supported: give it a "
                                      "null default (null first in the union) or register the field in the "
                                      "writer's schema")
    kind, logical = shape.arrow, s.get("logicalType")
    if pa.types.is_boolean(kind):
        return b"\x01" if value else b"\x00"
    if pa.types.is_decimal(kind):
        raw = str(value).encode("latin-1")
        return int.from_bytes(raw, "big", signed=True).to_bytes(16, "little", signed=True)
    if pa.types.is_timestamp(kind):
        return struct.pack("<q", int(value) * _MICROS.get(logical or "", 1))
    packs = {pa.int32(): "<i", pa.date32(): "<i", pa.int64(): "<q", pa.float32(): "<f", pa.float64(): "<d"}
    if kind in packs:
        number = float(value) if pa.types.is_floating(kind) else int(value)
        return struct.pack(packs[kind], number)
    if pa.types.is_binary(kind):
        return str(value).encode("latin-1")  # Avro's JSON form of bytes: one char per byte
    if pa.types.is_string(kind):
        return str(value).encode()
    if (pa.types.is_list(kind) or pa.types.is_map(kind)) and not value:
        return b""
    raise IncompatibleSchemaError(f"the reader's field {name!r} takes its default {json.dumps(value)[:80]}, "
                                  "and defaults of records, non-empty arrays and maps are not supported: "
                                  "give the field a null default or register it in the writer's schema")
