"""The protobuf column decoder (``spark_ext.schemas.protobuf`` and its C part ``_proto.c``)
against protobuf's own parser (upb), message by message: random proto3 and proto2 files
(every scalar type, proto3 ``optional``, oneofs, nested messages, repeated fields packed and
not, maps with scalar, enum, message and Timestamp values, open enums with unknown numbers,
enum aliases, Timestamp and Duration), random messages of them serialized by protobuf and
then rewritten on the wire as other writers may write them (fields in another order, packed
fields unpacked, singular fields written twice, other members of a oneof before the one
that stays, unknown fields, over-long varints, map entries without their key or value),
parsed back by protobuf and mapped into the Spark view Spark's ``from_protobuf`` gives
(``_expect``), and decoded as one column by the decoder.

Then malformed values: every truncation of some messages, random mutations and random bytes
(the decoder fails a row exactly when protobuf does, but for the differences the module
docstring of ``_proto.c`` chooses: ``_quirks``), hand-made bad values (over-long varints,
lengths past the end, bad UTF-8, wrong wire types, groups), each failing only its own row:
with that row's start set to -1, as the caller does, the other rows decode as before.

Pure unit tests: no services, no Spark. Seeded: a failure names its seed.
"""

from __future__ import annotations

import math
import random
import struct
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from google.protobuf import descriptor_pb2, message_factory
from google.protobuf.message import DecodeError
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DayTimeIntervalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_ext.schemas.protobuf import ProtoReader, pool_of

FDP = descriptor_pb2.FieldDescriptorProto
(DOUBLE, FLOAT, INT64, UINT64, INT32, FIXED64, FIXED32, BOOL, STRING, GROUP, MESSAGE, BYTES, UINT32, ENUM,
 SFIXED32, SFIXED64, SINT32, SINT64) = range(1, 19)
SCALARS = [DOUBLE, FLOAT, INT64, UINT64, INT32, FIXED64, FIXED32, BOOL, STRING, BYTES, UINT32, SFIXED32,
           SFIXED64, SINT32, SINT64]
KEYS = [t for t in SCALARS if t not in (DOUBLE, FLOAT, BYTES)]
TIMESTAMP, DURATION = "google.protobuf.Timestamp", "google.protobuf.Duration"
TIME = (TIMESTAMP, DURATION)
WKT_FILES = ["google/protobuf/timestamp.proto", "google/protobuf/duration.proto"]
M64 = (1 << 64) - 1
# The seconds the decoder takes for a Timestamp or Duration (beyond them: a failed row).
MAX_SECONDS = (2 ** 63 - 1) // 1_000_000 - 1
ENUM_NUMBERS = [1, 2, 3, 5, 7, 100, -1, -2, -100, 65535, 2 ** 31 - 1, -(2 ** 31)]


def _wire_of(t: int) -> int:
    return {DOUBLE: 1, FIXED64: 1, SFIXED64: 1, FLOAT: 5, FIXED32: 5, SFIXED32: 5, STRING: 2, BYTES: 2,
            MESSAGE: 2}.get(t, 0)


def _repeated(f: Any) -> bool:
    return bool(f.is_repeated)


def _is_map(f: Any) -> bool:
    return f.type == MESSAGE and _repeated(f) and f.message_type.GetOptions().map_entry


def _is_time(f: Any) -> bool:
    return f.type == MESSAGE and f.message_type.full_name in TIME


def _packable(f: Any) -> bool:
    return f.type not in (STRING, BYTES, MESSAGE, GROUP)


# --------------------------------------------------------------------------- schemas


class _Schema:
    """A random file: enums, then the message ``Root`` with a field of every scalar type and
    random others (nested messages down to depth 3)."""

    def __init__(self, seed: int, syntax: str) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.syntax = syntax
        self.pkg = f"g{seed}{syntax[-1]}"
        self.fdp = descriptor_pb2.FileDescriptorProto(name=f"{self.pkg}.proto", package=self.pkg,
                                                      syntax=syntax)
        self.fdp.dependency.extend(WKT_FILES)
        self.count = 0
        self.enums: list[str] = []
        for _ in range(self.rng.randint(1, 3)):
            self._enum(self.fdp.enum_type, f".{self.pkg}")
        root = self.fdp.message_type.add(name="Root")
        self._message(root, f".{self.pkg}.Root", 0, every_scalar=True)
        self.pool = pool_of([self.fdp])
        self.desc = self.pool.FindMessageTypeByName(f"{self.pkg}.Root")
        self.cls = message_factory.GetMessageClass(self.desc)

    def _enum(self, container: Any, scope: str) -> None:
        rng = self.rng
        self.count += 1
        name = f"E{self.count}"
        values = [(f"{name}_{j}", n) for j, n in enumerate([0, *rng.sample(ENUM_NUMBERS, rng.randint(0, 5))])]
        e = container.add(name=name)
        if rng.random() < 0.3:  # an alias: a number's first name is its name
            e.options.allow_alias = True
            values.insert(rng.randint(1, len(values)), (f"{name}_ALIAS", rng.choice(values)[1]))
        for n, number in values:
            e.value.add(name=n, number=number)
        self.enums.append(f"{scope}.{name}")

    def _numbers(self, k: int) -> list[int]:
        rng = self.rng
        out: set[int] = set()
        while len(out) < k:
            n = rng.randint(1, 30) if rng.random() < 0.8 else rng.choice(
                [4095, 4096, 4097, 16383, 100000, 2 ** 29 - 1, rng.randint(31, 2 ** 29 - 1)])
            if not 19000 <= n <= 19999:
                out.add(n)
        return list(out)

    def _spec(self, depth: int) -> tuple[Any, ...]:
        rng = self.rng
        kind = rng.choice(["scalar", "scalar", "scalar", "enum", "msg", "time", "map", "map", "oneof"])
        if kind == "msg" and depth >= 3:
            kind = "scalar"
        if kind == "oneof":
            members = [self._single(depth) for _ in range(rng.randint(1, 4))]
            return ("oneof", members)
        if kind == "map":
            vkind = rng.choice(["scalar", "scalar", "enum", "msg", "time"])
            if vkind == "msg" and depth >= 3:
                vkind = "scalar"
            value = (vkind, rng.choice(SCALARS)) if vkind == "scalar" else (vkind, None)
            return ("map", rng.choice(KEYS), value)
        single = self._single(depth, kind)
        return (*single, rng.choice(["single", "single", "optional", "repeated", "repeated"]))

    def _single(self, depth: int, kind: str | None = None) -> tuple[Any, ...]:
        rng = self.rng
        kind = kind or rng.choice(["scalar", "scalar", "enum", "msg" if depth < 3 else "scalar", "time"])
        return (kind, rng.choice(SCALARS) if kind == "scalar" else None)

    def _type(self, f: Any, msg: Any, full: str, depth: int, kind: str, t: int | None) -> None:
        if kind == "scalar":
            assert t is not None
            f.type = t
        elif kind == "enum":
            f.type = ENUM
            f.type_name = self.rng.choice(self.enums)
        elif kind == "time":
            f.type = MESSAGE
            f.type_name = "." + self.rng.choice(TIME)
        else:
            self.count += 1
            name = f"M{self.count}"
            self._message(msg.nested_type.add(name=name), f"{full}.{name}", depth + 1)
            f.type = MESSAGE
            f.type_name = f"{full}.{name}"

    def _message(self, msg: Any, full: str, depth: int, every_scalar: bool = False) -> None:
        rng = self.rng
        if rng.random() < 0.3:
            self._enum(msg.enum_type, full)
        specs: list[tuple[Any, ...]] = []
        if every_scalar:
            specs += [("scalar", t, rng.choice(["single", "optional", "repeated"])) for t in SCALARS]
            specs.append(("map", KEYS[self.seed % len(KEYS)], ("scalar", SCALARS[self.seed % len(SCALARS)])))
        specs += [self._spec(depth) for _ in range(rng.randint(1, 6 if depth < 2 else 3))]
        rng.shuffle(specs)
        numbers = self._numbers(sum(len(s[1]) if s[0] == "oneof" else 1 for s in specs))
        optional: list[Any] = []
        for spec in specs:
            if spec[0] == "oneof":
                index = len(msg.oneof_decl)
                msg.oneof_decl.add(name=f"oneof_{index}")
                for kind, t in spec[1]:
                    n = numbers.pop()
                    f = msg.field.add(name=f"x{n}", number=n, label=FDP.LABEL_OPTIONAL, oneof_index=index)
                    self._type(f, msg, full, depth, kind, t)
                continue
            n = numbers.pop()
            f = msg.field.add(name=f"x{n}", number=n)
            if spec[0] == "map":
                entry = msg.nested_type.add(name=f"X{n}Entry")
                entry.options.map_entry = True
                entry.field.add(name="key", number=1, label=FDP.LABEL_OPTIONAL, type=spec[1])
                value = entry.field.add(name="value", number=2, label=FDP.LABEL_OPTIONAL)
                self._type(value, msg, full, depth, *spec[2])
                f.label = FDP.LABEL_REPEATED
                f.type = MESSAGE
                f.type_name = f"{full}.X{n}Entry"
                continue
            kind, t, label = spec
            self._type(f, msg, full, depth, kind, t)
            if label == "repeated":
                f.label = FDP.LABEL_REPEATED
                if _packable_type(f.type) and rng.random() < 0.4:
                    f.options.packed = self.syntax == "proto2"  # not the syntax's default
            else:
                f.label = FDP.LABEL_OPTIONAL
                if label == "optional" and self.syntax == "proto3":
                    f.proto3_optional = True
                    optional.append(f)
        for f in optional:  # synthetic oneofs after the real ones
            f.oneof_index = len(msg.oneof_decl)
            msg.oneof_decl.add(name=f"_{f.name}")


def _packable_type(t: int) -> bool:
    return t not in (STRING, BYTES, MESSAGE, GROUP)


# --------------------------------------------------------------------------- values


def _int(rng: random.Random, bits: int, signed: bool) -> int:
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    if rng.random() < 0.25:
        return rng.choice([0, 1, lo, hi, -1 if signed else hi - 1, 127, 128])
    v = rng.getrandbits(rng.randint(1, bits))
    if signed and rng.random() < 0.5:
        v = -v
    return max(lo, min(hi, v))


def _double(rng: random.Random) -> float:
    if rng.random() < 0.4:
        return rng.choice([0.0, -0.0, math.nan, math.inf, -math.inf, 5e-324, 1.5, -2.25, 1e300])
    return struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]


def _float(rng: random.Random) -> float:
    if rng.random() < 0.4:
        return rng.choice([0.0, -0.0, math.nan, math.inf, -math.inf, 1e-45, 1.5, -2.25,
                           3.4028234663852886e38])
    return struct.unpack("<f", rng.getrandbits(32).to_bytes(4, "little"))[0]


CHARS = [(0x20, 0x7E), (0, 0x1F), (0x80, 0x7FF), (0x800, 0xD7FF), (0xE000, 0xFFFD), (0x10000, 0x10FFFF)]


def _text(rng: random.Random) -> str:
    return "".join(chr(rng.randint(*rng.choice(CHARS))) for _ in range(rng.choice([0, 1, 2, 3, 6])))


class _Fill:
    """Random values of a schema's messages, set through protobuf's Python API."""

    def __init__(self, rng: random.Random, syntax: str) -> None:
        self.rng = rng
        self.syntax = syntax

    def value(self, f: Any) -> Any:
        """A random value of scalar or enum field ``f`` (sometimes its default)."""
        rng, t = self.rng, f.type
        if t == ENUM:
            numbers = [v.number for v in f.enum_type.values]
            if self.syntax == "proto3" and rng.random() < 0.2:  # open: a number it does not name
                return rng.choice([4, -3, 1000, 2 ** 31 - 2, -(2 ** 31) + 1])
            return 0 if rng.random() < 0.2 and 0 in numbers else rng.choice(numbers)
        if rng.random() < 0.15:
            return {DOUBLE: 0.0, FLOAT: 0.0, BOOL: False, STRING: "", BYTES: b""}.get(t, 0)
        if t in (INT32, SINT32, SFIXED32):
            return _int(rng, 32, True)
        if t in (INT64, SINT64, SFIXED64):
            return _int(rng, 64, True)
        if t in (UINT32, FIXED32):
            return _int(rng, 32, False)
        if t in (UINT64, FIXED64):
            return _int(rng, 64, False)
        if t == DOUBLE:
            return _double(rng)
        if t == FLOAT:
            return _float(rng)
        if t == BOOL:
            return rng.random() < 0.5
        if t == STRING:
            return _text(rng)
        if t == BYTES:
            return rng.randbytes(rng.choice([0, 1, 3, 8]))
        raise AssertionError(t)

    def time(self, m: Any) -> None:
        rng = self.rng
        if rng.random() < 0.2:
            return  # present, empty: 0
        m.seconds = rng.choice([0, 1, -1, rng.randint(-10 ** 11, 10 ** 11), rng.randint(-2 ** 40, 2 ** 40),
                                MAX_SECONDS, -MAX_SECONDS])
        if abs(m.seconds) == MAX_SECONDS:
            m.nanos = rng.randint(-999_999_999, 999_999_999)
        else:
            m.nanos = rng.choice([0, 999, 1000, -999, -1000, -1500, rng.randint(0, 999_999_999),
                                  rng.randint(-999_999_999, 0), 2 ** 31 - 1, -(2 ** 31)])

    def message(self, m: Any, depth: int = 0) -> None:
        rng = self.rng
        d = m.DESCRIPTOR
        if d.full_name in TIME:
            self.time(m)
            return
        chosen = {o.name: rng.choice([*o.fields, None]) for o in d.oneofs if not o.name.startswith("_")}
        for f in d.fields:
            o = f.containing_oneof
            if o is not None and not o.name.startswith("_"):
                if chosen[o.name] is not f:
                    continue
            elif rng.random() < 0.3:
                continue
            self.field(m, f, depth)

    def field(self, m: Any, f: Any, depth: int) -> None:
        rng = self.rng
        if _is_map(f):
            kf, vf = f.message_type.fields_by_number[1], f.message_type.fields_by_number[2]
            held = getattr(m, f.name)
            for _ in range(rng.choice([0, 1, 2, 3])):
                k = self.value(kf)
                if vf.type == MESSAGE:
                    self.message(held[k], depth + 1)
                else:
                    held[k] = self.value(vf)
        elif _repeated(f):
            held = getattr(m, f.name)
            for _ in range(rng.choice([0, 1, 2, 4])):
                if f.type == MESSAGE:
                    self.message(held.add(), depth + 1)
                else:
                    held.append(self.value(f))
        elif f.type == MESSAGE:
            sub = getattr(m, f.name)
            sub.SetInParent()
            self.message(sub, depth + 1)
        else:
            setattr(m, f.name, self.value(f))


# --------------------------------------------------------------------------- the Spark view


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // b
    return q if a >= 0 else -q


def _time_micros(m: Any) -> int:
    """Seconds and nanos as microseconds, as Spark: nanos / 1000 toward zero (Java's division)."""
    return m.seconds * 1_000_000 + _trunc_div(m.nanos, 1000)


def _enum_name(ed: Any, n: int) -> str:
    for v in ed.values:  # declared order: an aliased number's first name
        if v.number == n:
            return v.name
    return f"UNKNOWN_ENUM_VALUE_{ed.name}_{n}"


def _signed(v: int, bits: int) -> int:
    return v - (1 << bits) if v >= 1 << (bits - 1) else v


def _conv(v: Any, f: Any) -> Any:
    t = f.type
    if t == MESSAGE:
        return _time_micros(v) if _is_time(f) else _expect(v)
    if t in (UINT32, FIXED32):
        return _signed(v, 32)
    if t in (UINT64, FIXED64):
        return _signed(v, 64)
    if t == ENUM:
        return _enum_name(f.enum_type, v)
    return v


def _is_default(v: Any, f: Any) -> bool:
    if f.type == DOUBLE:
        return struct.pack("<d", v) == bytes(8)  # -0.0 is not the default (Java's Double.equals)
    if f.type == FLOAT:
        return struct.pack("<f", v) == bytes(4)
    return not v


def _expect(m: Any) -> dict[str, Any]:
    """protobuf's parsed message ``m`` as the decoder's struct (to_pylist, times as int64,
    maps as lists of (key, value) sorted by key): absent singular fields null, fields without
    presence null at their default, repeated fields and maps never null."""
    out: dict[str, Any] = {}
    for f in m.DESCRIPTOR.fields:
        v = getattr(m, f.name)
        if _is_map(f):
            kf, vf = f.message_type.fields_by_number[1], f.message_type.fields_by_number[2]
            out[f.name] = sorted(((_conv(k, kf), _conv(x, vf)) for k, x in v.items()), key=_by_key)
        elif _repeated(f):
            out[f.name] = [_conv(x, f) for x in v]
        elif f.has_presence:
            out[f.name] = _conv(v, f) if m.HasField(f.name) else None
        else:
            out[f.name] = None if _is_default(v, f) else _conv(v, f)
    return out


def _by_key(kv: tuple[Any, Any]) -> Any:
    return kv[0]


def _norm(v: Any, d: Any) -> Any:
    """The decoder's struct value of message ``d`` with its maps' entries sorted by key."""
    if v is None:
        return None
    out = {}
    for f in d.fields:
        x = v[f.name]
        if x is not None and _is_map(f):
            vf = f.message_type.fields_by_number[2]
            x = sorted(((k, _norm_value(y, vf)) for k, y in x), key=_by_key)
        elif x is not None and _repeated(f):
            x = [_norm_value(y, f) for y in x]
        else:
            x = _norm_value(x, f)
        out[f.name] = x
    return out


def _norm_value(x: Any, f: Any) -> Any:
    return _norm(x, f.message_type) if f.type == MESSAGE and not _is_time(f) else x


def _arrow(d: Any, times_as_int: bool = False) -> pa.DataType:
    """The column type of message ``d`` (our own reading of the mapping, not the reader's)."""
    return pa.struct([pa.field(f.name, _arrow_field(f, times_as_int), True) for f in d.fields])


def _arrow_field(f: Any, ints: bool) -> pa.DataType:
    if _is_map(f):
        kf, vf = f.message_type.fields_by_number[1], f.message_type.fields_by_number[2]
        return pa.map_(_arrow_value(kf, ints), pa.field("value", _arrow_value(vf, ints), True))
    if _repeated(f):
        return pa.list_(pa.field("element", _arrow_value(f, ints), True))
    return _arrow_value(f, ints)


def _arrow_value(f: Any, ints: bool) -> pa.DataType:
    t = f.type
    if t == MESSAGE:
        name = f.message_type.full_name
        if name == TIMESTAMP:
            return pa.int64() if ints else pa.timestamp("us", tz="UTC")
        if name == DURATION:
            return pa.int64() if ints else pa.duration("us")
        return _arrow(f.message_type, ints)
    return {DOUBLE: pa.float64(), FLOAT: pa.float32(), INT64: pa.int64(), UINT64: pa.int64(),
            INT32: pa.int32(), FIXED64: pa.int64(), FIXED32: pa.int32(), BOOL: pa.bool_(),
            STRING: pa.string(), BYTES: pa.binary(), UINT32: pa.int32(), ENUM: pa.string(),
            SFIXED32: pa.int32(), SFIXED64: pa.int64(), SINT32: pa.int32(), SINT64: pa.int64()}[t]


def _spark(d: Any) -> DataType:
    return StructType([StructField(f.name, _spark_field(f), True) for f in d.fields])


def _spark_field(f: Any) -> DataType:
    if _is_map(f):
        kf, vf = f.message_type.fields_by_number[1], f.message_type.fields_by_number[2]
        return MapType(_spark_value(kf), _spark_value(vf), True)
    if _repeated(f):
        return ArrayType(_spark_value(f), True)
    return _spark_value(f)


def _spark_value(f: Any) -> DataType:
    t = f.type
    if t == MESSAGE:
        name = f.message_type.full_name
        if name == TIMESTAMP:
            return TimestampType()
        if name == DURATION:
            return DayTimeIntervalType()
        return _spark(f.message_type)
    if t in (INT32, UINT32, SINT32, FIXED32, SFIXED32):
        return IntegerType()
    if t in (INT64, UINT64, SINT64, FIXED64, SFIXED64):
        return LongType()
    return {DOUBLE: DoubleType(), FLOAT: FloatType(), BOOL: BooleanType(), STRING: StringType(),
            ENUM: StringType(), BYTES: BinaryType()}[t]


def tagged(x: Any) -> Any:
    """``x`` with its Python types spelled out (True is not 1, -0.0 is not 0.0, NaN is NaN)."""
    if x is None:
        return None
    if isinstance(x, bool):
        return ("bool", x)
    if isinstance(x, int):
        return ("int", x)
    if isinstance(x, float):
        return ("float", "nan") if math.isnan(x) else ("float", x, math.copysign(1.0, x))
    if isinstance(x, (str, bytes)):
        return (type(x).__name__, x)
    if isinstance(x, dict):
        return ("dict", {k: tagged(v) for k, v in x.items()})
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, [tagged(v) for v in x])
    raise AssertionError(type(x))


# --------------------------------------------------------------------------- the wire


def _varint(b: bytes, i: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        if i >= len(b) or shift >= 70:
            raise ValueError("varint")
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        if not c & 0x80:
            return v & M64, i
        shift += 7


def _enc_varint(v: int, pad: int = 0, limit: int = 10) -> bytes:
    out = bytearray()
    v &= M64
    while True:
        if v >> 7:
            out.append(v & 0x7F | 0x80)
            v >>= 7
        else:
            out.append(v)
            break
    pad = min(pad, limit - len(out))
    if pad > 0:  # the same value in more bytes
        out[-1] |= 0x80
        out += b"\x80" * (pad - 1) + b"\x00"
    return bytes(out)


def _payload(b: bytes, i: int, wt: int) -> tuple[Any, int]:
    if wt == 0:
        return _varint(b, i)
    if wt in (1, 5):
        n = 8 if wt == 1 else 4
        if i + n > len(b):
            raise ValueError("fixed")
        return b[i:i + n], i + n
    if wt == 2:
        n, i = _varint(b, i)
        if i + n > len(b):
            raise ValueError("length")
        return b[i:i + n], i + n
    raise ValueError(f"wire type {wt}")


def _records(b: bytes) -> list[tuple[int, int, Any]]:
    out = []
    i = 0
    while i < len(b):
        tag, i = _varint(b, i)
        v, i = _payload(b, i, tag & 7)
        out.append((tag >> 3, tag & 7, v))
    return out


def _tag(num: int, wt: int) -> bytes:
    return _enc_varint(num << 3 | wt)


def _rec(num: int, wt: int, v: Any) -> bytes:
    if wt == 0:
        return _tag(num, 0) + _enc_varint(v)
    if wt == 2:
        return _tag(num, 2) + _enc_varint(len(v)) + v
    return _tag(num, wt) + v


def _zigzag(v: int, bits: int) -> int:
    return ((v << 1) ^ (v >> (bits - 1))) & ((1 << bits) - 1)


def _wire_value(f: Any, v: Any) -> tuple[int, Any]:
    """Scalar or enum value ``v`` of field ``f`` as (wire type, raw value)."""
    t = f.type
    if t in (INT32, INT64, ENUM, UINT32, UINT64):
        return 0, v & M64
    if t == BOOL:
        return 0, int(v)
    if t in (SINT32, SINT64):
        return 0, _zigzag(v, 32 if t == SINT32 else 64)
    fmt = {FIXED32: "<I", SFIXED32: "<i", FLOAT: "<f", FIXED64: "<Q", SFIXED64: "<q", DOUBLE: "<d"}.get(t)
    if fmt:
        return _wire_of(t), struct.pack(fmt, v)
    if t == STRING:
        return 2, v.encode()
    if t == BYTES:
        return 2, v
    raise AssertionError(t)


class _Rewrite:
    """A message's bytes as another writer may write them, recursively (messages, map entries,
    Timestamps): the same message to protobuf's parser, but for ``widen``, whose 32-bit varints
    get high bits that parsers drop."""

    def __init__(self, rng: random.Random, fill: _Fill, *, shuffle: bool = False, unpack: bool = False,
                 dup: bool = False, oneof: bool = False, unknown: bool = False, pad: bool = False,
                 drop: bool = False, widen: bool = False) -> None:
        self.rng, self.fill = rng, fill
        self.shuffle, self.unpack, self.dup, self.oneof = shuffle, unpack, dup, oneof
        self.unknown, self.pad, self.drop, self.widen = unknown, pad, drop, widen

    def _pad(self, limit: int) -> int:
        return self.rng.randint(1, limit) if self.pad and self.rng.random() < 0.3 else 0

    def _encode(self, recs: list[tuple[int, int, Any]]) -> bytes:
        out = bytearray()
        for num, wt, v in recs:
            out += _enc_varint(num << 3 | wt, self._pad(4), 5)  # (upb reads tags of up to 5 bytes)
            if wt == 0:
                out += _enc_varint(v, self._pad(9))
            elif wt == 2:
                out += _enc_varint(len(v), self._pad(4), 5) + v
            else:
                out += v
        return bytes(out)

    def _items(self, payload: bytes, f: Any) -> list[Any]:
        wt, items, i = _wire_of(f.type), [], 0
        while i < len(payload):
            v, i = _payload(payload, i, wt)
            items.append(v)
        return items

    def _repack(self, num: int, payload: bytes, f: Any) -> list[tuple[int, int, Any]]:
        """A packed field's items, in chunks packed or not."""
        rng, wt = self.rng, _wire_of(f.type)
        items = self._items(payload, f)
        if self.widen and f.type in (INT32, UINT32, SINT32, ENUM):
            items = [v | rng.getrandbits(32) << 32 for v in items]
        if not self.unpack:
            return [(num, 2, b"".join(_enc_varint(v, self._pad(9)) if wt == 0 else v for v in items))]
        out = []
        while items or rng.random() < 0.1:
            k = rng.randint(0, len(items))
            chunk, items = items[:k], items[k:]
            if rng.random() < 0.5:
                out.append((num, 2, b"".join(_enc_varint(v, self._pad(9)) if wt == 0 else v for v in chunk)))
            else:
                out += [(num, wt, v) for v in chunk]
        return out

    def message(self, data: bytes, d: Any) -> bytes:
        rng = self.rng
        recs: list[tuple[int, int, Any]] = []
        for num, wt, v in _records(data):
            f = d.fields_by_number.get(num)
            if f is not None and wt == 2 and f.type == MESSAGE:
                v = self.message(v, f.message_type)
            elif f is not None and wt == 2 and _repeated(f) and _packable(f):
                recs += self._repack(num, v, f)
                continue
            recs.append((num, wt, v))
        entry = d.GetOptions().map_entry
        if self.unpack:  # a field written unpacked, packed
            for f in d.fields:
                at = [i for i, r in enumerate(recs) if r[0] == f.number]
                if not (_repeated(f) and _packable(f) and at and rng.random() < 0.5):
                    continue
                if all(recs[i][1] == _wire_of(f.type) for i in at):
                    items = [recs[i][2] for i in at]
                    payload = b"".join(_enc_varint(v) if isinstance(v, int) else v for v in items)
                    packed = (f.number, 2, payload)
                    recs = [r for i, r in enumerate(recs) if i not in at[1:]]
                    recs[at[0]] = packed
        if self.drop and entry and recs:
            # An entry without its value, or without a key of the default value: the defaults.
            recs = [r for r in recs if not (r[0] == 2 and rng.random() < 0.3)
                    and not (r[0] == 1 and r[2] in (0, b"", bytes(4), bytes(8)) and rng.random() < 0.5)]
        if self.dup:  # singular scalars written before (the last one stays)
            for f in d.fields:
                if _repeated(f) or f.type == MESSAGE or rng.random() < 0.7:
                    continue
                last = max((i for i, r in enumerate(recs) if r[0] == f.number), default=-1)
                if last < 0:
                    if entry:
                        continue  # (a new key could be another entry's: a key twice)
                    last = len(recs)
                v = self.fill.value(f)
                if d.full_name in TIME:  # (within Spark's microseconds: see test_the_largest_timestamps...)
                    v = rng.randint(-(10 ** 11), 10 ** 11) if f.name == "seconds" else \
                        rng.randint(-(10 ** 9), 10 ** 9)
                recs.insert(rng.randint(0, last), (f.number, *_wire_value(f, v)))
        if self.oneof:  # another member of a oneof, anywhere: protobuf's parser tells which stays
            for o in d.oneofs:
                g = rng.choice(list(o.fields))
                if o.name.startswith("_") or rng.random() < 0.5:
                    continue
                if g.type == MESSAGE:
                    if any(r[0] == g.number for r in recs):
                        continue  # (written twice, a message merges in protobuf: not here)
                    sub = message_factory.GetMessageClass(g.message_type)()
                    self.fill.message(sub)
                    rec = (g.number, 2, self.message(sub.SerializeToString(), g.message_type))
                else:
                    rec = (g.number, *_wire_value(g, self.fill.value(g)))
                recs.insert(rng.randint(0, len(recs)), rec)
        if self.unknown and not entry:  # (upb moves an entry with unknown fields to the unknown ones)
            for _ in range(rng.choice([0, 1, 1, 3])):
                num = rng.choice([rng.randint(1, 40), rng.randint(1, 2 ** 29 - 1), 2 ** 29 - 1])
                if num in d.fields_by_number or 19000 <= num <= 19999:
                    continue
                wt = rng.choice([0, 1, 2, 5])
                v = {0: rng.getrandbits(rng.choice([1, 7, 35, 64])), 1: rng.randbytes(8), 5: rng.randbytes(4),
                     2: rng.randbytes(rng.randint(0, 6))}[wt]
                recs.insert(rng.randint(0, len(recs)), (num, wt, v))
        if self.widen:
            for i, (num, wt, v) in enumerate(recs):
                f = d.fields_by_number.get(num)
                if f is not None and wt == 0 and f.type in (INT32, UINT32, SINT32, ENUM):
                    recs[i] = (num, wt, v | rng.getrandbits(32) << 32)
        if self.shuffle:  # each field's records keep their order (repeated items, the last of a field)
            queues: dict[int, list[tuple[int, int, Any]]] = {}
            for r in recs:
                queues.setdefault(r[0], []).append(r)
            recs = []
            while queues:
                k = rng.choice(list(queues))
                recs.append(queues[k].pop(0))
                if not queues[k]:
                    del queues[k]
        return self._encode(recs)


# --------------------------------------------------------------------------- decoding


def _decode(reader: ProtoReader, values: list[bytes | None], starts: list[int],
            slice_: bool = False) -> tuple[Any, int, str]:
    arr = pa.array([b"junk", *values] if slice_ else list(values), pa.binary())
    if slice_:
        arr = arr.slice(1)
    return reader.decode(arr, np.array(starts, np.int32))


def _decode_all(reader: ProtoReader, values: list[bytes | None],
                starts: list[int]) -> tuple[Any, dict[int, str]]:
    """Decode as the caller does: a failed row's start set to -1, then again."""
    starts = list(starts)
    bad: dict[int, str] = {}
    while True:
        col, row, why = _decode(reader, values, starts)
        if col is not None:
            assert (row, why) == (-1, "")
            return col, bad
        assert 0 <= row < len(values) and starts[row] >= 0 and values[row] is not None, (row, why)
        assert why
        bad[row] = why
        starts[row] = -1


def _values(col: pa.Array, d: Any) -> list[Any]:
    col.validate(full=True)
    return [_norm(v, d) for v in col.cast(_arrow(d, times_as_int=True)).to_pylist()]


def _check(reader: ProtoReader, d: Any, col: Any, row: int, why: str, expected: list[Any]) -> None:
    assert (row, why) == (-1, ""), (row, why)
    want = _arrow(d)
    assert col.type == want and str(col.type) == str(want)
    assert reader.spark_type == _spark(d)
    got = _values(col, d)
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert tagged(g) == tagged(e), f"row {i}:\n got {g}\nwant {e}"


def _column(rng: random.Random, schema: _Schema, n: int,
            rewrite: _Rewrite | None = None) -> tuple[list[bytes | None], list[int], list[Any], list[bytes]]:
    """``n`` rows: messages (after a few bytes the start skips, as a registry header) and null
    rows (an Arrow null, a start of -1, or both). Returns values, starts, expected values and
    each row's message bytes (b"" for a null row)."""
    fill = _Fill(rng, schema.syntax)
    values: list[bytes | None] = []
    starts: list[int] = []
    expected: list[Any] = []
    wire: list[bytes] = []
    for _ in range(n):
        r = rng.random()
        if r < 0.12:
            kind = rng.choice(["arrow", "start", "both"])
            values.append(None if kind != "start" else rng.randbytes(5))
            starts.append(-1 if kind != "arrow" else 0)
            expected.append(None)
            wire.append(b"")
            continue
        m = schema.cls()
        if r > 0.15:
            fill.message(m)
        data = m.SerializeToString(deterministic=rng.random() < 0.5)
        if rewrite is not None:
            data = rewrite.message(data, schema.desc)
        prefix = rng.randbytes(rng.choice([0, 0, 1, 5]))
        values.append(prefix + data)
        starts.append(len(prefix))
        expected.append(_expect(schema.cls.FromString(data)))
        wire.append(data)
    return values, starts, expected, wire


def _syntax(seed: int) -> str:
    return "proto2" if seed % 4 == 3 else "proto3"


# --------------------------------------------------------------------------- a) protobuf's bytes


@pytest.mark.parametrize("seed", range(60))
def test_decodes_like_protobuf(seed: int) -> None:
    schema = _Schema(seed, _syntax(seed))
    rng = random.Random(seed * 7919 + 1)
    reader = ProtoReader(schema.desc)
    values, starts, expected, _ = _column(rng, schema, rng.randint(1, 12))
    col, row, why = _decode(reader, values, starts, slice_=seed % 2 == 1)
    _check(reader, schema.desc, col, row, why, expected)


def test_the_generated_schemas_cover_every_kind() -> None:
    """The seeds of test_decodes_like_protobuf hold every kind the decoder reads."""
    seen: set[str] = set()

    def walk(d: Any, syntax: str, stack: tuple[str, ...] = ()) -> None:
        for f in d.fields:
            where = "map" if _is_map(f) else "repeated" if _repeated(f) else "single"
            packed = "packed" if _repeated(f) and _packable(f) and f.is_packed else "unpacked"
            seen.add(f"{where}:{f.type}")
            if where == "repeated" and _packable(f):
                seen.add(f"{packed}:{syntax}")
            if f.has_presence and where == "single" and f.type != MESSAGE:
                seen.add(f"presence:{syntax}")
            if f.containing_oneof is not None:
                seen.add("oneof" if not f.containing_oneof.name.startswith("_") else "optional")
            if _is_time(f):
                seen.add(f"{where}:{f.message_type.full_name}")
            if _is_map(f):
                kf, vf = f.message_type.fields_by_number[1], f.message_type.fields_by_number[2]
                seen.add(f"key:{kf.type}")
                seen.add(f"value:{vf.message_type.full_name if _is_time(vf) else vf.type}")
            if f.type == MESSAGE and f.message_type.full_name not in stack:
                walk(f.message_type, syntax, (*stack, f.message_type.full_name))
            if f.type == ENUM and any(a.number == b.number for a in f.enum_type.values
                                      for b in f.enum_type.values if a is not b):
                seen.add("alias")

    for seed in range(60):
        walk(_Schema(seed, _syntax(seed)).desc, _syntax(seed))
    want = {f"single:{t}" for t in [*SCALARS, ENUM, MESSAGE]} | {f"repeated:{t}" for t in [*SCALARS, ENUM,
                                                                                          MESSAGE]}
    want |= {f"key:{t}" for t in KEYS} | {f"value:{t}" for t in [*SCALARS, ENUM, MESSAGE]}
    want |= {f"{w}:{n}" for w in ("single", "repeated", "map") for n in TIME if w != "map"}
    want |= {f"value:{n}" for n in TIME} | {"oneof", "optional", "alias"}
    want |= {f"{p}:{s}" for p in ("packed", "unpacked") for s in ("proto2", "proto3")}
    want |= {"presence:proto2", "presence:proto3"}
    assert want <= seen, sorted(want - seen)


# --------------------------------------------------------------------------- b) other writers' bytes


@pytest.mark.parametrize("seed", range(60))
def test_rewritten_wire_decodes_like_protobuf(seed: int) -> None:
    """Fields shuffled, packed fields unpacked (in chunks), singular scalars written twice,
    oneof members overridden, unknown fields, over-long varints, entries without key or value."""
    schema = _Schema(seed, _syntax(seed))
    rng = random.Random(seed * 104729 + 3)
    flags = dict(shuffle=True, unpack=True, dup=True, oneof=True, unknown=True, pad=True, drop=True)
    if seed % 5 == 4:  # one at a time, too
        flags = {k: k == list(flags)[seed // 5 % len(flags)] for k in flags}
    rewrite = _Rewrite(rng, _Fill(rng, schema.syntax), **flags)
    reader = ProtoReader(schema.desc)
    values, starts, expected, _ = _column(rng, schema, rng.randint(1, 12), rewrite)
    col, row, why = _decode(reader, values, starts, slice_=seed % 2 == 0)
    _check(reader, schema.desc, col, row, why, expected)


@pytest.mark.parametrize("seed", range(20))
def test_high_bits_of_32_bit_varints_are_dropped(seed: int) -> None:
    """An int32, uint32, sint32 or enum written as a varint with bits above 32 reads as its low
    32 bits (protobuf's parsers, Java's too): 2^32 is 0, the default, so null when the field has
    no presence. (Singular fields written twice: protobuf's serializers leave defaults out.)"""
    schema = _Schema(seed, _syntax(seed))
    rng = random.Random(seed * 31 + 5)
    rewrite = _Rewrite(rng, _Fill(rng, schema.syntax), widen=True, dup=True)
    reader = ProtoReader(schema.desc)
    values, starts, expected, _ = _column(rng, schema, 12, rewrite)
    col, row, why = _decode(reader, values, starts)
    _check(reader, schema.desc, col, row, why, expected)


def _file(syntax: str, fields: list[tuple[Any, ...]], enums: dict[str, list[tuple[str, int]]] | None = None,
          inner: list[tuple[Any, ...]] | None = None, name: str = "t") -> Any:
    """The message ``name.M`` of fields (name, number, type, label "single"/"optional"/"repeated"/
    "packed"/"unpacked", type name, oneof name) and, when given, a message ``Inner``."""
    fdp = descriptor_pb2.FileDescriptorProto(name=f"{name}.proto", package=name, syntax=syntax)
    fdp.dependency.extend(WKT_FILES)
    for en, values in (enums or {}).items():
        e = fdp.enum_type.add(name=en)
        for vn, number in values:
            e.value.add(name=vn, number=number)
        if len({n for _, n in values}) < len(values):
            e.options.allow_alias = True
    for mname, spec in (("M", fields), ("Inner", inner)):
        if spec is None:
            continue
        m = fdp.message_type.add(name=mname)
        oneofs: list[str] = []
        optional = []
        for fname, number, t, *rest in spec:
            label = rest[0] if rest else "single"
            f = m.field.add(name=fname, number=number, type=t,
                            label=FDP.LABEL_REPEATED if label in ("repeated", "packed", "unpacked")
                            else FDP.LABEL_OPTIONAL)
            if label in ("packed", "unpacked"):
                f.options.packed = label == "packed"
            if len(rest) > 1 and rest[1]:
                f.type_name = rest[1]
            if len(rest) > 2 and rest[2]:
                if rest[2] not in oneofs:
                    oneofs.append(rest[2])
                    m.oneof_decl.add(name=rest[2])
                f.oneof_index = oneofs.index(rest[2])
            if label == "optional" and syntax == "proto3":
                f.proto3_optional = True
                optional.append(f)
            if t == MESSAGE and label == "map":
                raise AssertionError("use _map")
        for f in optional:
            f.oneof_index = len(m.oneof_decl)
            m.oneof_decl.add(name=f"_{f.name}")
    return fdp


def _map(fdp: Any, field: str, number: int, key: int, value: int, value_type: str = "") -> Any:
    """Add map field ``field`` to ``M`` of ``fdp``."""
    m = fdp.message_type[0]
    entry = m.nested_type.add(name=field.capitalize() + "Entry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=key, label=FDP.LABEL_OPTIONAL)
    v = entry.field.add(name="value", number=2, type=value, label=FDP.LABEL_OPTIONAL)
    if value_type:
        v.type_name = value_type
    m.field.add(name=field, number=number, type=MESSAGE, label=FDP.LABEL_REPEATED,
                type_name=f".{fdp.package}.M.{entry.name}")
    return fdp


def _reader(fdp: Any) -> tuple[ProtoReader, Any, Any]:
    pool = pool_of([fdp])
    d = pool.FindMessageTypeByName(f"{fdp.package}.M")
    return ProtoReader(d), d, message_factory.GetMessageClass(d)


def _one(fdp: Any, data: bytes) -> Any:
    """The decoder's value of message bytes ``data`` (between two empty messages), times as ints."""
    reader, d, _ = _reader(fdp)
    col, row, why = _decode(reader, [b"", data, b""], [0, 0, 0])
    assert (row, why) == (-1, ""), why
    return _values(col, d)[1]


def test_implicit_int32_and_enum_of_only_high_bits_are_null() -> None:
    """Minimal case of test_high_bits_of_32_bit_varints_are_dropped: the varint 2^32 is the
    int32 0 (protobuf drops the high bits), a proto3 int32's default: null, as for b"\\x08\\x00"."""
    fdp = _file("proto3", [("a", 1, INT32), ("u", 2, UINT32), ("z", 3, SINT32),
                           ("e", 4, ENUM, "single", ".t.E")], enums={"E": [("Z", 0), ("O", 1)]})
    high = _enc_varint(1 << 32)
    data = b"".join(_tag(n, 0) + high for n in (1, 2, 3, 4))
    _, _, cls = _reader(fdp)
    assert _expect(cls.FromString(data)) == {"a": None, "u": None, "z": None, "e": None}
    assert _one(fdp, data) == {"a": None, "u": None, "z": None, "e": None}


# --------------------------------------------------------------------------- c) semantics, pinned


def test_documented_differences_from_protobufs_parser() -> None:
    """Where Spark's view is not protobuf's parsed message: a singular message written twice
    keeps the last (protobuf merges them), a map keeps every entry of a key written twice, and
    an entry with an unknown field (upb drops it to the unknown fields; Java keeps it)."""
    fdp = _map(_file("proto3", [("m", 1, MESSAGE, "single", ".t.Inner")],
                     inner=[("a", 1, INT32), ("b", 2, INT32)]), "mp", 2, STRING, INT32)
    inner1 = _rec(1, 0, 5)
    inner2 = _rec(2, 0, 7)
    entry1 = _rec(1, 2, b"k") + _rec(2, 0, 1)
    entry2 = _rec(1, 2, b"k") + _rec(2, 0, 2)
    entry3 = _rec(1, 2, b"u") + _rec(9, 0, 1) + _rec(2, 0, 3)
    data = (_rec(1, 2, inner1) + _rec(1, 2, inner2)
            + _rec(2, 2, entry1) + _rec(2, 2, entry2) + _rec(2, 2, entry3))
    got = _one(fdp, data)
    assert got == {"m": {"a": None, "b": 7}, "mp": [("k", 1), ("k", 2), ("u", 3)]}
    _, _, cls = _reader(fdp)
    parsed = cls.FromString(data)
    assert (parsed.m.a, parsed.m.b, dict(parsed.mp)) == (5, 7, {"k": 2})


def test_pinned_semantics() -> None:
    """Hand-made bytes for the rules the differential tests see only by chance."""
    fdp = _file("proto3", [
        ("i", 1, INT32), ("oi", 2, INT32, "optional"), ("s", 3, STRING), ("f", 4, FLOAT), ("d", 5, DOUBLE),
        ("t", 6, MESSAGE, "single", ".google.protobuf.Timestamp"),
        ("du", 7, MESSAGE, "single", ".google.protobuf.Duration"),
        ("a", 8, STRING, "single", "", "o"), ("b", 9, MESSAGE, "single", ".t.Inner", "o"),
        ("r", 10, SINT32, "repeated"), ("e", 11, ENUM, "single", ".t.Enm"), ("u64", 12, UINT64),
        ("f32", 13, FIXED32), ("bo", 14, BOOL)],
        enums={"Enm": [("ZERO", 0), ("ONE", 1), ("UNO", 1)]}, inner=[("x", 1, INT32)])
    fdp = _map(_map(fdp, "mi", 20, INT32, MESSAGE, ".t.Inner"), "mt", 21, BOOL, MESSAGE,
               ".google.protobuf.Timestamp")
    fdp = _map(fdp, "me", 22, STRING, ENUM, ".t.Enm")
    data = (_rec(1, 0, 0) + _rec(2, 0, 0) + _rec(3, 2, b"") + _rec(4, 5, struct.pack("<f", -0.0))
            + _rec(5, 1, bytes(8))
            + _rec(6, 2, _rec(1, 0, -5 & M64) + _rec(2, 0, -1500 & M64))
            + _rec(7, 2, _rec(1, 0, 1) + _rec(2, 0, 999))
            + _rec(9, 2, _rec(1, 0, 3)) + _rec(8, 2, b"last")  # a oneof: the last member
            + _rec(10, 2, _enc_varint(1) + _enc_varint(2)) + _rec(10, 0, 5)  # packed, then not
            + _rec(11, 0, 7) + _rec(12, 0, M64) + _rec(13, 5, b"\xff\xff\xff\xff") + _rec(14, 0, 1 << 40)
            + _rec(20, 2, _rec(1, 0, 4)) + _rec(21, 2, b"") + _rec(22, 2, _rec(2, 0, 1)))
    got = _one(fdp, data)
    assert tagged(got) == tagged({
        "i": None, "oi": 0, "s": None, "f": -0.0, "d": None, "t": -5_000_001, "du": 1_000_000,
        "a": "last", "b": None, "r": [-1, 1, -3], "e": "UNKNOWN_ENUM_VALUE_Enm_7", "u64": -1, "f32": -1,
        "bo": True, "mi": [(4, {"x": None})], "mt": [(False, 0)], "me": [("", "ONE")]})
    _, _, cls = _reader(fdp)
    assert tagged(_expect(cls.FromString(data))) == tagged(got)


# --------------------------------------------------------------------------- d) malformed values


def _python_parses(cls: Any, data: bytes) -> bool:
    try:
        cls.FromString(data)
        return True
    except DecodeError:
        return False


def _quirks(data: bytes, d: Any, depth: int = 0, out: set[str] | None = None) -> set[str]:
    """Where the decoder differs from protobuf's parser (upb) on ``data`` (message ``d``) by
    design: a known field in another wire type or a group fails the row
    (protobuf skips them), as a Timestamp beyond Spark's microseconds does; a singular message
    written twice is the last (protobuf merges), a map key written twice stays twice; tags of 6
    to 10 bytes, lengths of 6 to 10 and field numbers of 2^29 and more are read (upb refuses
    them). And upb moves a map entry holding unknown fields to the message's unknown fields,
    where Java's parser (Spark's) keeps the entry. Only up to the first thing neither reads."""
    out = set() if out is None else out
    seen: set[int] = set()
    keys: dict[int, set[Any]] = {}
    i = 0
    while i < len(data):
        at = i
        try:
            tag, i = _varint(data, i)
        except ValueError:
            return out
        if i - at > 5:
            out.add("long tag")
        num, wt = tag >> 3, tag & 7
        if num >= 1 << 29:
            out.add("big number")
        if wt in (3, 4):
            out.add("group")
            return out
        if wt == 2:
            try:
                n_at = i
                _, n_end = _varint(data, i)
                if n_end - n_at > 5:
                    out.add("long length")
            except ValueError:
                return out
        try:
            v, i = _payload(data, i, wt)
        except ValueError:
            return out
        f = d.fields_by_number.get(num)
        if f is None:
            continue
        if wt != _wire_of(f.type) and not (_repeated(f) and _packable(f) and wt == 2):
            out.add("wire type")
            return out
        if f.type != MESSAGE:
            continue
        if _is_time(f):
            secs = 0
            for n2, w2, v2 in _records_loose(v):
                if n2 == 1 and w2 == 0:
                    secs = _signed(v2, 64)
            if abs(secs) > MAX_SECONDS:
                out.add("time")
        elif not _repeated(f):
            if num in seen:
                out.add("message twice")
            seen.add(num)
        elif _is_map(f):
            key = _entry_key(v, f.message_type.fields_by_number[1])
            if key in keys.setdefault(num, set()):
                out.add("key twice")
            keys[num].add(key)
            if any(n not in (1, 2) for n, _, _ in _records_loose(v)):
                out.add("entry with unknown fields")
        if depth > 60:
            out.add("depth")
        _quirks(v, f.message_type, depth + 1, out)
    return out


def _records_loose(b: bytes) -> list[tuple[int, int, Any]]:
    out = []
    i = 0
    try:
        while i < len(b):
            tag, i = _varint(b, i)
            if tag & 7 in (3, 4):
                break
            v, i = _payload(b, i, tag & 7)
            out.append((tag >> 3, tag & 7, v))
    except ValueError:
        pass
    return out


def _entry_key(entry: bytes, kf: Any) -> Any:
    key: Any = 0 if kf.type != STRING else b""
    for n, w, v in _records_loose(entry):
        if n == 1 and w == _wire_of(kf.type):
            key = v
    if isinstance(key, int):
        if kf.type in (INT32, UINT32, SINT32):
            key &= 0xFFFFFFFF
        elif kf.type == BOOL:
            key = bool(key)
    return key


def _check_against_protobuf(reader: ProtoReader, schema_cls: Any, d: Any, rows: list[bytes]) -> int:
    """Decode ``rows`` as the caller does; each row fails exactly when protobuf fails it (but for
    ``_quirks``), the others are protobuf's values. Returns how many failed."""
    col, bad = _decode_all(reader, list(rows), [0] * len(rows))
    got = _values(col, d)
    for i, w in enumerate(rows):
        q = _quirks(w, d)
        ok = _python_parses(schema_cls, w)
        if i in bad:
            assert got[i] is None
            assert not ok or q & {"wire type", "group", "time", "depth"}, (i, w.hex(), bad[i], q)
            continue
        assert ok or q & {"long tag", "long length", "big number"}, (i, w.hex(), q)
        if ok and not q & {"message twice", "key twice", "entry with unknown fields"}:
            want = _expect(schema_cls.FromString(w))
            assert tagged(got[i]) == tagged(want), f"row {i} {w.hex()}:\n got {got[i]}\nwant {want}"
    return len(bad)


@pytest.mark.parametrize("seed", range(0, 40, 4))
def test_every_truncation(seed: int) -> None:
    """Each prefix of a few messages (rewritten: shuffled, padded, unknown fields) between good
    rows: a prefix protobuf reads (cut at a field's end) is that message, any other fails its
    row and only it."""
    schema = _Schema(seed, "proto3")
    rng = random.Random(seed + 11)
    rewrite = _Rewrite(rng, _Fill(rng, "proto3"), shuffle=True, unknown=True, pad=True, unpack=True)
    reader = ProtoReader(schema.desc)
    _, _, _, wires = _column(rng, schema, 8, rewrite)
    wires = sorted((w for w in wires if w), key=len)[-2:]
    cuts = [w[:k] for w in wires for k in range(len(w))]
    good = wires[0]
    failed = 0
    for at in range(0, len(cuts), 16):
        chunk = cuts[at:at + 16]
        rows = [x for c in chunk for x in (good, c)] + [good]
        failed += _check_against_protobuf(reader, schema.cls, schema.desc, rows)
    assert failed > len(cuts) // 4


@pytest.mark.parametrize("seed", range(16))
def test_mutated_messages(seed: int) -> None:
    """Messages with bytes flipped, inserted, deleted, duplicated or spliced from another row."""
    schema = _Schema(seed, "proto3")
    rng = random.Random(seed + 1000)
    reader = ProtoReader(schema.desc)
    _, _, _, wires = _column(rng, schema, 10)
    wires = [w for w in wires if w] or [b""]
    rows = []
    for _ in range(120):
        w = bytearray(rng.choice(wires))
        for _ in range(rng.choice([1, 1, 2, 3])):
            how = rng.choice(["flip", "byte", "insert", "delete", "dup", "splice"])
            i = rng.randint(0, len(w))
            if how == "flip" and w:
                i = min(i, len(w) - 1)
                w[i] ^= 1 << rng.randint(0, 7)
            elif how == "byte" and w:
                w[min(i, len(w) - 1)] = rng.choice([0, 0x80, 0xFF, 0x7F, rng.randint(0, 255)])
            elif how == "insert":
                w[i:i] = rng.randbytes(rng.randint(1, 4))
            elif how == "delete":
                del w[i:i + rng.randint(1, 4)]
            elif how == "dup":
                j = rng.randint(i, len(w))
                w[j:j] = w[i:j]
            else:
                other = rng.choice(wires)
                j = rng.randint(0, len(other))
                w = w[:i] + other[j:j + rng.randint(0, 12)] + w[i:]
        rows.append(bytes(w))
    failed = _check_against_protobuf(reader, schema.cls, schema.desc, rows)
    assert 0 < failed < len(rows)


def test_random_bytes() -> None:
    """Random bytes, rows of them, for a schema of every kind: protobuf's verdict or a quirk."""
    rng = random.Random(77)
    failed = total = 0
    for seed in (1, 2, 5, 6):
        schema = _Schema(seed, "proto3")
        reader = ProtoReader(schema.desc)
        rows = [rng.randbytes(rng.randint(0, 24)) for _ in range(150)]
        # Random bytes behind a valid tag of each field, too.
        for f in schema.desc.fields:
            for wt in (0, 1, 2, 5):
                rows.append(_tag(f.number, wt) + rng.randbytes(rng.randint(0, 12)))
        failed += _check_against_protobuf(reader, schema.cls, schema.desc, rows)
        total += len(rows)
    assert total // 3 < failed < total


# The message every hand-made bad value below is read with.
ALL = _map(_map(_file("proto3", [
    ("i32", 1, INT32), ("i64", 2, INT64), ("u32", 3, UINT32), ("u64", 4, UINT64), ("s32", 5, SINT32),
    ("s64", 6, SINT64), ("f32", 7, FIXED32), ("f64", 8, FIXED64), ("sf32", 9, SFIXED32),
    ("sf64", 10, SFIXED64),
    ("fl", 11, FLOAT), ("db", 12, DOUBLE), ("b", 13, BOOL), ("s", 14, STRING), ("by", 15, BYTES),
    ("e", 16, ENUM, "single", ".all.E"), ("m", 17, MESSAGE, "single", ".all.Inner"),
    ("ri", 18, INT32, "repeated"), ("rs", 19, STRING, "repeated"),
    ("ts", 21, MESSAGE, "single", ".google.protobuf.Timestamp"),
    ("du", 22, MESSAGE, "single", ".google.protobuf.Duration"),
    ("os", 23, STRING, "single", "", "o"), ("om", 24, MESSAGE, "single", ".all.Inner", "o"),
    ("oi", 25, INT32, "optional"), ("rm", 26, MESSAGE, "repeated", ".all.Inner"),
    ("rf", 28, FIXED64, "repeated"), ("rt", 29, MESSAGE, "repeated", ".google.protobuf.Timestamp"),
    ("big", 5000, INT32)], enums={"E": [("Z", 0), ("O", 1)]},
    inner=[("name", 1, STRING), ("vals", 2, SINT32, "repeated")], name="all"),
    "ms", 20, STRING, MESSAGE, ".all.Inner"), "mi", 27, INT32, STRING)


def _t(num: int, wt: int) -> bytes:
    return _tag(num, wt)


# a byte no UTF-8 has, an overlong NUL, a surrogate, past U+10FFFF, cut, a lone continuation, 5 bytes
BAD_UTF8 = [b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82", b"a\x80",
            b"\xf8\x88\x80\x80\x80"]
LONG = b"\x80" * 10 + b"\x00"  # a varint of 11 bytes

BAD: list[tuple[str, bytes, bool]] = [  # (name, message bytes, whether protobuf's parser fails it too)
    ("tag of 11 bytes", b"\x88" + b"\x80" * 9 + b"\x00", True),
    ("value of 11 bytes", _t(2, 0) + LONG, True),
    ("length of 11 bytes", _t(14, 2) + LONG, True),
    ("packed item of 11 bytes", _t(18, 2) + b"\x0b" + LONG, True),
    ("ends in a tag", b"\x88", True),
    ("ends in a value", _t(1, 0) + b"\xff", True),
    ("ends in a length", _t(14, 2) + b"\x80", True),
    ("length past the end", _t(14, 2) + b"\x05abc", True),
    ("length 2^62", _t(15, 2) + _enc_varint(1 << 62), True),
    ("length past a nested end", _t(17, 2) + b"\x04" + _t(1, 2) + b"\x05ab", True),
    ("fixed32 cut", _t(7, 5) + b"\x01\x02", True),
    ("fixed64 cut", _t(8, 1) + b"\x01" * 7, True),
    ("unknown fixed64 cut", _t(99, 1) + b"\x01" * 7, True),
    ("packed fixed64 of 7 bytes", _t(28, 2) + b"\x07" + b"\x01" * 7, True),
    ("packed varint cut", _t(18, 2) + b"\x02\x05\xff", True),
    ("field number 0", b"\x00\x01", True),
    ("field number 0, length", b"\x02\x00", True),
    ("wire type 6", b"\x0e", True),
    ("wire type 7", _t(99, 7), True),
    ("end group alone", b"\x0c", True),
    ("group of an unknown field", _t(99, 3) + _t(1, 0) + b"\x01" + _t(99, 4), False),
    ("group of a known field", _t(1, 3) + _t(99, 4), True),
    ("group in a nested message", _rec(17, 2, _t(99, 3) + _t(99, 4)), False),
    ("group in a Timestamp", _rec(21, 2, _t(9, 3) + _t(9, 4)), False),
    ("cut inside a Timestamp", _t(21, 2) + b"\x02" + _t(1, 0) + b"\xff", True),
    ("cut inside a map entry", _t(20, 2) + b"\x03" + _t(1, 2) + b"\x05a", True),
    ("cut inside a repeated message", _t(26, 2) + b"\x02" + _t(2, 0) + b"\x80", True),
    ("a Timestamp past Spark's microseconds", _rec(21, 2, _rec(1, 0, 1 << 62)), False),
    ("a Duration before them", _rec(22, 2, _rec(1, 0, -(1 << 62))), False),
    ("a Timestamp past them in a list", _rec(29, 2, _rec(1, 0, MAX_SECONDS + 3)), False),
    ("a Timestamp's seconds wrapping", _rec(21, 2, _rec(1, 0, (1 << 64) // 1000 + 1)), False),
] + [
    (f"bad UTF-8 {u.hex()} in {where}", data, True)
    for u in BAD_UTF8
    for where, data in [
        ("a string", _t(14, 2) + bytes([len(u)]) + u),
        ("a nested string", _t(17, 2) + bytes([len(u) + 2]) + _t(1, 2) + bytes([len(u)]) + u),
        ("a repeated string", _t(19, 2) + b"\x01a" + _t(19, 2) + bytes([len(u)]) + u),
        ("a map key", _t(20, 2) + bytes([len(u) + 2]) + _t(1, 2) + bytes([len(u)]) + u),
        ("a map value", _rec(27, 2, _rec(1, 0, 1) + _rec(2, 2, u))),
        ("a oneof member", _t(23, 2) + bytes([len(u)]) + u),
    ]
] + [
    # Only the last of a singular field is its value, but protobuf reads (and checks) each.
    # (Failing when written: the decoder reads only the last, a oneof's last member.)
    ("bad UTF-8 in a string written before the valid one", _rec(14, 2, b"\xff") + _rec(14, 2, b"a"), True),
    ("bad UTF-8 in a oneof member another one overrides", _rec(23, 2, b"\xff") + _rec(24, 2, b""), True),
    ("a malformed message written before a good one", _rec(17, 2, b"\x08") + _rec(17, 2, b""), True),
    ("a malformed Timestamp written before a good one", _rec(21, 2, b"\x08") + _rec(21, 2, b""), True),
    ("field number 0 inside a Timestamp", _rec(21, 2, b"\x00\x00"), True),  # (failing: put_time skips it)
    ("field number 0 inside a map entry", _rec(27, 2, b"\x00\x00"), True),
    ("wire type 6 inside a Timestamp", _rec(21, 2, b"\x0e"), True),
] + [
    (f"wire type {wt} for {name}", _t(num, wt) + {0: b"\x01", 1: b"\0" * 8, 2: b"\x01\x01", 5: b"\0" * 4}[wt],
     False)
    for name, num, right in [("int32", 1, 0), ("uint64", 4, 0), ("sint64", 6, 0), ("fixed32", 7, 5),
                             ("fixed64", 8, 1), ("float", 11, 5), ("double", 12, 1), ("bool", 13, 0),
                             ("string", 14, 2), ("bytes", 15, 2), ("enum", 16, 0), ("message", 17, 2),
                             ("repeated string", 19, 2), ("map", 20, 2), ("Timestamp", 21, 2),
                             ("repeated message", 26, 2), ("packed fixed64", 28, 1), ("field 5000", 5000, 0)]
    for wt in (0, 1, 2, 5)
    if wt != right and not (wt == 2 and num == 28)  # (a singular scalar written packed is wrong too)
] + [
    ("wire type 0 for a map entry's message value", _rec(20, 2, _rec(2, 0, 1)), False),
    ("a map's string key written as a varint", _rec(20, 2, _rec(1, 0, 1)), False),
    ("wire type 5 inside a repeated message", _rec(26, 2, _rec(1, 5, b"abcd")), False),
]


@pytest.mark.parametrize(("name", "bad", "protobuf_fails"), BAD, ids=[b[0] for b in BAD])
def test_bad_values_fail_only_their_row(name: str, bad: bytes, protobuf_fails: bool) -> None:
    reader, d, cls = _reader(ALL)
    assert _python_parses(cls, bad) != protobuf_fails, name
    m = cls(i32=1, s="x", ri=[1, -1], rf=[5])
    m.ms["k"].name = "v"
    m.rt.add(seconds=1)
    good = [m.SerializeToString(), b""]
    values = [good[0], b"\x01\x02" + bad, good[1], bad, good[0]]
    starts = [0, 2, 0, 0, 0]
    col, row, why = _decode(reader, values, starts)
    assert col is None and row == 1 and why, (row, why)
    col, bad_rows = _decode_all(reader, values, starts)
    assert sorted(bad_rows) == [1, 3]
    want = _expect(cls.FromString(good[0]))
    assert tagged(_values(col, d)) == tagged([want, None, _expect(cls()), None, want])


def test_null_and_empty_rows() -> None:
    reader, d, cls = _reader(ALL)
    col, row, why = _decode(reader, [None, b"", b"xx", b"x"], [0, 0, -1, 1])
    assert (row, why) == (-1, "")
    empty = _expect(cls())
    assert tagged(_values(col, d)) == tagged([None, empty, None, empty])
    assert empty["ri"] == [] and empty["ms"] == [] and empty["i32"] is None
    col, row, why = _decode(reader, [], [])
    assert (row, why) == (-1, "") and len(col) == 0


def test_a_start_past_its_value_is_refused() -> None:
    reader, _, _ = _reader(ALL)
    with pytest.raises(ValueError):
        _decode(reader, [b"\x08\x01", b"\x08\x01"], [0, 3])


# --------------------------------------------------------------------------- e) product bugs found here
# Failing when written, with test_implicit_int32_and_enum_of_only_high_bits_are_null (and
# test_high_bits_of_32_bit_varints_are_dropped), the "... written before ..." and "field number 0
# inside a Timestamp" cases of test_bad_values_fail_only_their_row (test_mutated_messages finds
# both), and the last case of test_a_malformed_table_is_refused_not_run.


def test_a_long_enum_names_unknown_values_in_full() -> None:
    """protobuf-java names an unknown number with the enum's whole simple name (the decoder cut
    it at 127 bytes: Enum.name[128])."""
    name = "E" + "x" * 150
    fdp = _file("proto3", [("e", 1, ENUM, "single", f".t.{name}")], enums={name: [("Z", 0)]})
    assert _one(fdp, _rec(1, 0, 7)) == {"e": f"UNKNOWN_ENUM_VALUE_{name}_7"}


def test_a_timestamp_whose_microseconds_overflow_fails_its_row() -> None:
    """seconds * 10^6 + nanos / 1000 past int64 (nanos out of their range, as the wire allows):
    a failed row, as for seconds past it, never a wrapped value. (The decoder bounds the seconds
    only; the addition overflowed, undefined behaviour in C, UBSan: _proto.c put_time. Spark's
    own addition wraps silently; failing the row is what the decoder means to do.)"""
    reader, d, cls = _reader(ALL)
    for secs, nanos in [(MAX_SECONDS, 2 ** 31 - 1), (-MAX_SECONDS, -(2 ** 31))]:
        m = cls()
        m.ts.seconds, m.ts.nanos = secs, nanos
        us = secs * 1_000_000 + _trunc_div(nanos, 1000)
        assert not -(2 ** 63) <= us < 2 ** 63
        col, row, _ = _decode(reader, [m.SerializeToString()], [0])
        assert col is None and row == 0, _values(col, d)


def test_the_largest_timestamps_spark_reads() -> None:
    """Spark reads seconds up to Long.MaxValue / 10^6 (multiplyExact): 9223372036854 s, and
    the nanos that keep the sum in a long. (The decoder's bound stopped one second short, on
    both sides.)"""
    reader, d, cls = _reader(ALL)
    rows = []
    for secs, nanos in [(9223372036854, 0), (9223372036854, 775_807_999), (-9223372036854, 0),
                        (-9223372036854, -775_808_999)]:
        m = cls()
        m.ts.seconds, m.ts.nanos = secs, nanos
        rows.append(m.SerializeToString())
    col, row, why = _decode(reader, rows, [0] * len(rows))
    assert (row, why) == (-1, "")
    assert [v["ts"] for v in _values(col, d)] == [9223372036854000000, 2 ** 63 - 1, -9223372036854000000,
                                                  -(2 ** 63)]


def test_a_proto2_enums_unknown_number_is_an_unknown_field() -> None:
    """A proto2 enum is closed: protobuf (Java's DynamicMessage too, which Spark reads) keeps a
    number it does not name as an unknown field, so the field keeps what it had (null if
    nothing) and a list lacks the item; only open (proto3) enums name the number
    UNKNOWN_ENUM_VALUE_... (the decoder does for every enum)."""
    fdp = _file("proto2", [("e", 1, ENUM, "single", ".t.E"), ("r", 2, ENUM, "repeated", ".t.E")],
                enums={"E": [("A", 1), ("B", 2)]})
    data = _rec(1, 0, 1) + _rec(1, 0, 7) + _rec(2, 0, 2) + _rec(2, 0, 9) + _rec(2, 0, 1)
    _, _, cls = _reader(fdp)
    want = _expect(cls.FromString(data))
    assert want == {"e": "A", "r": ["B", "A"]}
    assert _one(fdp, data) == want


# --------------------------------------------------------------------------- f) bad tables


def _table_call(msgs: Any, enums: Any, outs: Any, values: list[bytes] | None = None) -> Any:
    from spark_ext.schemas import _proto

    values = [b"\x08\x01"] if values is None else values
    offs = np.cumsum([0, *map(len, values)]).astype(np.int32)
    return _proto.decode(msgs, enums, outs, (None, offs.tobytes(), b"".join(values)),
                         np.zeros(len(values), np.int32).tobytes())


def test_a_good_table_decodes() -> None:
    bad, bufs = _table_call([(0, ((1, INT32, 1, 0, -1, -1, -1, "a"),))], [], [(4, 0, (1,)), (2, 4, ())])
    assert bad is None and bufs[1][0] == 1


STRUCT_INT = [(4, 0, (1,)), (2, 4, ())]
STRUCT_BIN = [(4, 0, (1,)), (3, 0, ())]


def _fields(*fields: tuple[Any, ...]) -> list[Any]:
    return [(0, tuple((*f, "a") for f in fields))]


def _table(name: str, msgs: Any, enums: Any, outs: Any, value: bytes) -> Any:
    return pytest.param(msgs, enums, outs, value, id=name)


@pytest.mark.parametrize(("msgs", "enums", "outs", "value"), [
    _table("no root message", [], [], STRUCT_INT, b""),
    _table("no outputs", _fields((1, INT32, 1, 0, -1, -1, -1)), [], [], b""),
    _table("the root's output no struct", _fields((1, INT32, 1, 0, -1, -1, -1)), [], [(2, 4, ())], b""),
    _table("an output past the last", _fields((1, INT32, 5, 0, -1, -1, -1)), [], STRUCT_INT, b""),
    _table("an output -1", _fields((1, INT32, -1, 0, -1, -1, -1)), [], STRUCT_INT, b""),
    _table("field number 0", _fields((0, INT32, 1, 0, -1, -1, -1)), [], STRUCT_INT, b""),
    _table("a group", _fields((1, GROUP, 1, 0, -1, -1, -1)), [], STRUCT_INT, b""),
    _table("no such type", _fields((1, 99, 1, 0, -1, -1, -1)), [], STRUCT_INT, b""),
    _table("no such message", _fields((1, MESSAGE, 1, 0, 7, -1, -1)), [], [(4, 0, (1,)), (4, 0, ())],
           b"\x0a\x00"),
    _table("no such map entry", _fields((1, MESSAGE, 1, 5, 7, -1, -1)), [],
           [(4, 0, (1,)), (6, 0, (2, 3)), (3, 0, ()), (3, 0, ())], b"\x0a\x00"),
    _table("no such enum", _fields((1, ENUM, 1, 0, -1, 3, -1)), [], STRUCT_BIN, b"\x08\x01"),
    _table("an int into a binary output", _fields((1, INT32, 1, 0, -1, -1, -1)), [], STRUCT_BIN, b"\x08\x01"),
    _table("a list into an int output", _fields((1, INT32, 1, 1, -1, -1, -1)), [], STRUCT_INT, b"\x08\x01"),
    _table("a message into an int output", _fields((1, MESSAGE, 1, 0, 0, -1, -1)), [], STRUCT_INT,
           b"\x0a\x00"),
    _table("a Timestamp into a binary output", [*_fields((1, MESSAGE, 1, 0, 1, -1, -1)), (2, ())], [],
           STRUCT_BIN, b"\x0a\x00"),
    _table("a list without its item", _fields((1, INT32, 1, 0, -1, -1, -1)), [], [(4, 0, (1,)), (5, 0, ())],
           b""),
    _table("a child before its parent", _fields((1, INT32, 1, 0, -1, -1, -1)), [], [(4, 0, (0,)), (2, 4, ())],
           b""),
    _table("a width past 16", _fields((1, INT32, 1, 0, -1, -1, -1)), [], [(4, 0, (1,)), (2, 99, ())], b""),
    _table("an enum's symbols missing", _fields((1, ENUM, 1, 0, -1, 0, -1)), [("E", b"\0\0\0\0", [])],
           STRUCT_BIN, b""),
    _table("an enum's symbol not bytes", _fields((1, ENUM, 1, 0, -1, 0, -1)), [("E", b"\0\0\0\0", ["A"])],
           STRUCT_BIN, b"\x08\x00"),
    # Found by this file: a string (or bytes, or an enum's name) into an output of fixed width
    # wrote bytes of its length there, fewer than the width: the column's data buffer came back
    # shorter than its rows, which Arrow then reads past. (put_bin checks no output kind.)
    _table("a string into an int output", _fields((1, STRING, 1, 0, -1, -1, -1)), [], STRUCT_INT,
           b"\x0a\x00"),
])
def test_a_malformed_table_is_refused_not_run(msgs: Any, enums: Any, outs: Any, value: bytes) -> None:
    """The decoder trusts no table: a ValueError (a TypeError for an entry of the wrong Python
    type), never a read or write out of bounds (fuzzed under AddressSanitizer)."""
    with pytest.raises((ValueError, TypeError)):
        _table_call(msgs, enums, outs, [value, b""])


def test_message_paths_read_every_header_as_the_wire_format_says() -> None:
    """The columnar reading of the registry header's message indexes (first message, one
    one-byte index, anything else one by one) agrees row by row with reading each alone."""
    from spark_ext.schemas.protobuf import _indexes, message_paths

    def zz(v: int) -> bytes:
        z, out = (v << 1) ^ (v >> 63), bytearray()
        while True:
            out.append((z & 0x7F) | (0x80 if z > 0x7F else 0))
            z >>= 7
            if not z:
                return bytes(out)

    def head(path: list[int]) -> bytes:
        return b"\0" if path == [0] else zz(len(path)) + b"".join(zz(i) for i in path)

    rng = random.Random(5)
    paths = [[0], [1], [2], [63], [64], [200], [1, 2], [0, 0], [3, 1, 4]]
    values: list[bytes | None] = []
    for _ in range(400):
        k = rng.random()
        if k < 0.05:
            values.append(None)
        elif k < 0.1:
            values.append(b"\0\0\0\0\x07")  # nothing after the schema id
        elif k < 0.15:
            values.append(b"\0\0\0\0\x07" + bytes([0x03]))  # a negative count
        elif k < 0.2:
            values.append(b"\0\0\0\0\x07" + b"\x02\x83")  # cut inside an index
        elif k < 0.25:
            values.append(b"\0\0\0\0\x07" + b"\x02\x01\x08\x01")  # a negative index
        else:
            values.append(b"\0\0\0\0\x07" + head(rng.choice(paths)) + b"\x08\x01")
    column = pa.array(values, pa.binary())
    ids = np.array([-1 if v is None else 7 for v in values], np.int64)
    bad: dict[int, str] = {}
    starts, which, got_paths = message_paths(column.slice(0), ids, 5, bad)
    for r, v in enumerate(values):
        if v is None:
            assert starts[r] == -1 and r not in bad
            continue
        want = _indexes(v[5:]) if len(v) > 5 else None
        if want is None:
            assert r in bad and starts[r] == -1, (r, v)
        else:
            assert r not in bad and got_paths[which[r]] == want[0] and starts[r] == 5 + want[1], (r, v)
