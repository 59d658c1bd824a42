"""The protobuf column encoder (``spark_ext.schemas.protobuf_write`` and its C part
``_proto.c``'s ``encode``) against protobuf's own Python runtime, value by value.

Differential: seeded random Spark struct types (every scalar the derivation supports,
nullable and not, nested structs, arrays of scalars and structs, maps with string / int /
long / bool keys and scalar or struct values, timestamps before 1970 with sub-second parts,
negative day-time intervals), random Arrow columns of them laid out the hard way (every
level sliced to a non-zero offset, children with offsets of their own, junk under null
list slots), the ``.proto`` derived by ``schema_of`` and compiled with protoc, then every
encoded value is

1. parsed by protobuf's parser (``message_factory.GetMessageClass``) to the expected fields;
2. byte-identical to that message's ``SerializeToString()`` (when no map has two entries:
   map order is otherwise free);
3. read back by ``ProtoReader.decode`` to the original column (an array or map that was
   null reads back empty: protobuf has no null repeated field).

Rows protobuf cannot hold (a null array item or map value) are refused by row with a
reason, and the rows around them are still encoded. Then given schemas: hand-written
proto3 / proto2 files with every scalar type, enums, packed and unpacked fields, and the
type mismatches ``check`` must refuse. Pure unit tests: no services, no Spark.
"""

from __future__ import annotations

import math
import random
import struct
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from google.protobuf import message_factory
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DayTimeIntervalType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from spark_ext.schemas import protobuf_write as pw
from spark_ext.schemas.avro import SchemaError
from spark_ext.schemas.avro_write import arrow_type, small_type
from spark_ext.schemas.protobuf import ProtoReader, file_descriptor, pool_of

HEADER = pw.message_header(7, (0,))
MIN_TS = -62135596800000000  # 0001-01-01T00:00:00Z in microseconds
MAX_TS = 253402300799999999  # 9999-12-31T23:59:59.999999Z
I64 = (-(2**63), 2**63 - 1)

SCALARS: list[DataType] = [
    BooleanType(),
    ByteType(),
    ShortType(),
    IntegerType(),
    LongType(),
    FloatType(),
    DoubleType(),
    StringType(),
    BinaryType(),
    TimestampType(),
    TimestampNTZType(),
    DayTimeIntervalType(),
    DayTimeIntervalType(0, 0),
    DayTimeIntervalType(1, 3),
]
MAP_KEYS: list[DataType] = [StringType(), IntegerType(), LongType(), BooleanType(), ByteType(), ShortType()]
STRINGS = ["", "a", "é", "中文", "😀", "\x00", '\n\t"\\', "\u2028", "\ud7ff\ue000", "\U0010ffff", "x" * 200]


# --------------------------------------------------------------------------- compile


def compile_message(text: str, message: str = "topLevelRecord", name: str = "t.proto") -> Any:
    fdp = file_descriptor(text, name)
    return pool_of([fdp]).FindMessageTypeByName(f"{fdp.package}.{message}" if fdp.package else message)


def derived(spark: StructType) -> Any:
    return compile_message(pw.schema_of(spark))


# --------------------------------------------------------------------------- random types


def rand_struct(rng: random.Random, depth: int, width: int = 5) -> StructType:
    fields = []
    for i in range(rng.randint(1, width)):
        name = f"{rng.choice(['a', 'fld', 'x_y', 'v', 'some_long_name'])}{i}"
        fields.append(StructField(name, rand_field_type(rng, depth), rng.random() < 0.6))
    return StructType(fields)


def rand_field_type(rng: random.Random, depth: int) -> DataType:
    roll = rng.random()
    if depth <= 0 or roll < 0.55:
        return rng.choice(SCALARS)
    if roll < 0.7:
        return rand_struct(rng, depth - 1, 3)
    if roll < 0.85:
        item = rand_struct(rng, depth - 1, 3) if rng.random() < 0.3 else rng.choice(SCALARS)
        return ArrayType(item, rng.random() < 0.5)
    value = rand_struct(rng, depth - 1, 3) if rng.random() < 0.3 else rng.choice(SCALARS)
    return MapType(rng.choice(MAP_KEYS), value, rng.random() < 0.5)


# --------------------------------------------------------------------------- random values
# Values are kept raw: timestamps and intervals as int microseconds, floats as the Python
# float of the float32, maps as lists of (key, value).


def f32(x: float) -> float:
    return float(np.float32(x))


def rand_scalar(t: DataType, rng: random.Random) -> Any:
    if isinstance(t, BooleanType):
        return rng.random() < 0.5
    if isinstance(t, ByteType | ShortType | IntegerType | LongType):
        bits = {ByteType: 8, ShortType: 16, IntegerType: 32, LongType: 64}[type(t)]
        lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        return rng.choice([lo, hi, 0, -1, 1, rng.randint(lo, hi), rng.randint(max(lo, -300), min(hi, 300))])
    if isinstance(t, FloatType):
        special = [
            0.0,
            -0.0,
            1.0,
            -1.5,
            0.1,
            math.nan,
            math.inf,
            -math.inf,
            3.4028234663852886e38,
            1e-45,
            1.1754943508222875e-38,
        ]
        if rng.random() < 0.4:
            return f32(rng.choice(special))
        return float(np.array([rng.getrandbits(32)], np.uint32).view(np.float32)[0])
    if isinstance(t, DoubleType):
        special = [0.0, -0.0, 1.0, -2.5, 0.1, math.nan, math.inf, -math.inf, 1.7976931348623157e308, 5e-324]
        if rng.random() < 0.4:
            return rng.choice(special)
        return struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0]
    if isinstance(t, StringType):
        return (
            rng.choice(STRINGS)
            if rng.random() < 0.5
            else "".join(rng.choice("abz09 _-é中😀\x01\x7f") for _ in range(rng.randint(0, 8)))
        )
    if isinstance(t, BinaryType):
        return bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 0, 1, 3, 8, 130])))
    if isinstance(t, TimestampType | TimestampNTZType):
        return rng.choice(
            [
                0,
                -1,
                1,
                -999_999,
                -1_000_000,
                -1_000_001,
                -86_400_000_001,
                MIN_TS,
                MAX_TS,
                MIN_TS + 1,
                1_700_000_000_123_456,
                rng.randint(MIN_TS, MAX_TS),
                rng.randint(MIN_TS, 0),
                rng.randint(-(10**7), 10**7),
            ]
        )
    if isinstance(t, DayTimeIntervalType):
        return rng.choice(
            [
                0,
                -1,
                1,
                -1_500_000,
                1_500_000,
                -999_999,
                86_400_000_000,
                -86_400_000_000,
                I64[0],
                I64[1],
                rng.randint(-3 * 10**17, 3 * 10**17),
                rng.randint(-(10**7), 10**7),
            ]
        )
    raise AssertionError(t)


def rand_row(spark: StructType, rng: random.Random, null_p: float = 0.15) -> dict[str, Any]:
    """A row (never null itself) with nulls at every level below."""
    got = rand_value(spark, rng, null_p, top=False)
    assert got is not None
    return got


def rand_value(
    t: DataType, rng: random.Random, null_p: float = 0.15, depth: int = 0, top: bool = True
) -> Any:
    if top and rng.random() < null_p:
        return None
    if isinstance(t, StructType):
        return {
            f.name: rand_value(f.dataType, rng, null_p if f.nullable else null_p / 6, depth + 1)
            for f in t.fields
        }
    if isinstance(t, ArrayType):
        item_null = null_p / 5 if t.containsNull else 0.0
        return [
            rand_value(t.elementType, rng, item_null, depth + 1) for _ in range(rng.choice([0, 1, 2, 3, 5]))
        ]
    if isinstance(t, MapType):
        keys: dict[Any, None] = {}
        for _ in range(rng.choice([0, 1, 1, 2, 3])):
            keys.setdefault(rand_scalar(t.keyType, rng))
        value_null = null_p / 5 if t.valueContainsNull else 0.0
        return [(k, rand_value(t.valueType, rng, value_null, depth + 1)) for k in keys]
    return rand_scalar(t, rng)


# --------------------------------------------------------------------------- Arrow layout


def build(values: list[Any], t: DataType, rng: random.Random) -> pa.Array:
    """An Arrow array of Spark type ``t`` holding ``values``, sliced out of a longer one at
    every level (non-zero offsets in parents and children alike), with junk values under
    null struct rows and non-empty junk segments under null list / map slots."""
    at = small_type(arrow_type(t))
    lead, tail = rng.choice([0, 0, 1, 2, 3]), rng.choice([0, 1, 2])
    padded = (
        [rand_value(t, rng, 0.3) for _ in range(lead)]
        + list(values)
        + [rand_value(t, rng, 0.3) for _ in range(tail)]
    )
    mask = pa.array([v is None for v in padded], pa.bool_())
    if isinstance(t, StructType):
        kids = [
            build(
                [v[f.name] if v is not None else rand_value(f.dataType, rng, 0.3) for v in padded],
                f.dataType,
                rng,
            )
            for f in t.fields
        ]
        arr: pa.Array = pa.StructArray.from_arrays(kids, fields=list(at), mask=mask)
    elif isinstance(t, ArrayType | MapType):
        is_map = isinstance(t, MapType)

        def junk_items() -> list[Any]:
            got = rand_value(t, rng, 0.0)
            return got if got is not None else []

        skip = rng.choice([0, 0, 1, 2])
        flat = junk_items()[:skip]
        offsets = [len(flat)]
        for v in padded:
            flat.extend(v if v is not None else junk_items())
            offsets.append(len(flat))
        if rng.random() < 0.5:
            flat.extend(junk_items())
        off = pa.array(offsets, pa.int32())
        if is_map:
            assert isinstance(t, MapType)
            keys = build([k for k, _ in flat], t.keyType, rng)
            items = build([x for _, x in flat], t.valueType, rng)
            arr = pa.MapArray.from_arrays(off, keys, items, type=at, mask=mask)
        else:
            assert isinstance(t, ArrayType)
            arr = pa.ListArray.from_arrays(off, build(flat, t.elementType, rng), type=at, mask=mask)
    else:
        arr = pa.array(padded, at)
    return arr.slice(lead, len(values))


# --------------------------------------------------------------------------- expectations


class Refused(Exception):
    pass


def protobuf_refuses(v: Any, t: DataType) -> bool:
    """Would writing ``v`` meet a null array item or map value (which protobuf cannot hold)?"""
    if v is None:
        return False
    if isinstance(t, StructType):
        return any(protobuf_refuses(v[f.name], f.dataType) for f in t.fields)
    if isinstance(t, ArrayType):
        return any(x is None or protobuf_refuses(x, t.elementType) for x in v)
    if isinstance(t, MapType):
        return any(x is None or protobuf_refuses(x, t.valueType) for _, x in v)
    return False


def max_map_entries(v: Any, t: DataType) -> int:
    if v is None:
        return 0
    if isinstance(t, StructType):
        return max([max_map_entries(v[f.name], f.dataType) for f in t.fields] or [0])
    if isinstance(t, ArrayType):
        return max([max_map_entries(x, t.elementType) for x in v] or [0])
    if isinstance(t, MapType):
        return max([len(v), *(max_map_entries(x, t.valueType) for _, x in v)])
    return 0


def time_parts(us: int, duration: bool) -> tuple[int, int]:
    if duration:  # nanos take the seconds' sign
        sec = abs(us) // 1_000_000 * (1 if us >= 0 else -1)
        return sec, (us - sec * 1_000_000) * 1000
    return us // 1_000_000, us % 1_000_000 * 1000


def same_float(a: float, b: float, single: bool) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    fmt = "<f" if single else "<d"
    return struct.pack(fmt, a) == struct.pack(fmt, b)


def check_value(got: Any, want: Any, t: DataType, where: str) -> None:
    if isinstance(t, StructType):
        check_message(got, want, t, where)
    elif isinstance(t, TimestampType | TimestampNTZType | DayTimeIntervalType):
        parts = time_parts(want, isinstance(t, DayTimeIntervalType))
        assert (got.seconds, got.nanos) == parts, f"{where}: {want} us read as {got.seconds}s {got.nanos}ns"
    elif isinstance(t, FloatType | DoubleType):
        assert same_float(got, want, isinstance(t, FloatType)), f"{where}: {want!r} read as {got!r}"
    else:
        assert got == want and type(got) is type(want), f"{where}: {want!r} read as {got!r}"


def check_message(msg: Any, value: dict[str, Any], st: StructType, where: str) -> None:
    for f in st.fields:
        v, t, at = value[f.name], f.dataType, f"{where}.{f.name}"
        if isinstance(t, ArrayType):
            got = list(getattr(msg, f.name))
            items = v or []
            assert len(got) == len(items), f"{at}: {len(items)} items read as {len(got)}"
            for k, (g, x) in enumerate(zip(got, items, strict=True)):
                check_value(g, x, t.elementType, f"{at}[{k}]")
        elif isinstance(t, MapType):
            got = getattr(msg, f.name)
            entries = v or []
            assert len(got) == len(entries), f"{at}: {len(entries)} entries read as {len(got)}"
            for k, x in entries:
                assert k in got, f"{at}: key {k!r} missing"
                check_value(got[k], x, t.valueType, f"{at}[{k!r}]")
        elif v is None:
            assert not msg.HasField(f.name), f"{at}: null written as {getattr(msg, f.name)!r}"
        else:
            assert msg.HasField(f.name), f"{at}: {v!r} not written"
            check_value(getattr(msg, f.name), v, t, at)


def micros(x: Any) -> Any:
    """A decoded (to_pylist) value in the raw form the generator keeps."""
    import datetime

    if isinstance(x, datetime.datetime):
        epoch = datetime.datetime(1970, 1, 1, tzinfo=x.tzinfo)
        return (x - epoch) // datetime.timedelta(microseconds=1)
    if isinstance(x, datetime.timedelta):
        return x // datetime.timedelta(microseconds=1)
    if isinstance(x, dict):
        return {k: micros(v) for k, v in x.items()}
    if isinstance(x, list):
        return [micros(v) for v in x]
    if isinstance(x, tuple):
        return tuple(micros(v) for v in x)
    return x


def read_back(v: Any, t: DataType) -> Any:
    """What the decoder gives for written value ``v``: null arrays and maps read back empty."""
    if isinstance(t, StructType):
        return None if v is None else {f.name: read_back(v[f.name], f.dataType) for f in t.fields}
    if isinstance(t, ArrayType):
        return [read_back(x, t.elementType) for x in (v or [])]
    if isinstance(t, MapType):
        return [(k, read_back(x, t.valueType)) for k, x in (v or [])]
    return v


def same(a: Any, b: Any, t: DataType) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(t, StructType):
        return all(same(a[f.name], b[f.name], f.dataType) for f in t.fields)
    if isinstance(t, ArrayType):
        return len(a) == len(b) and all(same(x, y, t.elementType) for x, y in zip(a, b, strict=True))
    if isinstance(t, MapType):
        return len(a) == len(b) and all(
            ka == kb and same(x, y, t.valueType) for (ka, x), (kb, y) in zip(a, b, strict=True)
        )
    if isinstance(t, FloatType | DoubleType):
        return same_float(a, b, isinstance(t, FloatType))
    return bool(a == b)


def encode_and_check(spark: StructType, rows: list[Any], column: pa.Array, desc: Any | None = None) -> Any:
    """Encode ``column`` (holding ``rows``) with the derived schema and check every value."""
    desc = desc or derived(spark)
    writer = pw.ProtoWriter(desc)
    writer.check(spark, "value")
    got = writer.encode(column, HEADER)
    assert len(got.values) == len(rows)
    cls = message_factory.GetMessageClass(desc)
    refused = dict(got.refused)
    assert len(refused) == len(got.refused), "a row refused twice"
    values = got.values.to_pylist()
    for r, (row, raw) in enumerate(zip(rows, values, strict=True)):
        if row is None:
            assert raw is None and r not in refused, f"row {r}: a null row is a null value"
            continue
        if protobuf_refuses(row, spark):
            assert raw is None and r in refused, f"row {r} holds a null item or map value and was written"
            why = refused[r]
            assert "null" in why and "value." in why, f"row {r}: unclear reason {why!r}"
            continue
        assert r not in refused, f"row {r} refused: {refused.get(r)}"
        assert raw is not None and raw.startswith(HEADER), f"row {r}: no header"
        payload = raw[len(HEADER) :]
        msg = cls.FromString(payload)
        check_message(msg, row, spark, f"row {r}")
        if max_map_entries(row, spark) <= 1:
            theirs = msg.SerializeToString()
            assert theirs == payload, (
                f"row {r}: not protobuf's bytes\n got {payload.hex()}\nwant {theirs.hex()}"
            )
    # 3. round trip through the decoder
    reader = ProtoReader(desc)
    starts = np.array([len(HEADER) if v is not None else -1 for v in values], np.int32)
    col, bad, why = reader.decode(got.values, starts)
    assert col is not None, f"row {bad} does not decode: {why}"
    back = micros(col.to_pylist())
    for r, (row, b) in enumerate(zip(rows, back, strict=True)):
        want = None if row is None or r in refused else read_back(row, spark)
        assert same(b, want, spark), f"row {r}: wrote {want!r}, read back {b!r}"
    return got


# --------------------------------------------------------------------------- differential


@pytest.mark.parametrize("seed", range(24))
def test_random_columns_match_protobuf(seed: int) -> None:
    rng = random.Random(seed)
    for case in range(8):
        spark = rand_struct(rng, 3)
        n = rng.randint(1, 40)
        top_nulls = case % 3 == 0  # a top-level null takes the encoder's other path (take)
        rows = [None if top_nulls and rng.random() < 0.1 else rand_row(spark, rng) for _ in range(n)]
        column = build(rows, spark, rng)
        assert column.to_pylist() is not None  # the layout is valid Arrow
        column.validate(full=True)
        encode_and_check(spark, rows, column)


def test_every_scalar_nullable_and_not() -> None:
    rng = random.Random(99)
    fields = [StructField(f"f{i}_{n}", t, n) for i, t in enumerate(SCALARS) for n in (True, False)]
    spark = StructType(fields)
    rows = [rand_row(spark, rng) for _ in range(50)] + [
        {f.name: None if f.nullable else rand_scalar(f.dataType, rng) for f in fields}
    ]
    encode_and_check(spark, rows, build(rows, spark, rng))


def test_zero_values_of_optional_fields_are_written() -> None:
    """Every derived singular scalar is ``optional``: zero, false, "" and b"" are present
    (and read back as such, not as null)."""
    spark = StructType(
        [
            StructField(n, t)
            for n, t in [
                ("b", BooleanType()),
                ("i", IntegerType()),
                ("l", LongType()),
                ("f", FloatType()),
                ("d", DoubleType()),
                ("s", StringType()),
                ("y", BinaryType()),
                ("t", TimestampType()),
                ("dt", DayTimeIntervalType()),
            ]
        ]
    )
    rows = [
        {"b": False, "i": 0, "l": 0, "f": 0.0, "d": 0.0, "s": "", "y": b"", "t": 0, "dt": 0},
        {"b": None, "i": None, "l": None, "f": None, "d": None, "s": None, "y": None, "t": None, "dt": None},
        {"b": True, "i": -1, "l": -1, "f": -0.0, "d": -0.0, "s": "x", "y": b"\0", "t": -1, "dt": -1},
    ]
    got = encode_and_check(spark, rows, build(rows, spark, random.Random(1)))
    assert got.values[1].as_py() == HEADER  # all null: an empty message


def test_times_before_1970_and_negative_intervals() -> None:
    spark = StructType(
        [
            StructField("t", TimestampType()),
            StructField("n", TimestampNTZType()),
            StructField("d", DayTimeIntervalType()),
        ]
    )
    cases = [
        0,
        -1,
        1,
        -999_999,
        -1_000_000,
        -1_000_001,
        -1_500_000,
        1_500_000,
        MIN_TS,
        MAX_TS,
        -86_400_000_000 * 365 * 100 - 123_456,
    ]
    rows = [{"t": v, "n": v, "d": v} for v in cases]
    encode_and_check(spark, rows, build(rows, spark, random.Random(2)))
    desc = derived(spark)
    cls = message_factory.GetMessageClass(desc)
    out = pw.ProtoWriter(desc).encode(
        pa.array([{"t": -1_500_000, "n": -1_500_000, "d": -1_500_000}], small_type(arrow_type(spark))), HEADER
    )
    msg = cls.FromString(out.values[0].as_py()[len(HEADER) :])
    assert (msg.t.seconds, msg.t.nanos) == (-2, 500_000_000)  # a Timestamp's nanos are never negative
    assert (msg.d.seconds, msg.d.nanos) == (-1, -500_000_000)  # a Duration's take the seconds' sign


def test_extreme_intervals_are_written_exactly() -> None:
    """Spark's day-time intervals span all of int64 microseconds (beyond Duration's
    +-10,000 years): the seconds and nanos written are still exact, and read back."""
    spark = StructType([StructField("d", DayTimeIntervalType())])
    values = [I64[0], I64[1], I64[0] + 1, I64[1] - 1, -(10**17), 9223372036854000000, -9223372036854000000]
    encode_and_check(
        spark, [{"d": v} for v in values], build([{"d": v} for v in values], spark, random.Random(9))
    )


def test_null_items_and_map_values_refuse_their_row_only() -> None:
    spark = StructType(
        [
            StructField("id", IntegerType()),
            StructField("xs", ArrayType(LongType(), True)),
            StructField("ss", ArrayType(StructType([StructField("a", StringType())]), True)),
            StructField("m", MapType(StringType(), DoubleType(), True)),
            StructField("ms", MapType(LongType(), StructType([StructField("a", IntegerType())]), True)),
            StructField("inner", StructType([StructField("xs", ArrayType(StringType(), True))])),
        ]
    )
    ok = {
        "id": 0,
        "xs": [1],
        "ss": [{"a": "x"}],
        "m": [("k", 1.0)],
        "ms": [(1, {"a": None})],
        "inner": {"xs": ["q"]},
    }
    rows = [
        ok,
        {**ok, "id": 1, "xs": [1, None]},
        {**ok, "id": 2, "ss": [None]},
        {**ok, "id": 3, "m": [("k", None)]},
        {**ok, "id": 4, "ms": [(5, None)]},
        {**ok, "id": 5, "inner": {"xs": [None]}},
        {**ok, "id": 6, "inner": None, "xs": None, "m": None},  # nulls above the nulls: fine
        ok,
        None,
        {**ok, "xs": [None]},
        ok,
    ]
    column = build(rows, spark, random.Random(3))
    got = encode_and_check(spark, rows, column)
    assert [r for r, _ in got.refused] == [1, 2, 3, 4, 5, 9]
    whys = dict(got.refused)
    assert "value.xs[]" in whys[1] and "repeated" in whys[1]
    assert "value.ss[]" in whys[2]
    assert "value.m[]" in whys[3] and "map" in whys[3]
    assert "value.ms[]" in whys[4]
    assert "value.inner.xs[]" in whys[5]


def test_sliced_columns_encode_their_rows() -> None:
    rng = random.Random(4)
    spark = StructType(
        [
            StructField("a", IntegerType()),
            StructField("s", StringType()),
            StructField("l", ArrayType(StructType([StructField("b", BooleanType())]), False)),
            StructField("m", MapType(StringType(), LongType(), False)),
        ]
    )
    rows = [rand_row(spark, rng, 0.0) for _ in range(30)]
    full = build(rows, spark, rng)
    desc = derived(spark)
    for a, b in [(0, 30), (1, 29), (7, 3), (29, 1)]:
        encode_and_check(spark, rows[a : a + b], full.slice(a, b), desc)


@pytest.mark.parametrize("rows", [[], [None], [None, None, None]], ids=["empty", "one-null", "all-null"])
def test_empty_and_all_null_columns(rows: list[Any]) -> None:
    """A batch of no rows, or of null rows only (tombstones; a key column that is all
    null): null values, nothing refused."""
    spark = StructType([StructField("a", IntegerType())])
    got = pw.ProtoWriter(derived(spark)).encode(pa.array(rows, small_type(arrow_type(spark))), HEADER)
    assert got.values.to_pylist() == rows and got.refused == []
    assert got.values.type == pa.binary()


def test_wide_struct_over_64_fields() -> None:
    """A column of 70 fields (wide rows are common) encodes like a narrow one."""
    spark = StructType([StructField(f"c{i}", IntegerType()) for i in range(70)])
    rows = [{f"c{i}": i * r for i in range(70)} for r in range(3)]
    encode_and_check(spark, rows, pa.array(rows, small_type(arrow_type(spark))))


# --------------------------------------------------------------------------- derivation


def test_schema_of_text() -> None:
    spark = StructType(
        [
            StructField("id", LongType(), False),
            StructField("when", TimestampType()),
            StructField("tags", ArrayType(StringType())),
            StructField("inner_thing", StructType([StructField("x", FloatType())])),
            StructField("m", MapType(IntegerType(), StructType([StructField("y", BinaryType())]))),
        ]
    )
    text = pw.schema_of(spark, "Rec")
    assert text.startswith('syntax = "proto3";\nimport "google/protobuf/timestamp.proto";\n')
    assert "optional int64 id = 1;" in text
    assert "google.protobuf.Timestamp when = 2;" in text
    assert "repeated string tags = 3;" in text
    assert "InnerThing inner_thing = 4;" in text and "message InnerThing {" in text
    assert "map<int32, M> m = 5;" in text
    compile_message(text, "Rec")


@pytest.mark.parametrize(
    "stype",
    [
        IntegerType(),
        StructType([StructField("d", DecimalType(10, 2))]),
        StructType([StructField("d", DateType())]),
        StructType([StructField("a", ArrayType(ArrayType(IntegerType())))]),
        StructType([StructField("a", ArrayType(MapType(StringType(), IntegerType())))]),
        StructType([StructField("m", MapType(StringType(), ArrayType(IntegerType())))]),
        StructType([StructField("m", MapType(DoubleType(), IntegerType()))]),
        StructType([StructField("m", MapType(BinaryType(), IntegerType()))]),
        StructType([StructField("bad name", IntegerType())]),
        StructType([StructField("1a", IntegerType())]),
    ],
    ids=lambda t: t.simpleString(),
)
def test_schema_of_refuses(stype: DataType) -> None:
    with pytest.raises(SchemaError):
        pw.schema_of(stype)


@pytest.mark.parametrize(
    "stype",
    [
        # Scala tuples and createDataFrame of tuples name their fields _1, _2, ...
        StructType([StructField("_1", StructType([StructField("_1", IntegerType())]))]),
        # a struct field's message name equal to a sibling field's name
        StructType(
            [StructField("a", StructType([StructField("x", IntegerType())])), StructField("A", IntegerType())]
        ),
        # proto3 refuses two fields with one JSON name
        StructType([StructField("foo_bar", IntegerType()), StructField("fooBar", IntegerType())]),
    ],
    ids=["tuple-names", "message-vs-field", "json-name"],
)
def test_schema_of_compiles_for_legal_field_names(stype: StructType) -> None:
    """Every name schema_of accepts as a field is a legal Spark name: the text it derives
    must compile, or schema_of must refuse with its own reason."""
    try:
        text = pw.schema_of(stype)
    except SchemaError as e:  # only for a reason of its own, naming both fields
        assert "foo_bar" in str(e) and "fooBar" in str(e) and "rename one" in str(e), e
        return
    compile_message(text)


def test_message_header_and_path() -> None:
    assert pw.message_header(1, (0,)) == b"\0\0\0\0\x01\0"
    assert pw.message_header(258, (1,)) == b"\0\0\0\x01\x02" + b"\x02\x02"
    assert pw.message_header(3, (0, 2, 1)) == b"\0\0\0\0\x03" + b"\x06\x00\x04\x02"
    text = (
        'syntax = "proto3";\nmessage A { message B { message C { int32 x = 1; } } message D {} }\n'
        "message E { int32 y = 1; }\n"
    )
    fdp = file_descriptor(text, "p.proto")
    pool = pool_of([fdp])
    assert pw.path_of(pool.FindMessageTypeByName("A")) == (0,)
    assert pw.path_of(pool.FindMessageTypeByName("E")) == (1,)
    assert pw.path_of(pool.FindMessageTypeByName("A.D")) == (0, 1)
    assert pw.path_of(pool.FindMessageTypeByName("A.B.C")) == (0, 0, 0)


# --------------------------------------------------------------------------- given schemas

GIVEN = """syntax = "proto3";
package p.q;
enum Color { RED = 0; GREEN = 1; BLUE = -2; }
message All {
  int32 i32 = 1; uint32 u32 = 2; sint32 s32 = 3; fixed32 f32 = 4; sfixed32 sf32 = 5;
  int64 i64 = 6; uint64 u64 = 7; sint64 s64 = 8; fixed64 f64 = 9; sfixed64 sf64 = 10;
  Color c = 11; bool b = 12; float fl = 13; double d = 14; string s = 15; bytes by = 16;
  repeated int32 p = 17; repeated sint64 ps = 18; repeated Color pc = 19; repeated bool pb = 20;
  repeated fixed32 pf = 21; repeated double pd = 22; repeated string rs = 23; repeated bytes rb = 24;
  optional int32 o = 25; Inner inner = 26; repeated Inner inners = 27; map<string, Color> mc = 28;
  map<bool, Inner> mi = 29; map<int64, bytes> mb = 30; double widened = 31; int64 wide = 32;
  message Inner { sint32 z = 1; }
  uint64 big = 536870911;
}
"""
GIVEN_ARROW = pa.struct(
    [  # columns not in field-number order: the bytes still are
        ("big", pa.int64()),
        ("mi", pa.map_(pa.bool_(), pa.struct([("z", pa.int8())]))),
        ("d", pa.float64()),
        ("i32", pa.int32()),
        ("u32", pa.int32()),
        ("s32", pa.int32()),
        ("f32", pa.int32()),
        ("sf32", pa.int32()),
        ("i64", pa.int64()),
        ("u64", pa.int64()),
        ("s64", pa.int64()),
        ("f64", pa.int64()),
        ("sf64", pa.int64()),
        ("c", pa.string()),
        ("b", pa.bool_()),
        ("fl", pa.float32()),
        ("s", pa.string()),
        ("by", pa.binary()),
        ("p", pa.list_(pa.int32())),
        ("ps", pa.list_(pa.int64())),
        ("pc", pa.list_(pa.string())),
        ("pb", pa.list_(pa.bool_())),
        ("pf", pa.list_(pa.int32())),
        ("pd", pa.list_(pa.float64())),
        ("rs", pa.list_(pa.string())),
        ("rb", pa.list_(pa.binary())),
        ("o", pa.int32()),
        ("inner", pa.struct([("z", pa.int32())])),
        ("inners", pa.list_(pa.struct([("z", pa.int16())]))),
        ("mc", pa.map_(pa.string(), pa.string())),
        ("mb", pa.map_(pa.int64(), pa.binary())),
        ("widened", pa.int32()),
        ("wide", pa.int8()),
    ]
)
INT_FIELDS = {
    "i32": 32,
    "u32": 32,
    "s32": 32,
    "f32": 32,
    "sf32": 32,
    "i64": 64,
    "u64": 64,
    "s64": 64,
    "f64": 64,
    "sf64": 64,
    "o": 32,
    "wide": 8,
    "big": 64,
    "widened": 32,
}
UNSIGNED = {"u32": 32, "f32": 32, "u64": 64, "f64": 64, "big": 64}


def given_row(rng: random.Random) -> dict[str, Any]:
    def i(bits: int) -> Any:
        if rng.random() < 0.1:
            return None
        lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        return rng.choice([0, 0, lo, hi, -1, 1, rng.randint(lo, hi)])

    def lst(make: Any) -> Any:
        return None if rng.random() < 0.1 else [make() for _ in range(rng.choice([0, 1, 3]))]

    colors = ["RED", "GREEN", "BLUE"]
    row: dict[str, Any] = {k: i(b) for k, b in INT_FIELDS.items()}
    row.update(
        c=rng.choice([*colors, None]),
        b=rng.choice([True, False, None]),
        fl=rng.choice([0.0, -0.0, 1.5, f32(0.1), None, math.nan]),
        d=rng.choice([0.0, -0.0, 0.1, None, -1e300]),
        s=rng.choice(["", "x", "é😀", None]),
        by=rng.choice([b"", b"\0\xff", None]),
        p=lst(lambda: i(32) or 0),
        ps=lst(lambda: i(64) or 0),
        pc=lst(lambda: rng.choice(colors)),
        pb=lst(lambda: rng.random() < 0.5),
        pf=lst(lambda: i(32) or 0),
        pd=lst(lambda: rng.choice([0.0, -2.5, 1e-300])),
        rs=lst(lambda: rng.choice(["", "a", "中"])),
        rb=lst(lambda: rng.choice([b"", b"\x01"])),
        inner=rng.choice([None, {"z": None}, {"z": 0}, {"z": -5}]),
        inners=lst(lambda: {"z": rng.choice([0, -1, 7, None])}),
        mc=None
        if rng.random() < 0.2
        else [(k, rng.choice(colors)) for k in rng.sample(["", "a", "b"], rng.randint(0, 1))],
        mi=None if rng.random() < 0.2 else [(True, {"z": rng.choice([None, 0, -3])})][: rng.randint(0, 1)],
        mb=None
        if rng.random() < 0.2
        else [(rng.choice([0, -1, 2**40]), rng.choice([b"", b"q"]))][: rng.randint(0, 1)],
    )
    return row


def expect_given(msg: Any, row: dict[str, Any]) -> None:
    """The parsed message holds the row (proto3 implicit fields: null reads as the default)."""
    for k in INT_FIELDS:
        want = row[k] or 0
        if k in UNSIGNED and want < 0:
            want += 2 ** UNSIGNED[k]  # a negative into an unsigned field: its two's complement
        assert getattr(msg, k) == want, (k, row[k], getattr(msg, k))
    assert msg.HasField("o") == (row["o"] is not None)
    enum = {"RED": 0, "GREEN": 1, "BLUE": -2}
    assert msg.c == enum[row["c"] or "RED"]
    assert msg.b == bool(row["b"])
    assert same_float(msg.fl, row["fl"] if row["fl"] is not None else 0.0, True)
    assert same_float(msg.d, row["d"] if row["d"] is not None else 0.0, False)
    assert msg.s == (row["s"] or "") and msg.by == (row["by"] or b"")
    for k in ("p", "ps", "pb", "pf", "rs", "rb"):
        want_list = row[k] or []
        if k == "pf":
            want_list = [x % 2**32 for x in want_list]
        assert list(getattr(msg, k)) == want_list, k
    assert [enum[x] for x in row["pc"] or []] == list(msg.pc)
    assert all(same_float(a, b, False) for a, b in zip(msg.pd, row["pd"] or [], strict=True))
    assert msg.HasField("inner") == (row["inner"] is not None)
    if row["inner"] is not None:
        assert msg.inner.z == (row["inner"]["z"] or 0)
    assert [m.z for m in msg.inners] == [(x["z"] or 0) for x in row["inners"] or []]
    assert dict(msg.mc) == {k: enum[v] for k, v in row["mc"] or []}
    assert {k: v.z for k, v in msg.mi.items()} == {k: v["z"] or 0 for k, v in row["mi"] or []}
    assert dict(msg.mb) == dict(row["mb"] or [])


def test_given_schema_every_scalar_type() -> None:
    desc = compile_message(GIVEN, "All", "given.proto")
    assert desc.full_name == "p.q.All"
    cls = message_factory.GetMessageClass(desc)
    rng = random.Random(5)
    rows = [given_row(rng) for _ in range(300)]
    column = pa.array(rows, GIVEN_ARROW)
    got = pw.ProtoWriter(desc).encode(column.slice(0), HEADER)
    assert got.refused == []
    for row, raw in zip(rows, got.values.to_pylist(), strict=True):
        payload = raw[len(HEADER) :]
        msg = cls.FromString(payload)
        expect_given(msg, row)
        assert msg.SerializeToString() == payload, (
            f"\n got {payload.hex()}\nwant {msg.SerializeToString().hex()}"
        )
    # sliced: the same bytes
    again = pw.ProtoWriter(desc).encode(column.slice(100, 50), HEADER)
    assert again.values.to_pylist() == got.values.to_pylist()[100:150]


def test_given_schema_unknown_enum_name_refuses_the_row() -> None:
    desc = compile_message(GIVEN, "All", "given.proto")
    rng = random.Random(6)
    rows = [given_row(rng) for _ in range(6)]
    rows[1]["c"] = "PURPLE"
    rows[3]["pc"] = ["RED", "red"]
    rows[4]["mc"] = [("k", "GREENISH")]
    rows[5]["c"] = "BLU"  # a prefix of a name
    got = pw.ProtoWriter(desc).encode(pa.array(rows, GIVEN_ARROW), HEADER)
    assert [r for r, _ in got.refused] == [1, 3, 4, 5]
    assert all("enum" in why for _, why in got.refused)
    assert "value.c" in dict(got.refused)[1] and "value.pc[]" in dict(got.refused)[3]
    assert got.values.is_null().to_pylist() == [False, True, False, True, True, True]


UNPACKED = """syntax = "proto3";
message U {
  repeated int32 up = 1 [packed = false];
  repeated sint64 us = 2 [packed = false];
  repeated int32 p = 3;
}
"""


def test_given_schema_unpacked_fields_parse() -> None:
    desc = compile_message(UNPACKED, "U", "u.proto")
    cls = message_factory.GetMessageClass(desc)
    rows: list[dict[str, Any]] = [
        {"up": [1, -1, 0], "us": [5, -5], "p": [2]},
        {"up": [], "us": None, "p": None},
    ]
    column = pa.array(
        rows,
        pa.struct([("up", pa.list_(pa.int32())), ("us", pa.list_(pa.int64())), ("p", pa.list_(pa.int32()))]),
    )
    got = pw.ProtoWriter(desc).encode(column, HEADER)
    for row, raw in zip(rows, got.values.to_pylist(), strict=True):
        msg = cls.FromString(raw[len(HEADER) :])
        assert list(msg.up) == (row["up"] or []) and list(msg.us) == (row["us"] or [])
        assert list(msg.p) == (row["p"] or [])


def test_given_schema_unpacked_fields_are_protobufs_bytes() -> None:
    """``[packed = false]`` (and proto2's unpacked default): protobuf writes one tag per item,
    and the module claims protobuf's own serialization."""
    desc = compile_message(UNPACKED, "U", "u.proto")
    cls = message_factory.GetMessageClass(desc)
    column = pa.array(
        [{"up": [1, -1], "us": [5], "p": [2]}],
        pa.struct([("up", pa.list_(pa.int32())), ("us", pa.list_(pa.int64())), ("p", pa.list_(pa.int32()))]),
    )
    payload = pw.ProtoWriter(desc).encode(column, HEADER).values[0].as_py()[len(HEADER) :]
    assert cls.FromString(payload).SerializeToString() == payload


PROTO2 = """syntax = "proto2";
message P {
  required int32 id = 1;
  optional string s = 2 [default = "dflt"];
  optional int32 n = 3;
  oneof choice { int32 a = 4; string b = 5; }
}
"""
PROTO2_ARROW = pa.struct(
    [("id", pa.int32()), ("s", pa.string()), ("n", pa.int32()), ("a", pa.int32()), ("b", pa.string())]
)


def test_given_proto2_presence() -> None:
    desc = compile_message(PROTO2, "P", "p2.proto")
    cls = message_factory.GetMessageClass(desc)
    rows = [
        {"id": 0, "s": "", "n": 0, "a": None, "b": None},
        {"id": 1, "s": None, "n": None, "a": 0, "b": None},
    ]
    got = pw.ProtoWriter(desc).encode(pa.array(rows, PROTO2_ARROW), HEADER)
    m0, m1 = (cls.FromString(v[len(HEADER) :]) for v in got.values.to_pylist())
    assert m0.HasField("id") and m0.HasField("s") and m0.s == "" and m0.HasField("n") and not m0.HasField("a")
    assert not m1.HasField("s") and m1.s == "dflt" and m1.WhichOneof("choice") == "a" and m1.a == 0


def test_given_proto2_required_null_refuses_the_row() -> None:
    """A null in a proto2 ``required`` field: protobuf refuses to parse a message without it,
    so the sink must refuse the row (as the JSON sink refuses a null ``required`` property)."""
    desc = compile_message(PROTO2, "P", "p2.proto")
    cls = message_factory.GetMessageClass(desc)
    rows = [
        {"id": 1, "s": None, "n": None, "a": None, "b": None},
        {"id": None, "s": "x", "n": None, "a": None, "b": None},
        {"id": 3, "s": None, "n": None, "a": None, "b": None},
    ]
    got = pw.ProtoWriter(desc).encode(pa.array(rows, PROTO2_ARROW), HEADER)
    for r in (0, 2):
        cls.FromString(got.values[r].as_py()[len(HEADER) :])
    raw = got.values[1].as_py()
    if raw is not None:
        cls.FromString(raw[len(HEADER) :])  # raises: "Message P is missing required fields: id"
    assert [r for r, _ in got.refused] == [1]


def test_given_oneof_with_two_members_set_refuses_the_row() -> None:
    """Two non-null members of one oneof: a reader keeps only the last, so writing both
    loses a value silently; the row is refused instead."""
    desc = compile_message(PROTO2, "P", "p2.proto")
    cls = message_factory.GetMessageClass(desc)
    rows = [{"id": 1, "s": None, "n": None, "a": 5, "b": "x"}]
    got = pw.ProtoWriter(desc).encode(pa.array(rows, PROTO2_ARROW), HEADER)
    raw = got.values[0].as_py()
    if raw is not None:
        msg = cls.FromString(raw[len(HEADER) :])
        assert (msg.a, msg.b) == (5, "x"), f"a=5, b='x' read back as {msg.WhichOneof('choice')} only"
    assert [r for r, _ in got.refused] == [0]


def test_encode_into_a_nested_message() -> None:
    desc = compile_message(GIVEN, "All.Inner", "given.proto")
    assert pw.path_of(desc) == (0, 3)  # after the map fields' entry messages, as Confluent counts
    header = pw.message_header(9, pw.path_of(desc))
    assert header == b"\0\0\0\0\x09" + b"\x04\x00\x06"
    got = pw.ProtoWriter(desc).encode(
        pa.array([{"z": -1}, {"z": None}, None], pa.struct([("z", pa.int32())])), header
    )
    assert got.values.to_pylist() == [header + b"\x08\x01", header, None]


# --------------------------------------------------------------------------- check refusals

MISMATCH = """syntax = "proto3";
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
enum E { Z = 0; }
message M {
  int32 i = 1; float f = 2; double d = 3; string s = 4; bytes y = 5; bool b = 6; E e = 7;
  repeated int32 r = 8; map<string, int32> m = 9; N n = 10; google.protobuf.Timestamp t = 11;
  google.protobuf.Duration du = 12; repeated N rn = 13; uint32 u = 14; sint64 sl = 15;
  message N { int32 x = 1; }
}
"""


@pytest.mark.parametrize(
    "field,stype,needle",
    [
        ("i", LongType(), "value.i"),
        ("i", FloatType(), "value.i"),
        ("i", StringType(), "value.i"),
        ("i", BooleanType(), "value.i"),
        ("u", LongType(), "value.u"),
        ("f", DoubleType(), "value.f"),
        ("f", IntegerType(), "value.f"),
        ("d", LongType(), "value.d"),
        ("d", StringType(), "value.d"),
        ("sl", DoubleType(), "value.sl"),
        ("s", BinaryType(), "value.s"),
        ("s", IntegerType(), "value.s"),
        ("y", IntegerType(), "value.y"),
        ("b", IntegerType(), "value.b"),
        ("e", IntegerType(), "value.e"),
        ("e", BinaryType(), "value.e"),
        ("r", IntegerType(), "value.r"),
        ("r", ArrayType(LongType()), "value.r[]"),
        ("r", MapType(StringType(), IntegerType()), "value.r"),
        ("m", ArrayType(IntegerType()), "value.m"),
        ("m", MapType(StringType(), StringType()), "value.m[]"),
        ("m", MapType(IntegerType(), IntegerType()), "value.m key"),
        ("n", IntegerType(), "value.n"),
        ("n", StructType([StructField("x", LongType())]), "value.n.x"),
        ("n", StructType([StructField("zz", IntegerType())]), "zz"),
        ("rn", StructType([StructField("x", IntegerType())]), "value.rn"),
        ("rn", ArrayType(StructType([StructField("x", StringType())])), "value.rn[].x"),
        ("t", LongType(), "value.t"),
        ("t", DayTimeIntervalType(), "value.t"),
        ("du", TimestampType(), "value.du"),
        ("du", LongType(), "value.du"),
        ("nope", IntegerType(), "nope"),
    ],
)
def test_check_refuses_mismatches(field: str, stype: DataType, needle: str) -> None:
    desc = compile_message(MISMATCH, "M", "mm.proto")
    with pytest.raises(SchemaError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        pw.ProtoWriter(desc).check(StructType([StructField(field, stype)]), "value")


@pytest.mark.parametrize(
    "field,stype",
    [
        ("i", ByteType()),
        ("i", ShortType()),
        ("i", IntegerType()),
        ("d", IntegerType()),
        ("d", FloatType()),
        ("d", ShortType()),
        ("f", FloatType()),
        ("sl", IntegerType()),
        ("y", StringType()),
        ("e", StringType()),
        ("r", ArrayType(ByteType())),
        ("m", MapType(StringType(), ShortType())),
        ("t", TimestampNTZType()),
        ("du", DayTimeIntervalType(2, 3)),
        ("rn", ArrayType(StructType([StructField("x", ByteType())]))),
    ],
)
def test_check_accepts_widenings(field: str, stype: DataType) -> None:
    desc = compile_message(MISMATCH, "M", "mm.proto")
    pw.ProtoWriter(desc).check(StructType([StructField(field, stype)]), "value")


def test_check_refuses_a_non_struct_column() -> None:
    desc = compile_message(MISMATCH, "M", "mm.proto")
    with pytest.raises(SchemaError, match="value"):
        pw.ProtoWriter(desc).check(IntegerType(), "value")


def test_widened_values_are_exact() -> None:
    desc = compile_message(MISMATCH, "M", "mm.proto")
    cls = message_factory.GetMessageClass(desc)
    column = pa.array(
        [{"i": -128, "d": 2**31 - 1, "sl": -(2**31)}, {"i": 127, "d": -(2**31), "sl": 0}],
        pa.struct([("i", pa.int8()), ("d", pa.int32()), ("sl", pa.int32())]),
    )
    got = pw.ProtoWriter(desc).encode(column, HEADER).values.to_pylist()
    m0, m1 = (cls.FromString(v[len(HEADER) :]) for v in got)
    assert (m0.i, m0.d, m0.sl) == (-128, 2**31 - 1, -(2**31))
    assert (m1.i, m1.d, m1.sl) == (127, -(2**31), 0)
