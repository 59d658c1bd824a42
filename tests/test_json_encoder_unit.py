"""The JSON column encoder (``spark_ext.schemas.jsonschema_write`` and its C part
``_json.c``) against a Python reference of its semantics, document by document.

The reference writes what Spark's ``to_json`` writes for the column, as the module states
it: a null property left out (a null where the schema ``required``s it refuses the row),
timestamps RFC 3339 in UTC with a 6-digit fraction only when there is one and a trailing
``Z``, dates ``YYYY-MM-DD``, binary base64, decimals exact, floats the shortest text that
reads back as the same float32, doubles Python's ``repr``, NaN and infinities refused,
maps as objects whose keys are cast to strings, null array items and map values written
as ``null``. Every number's text is compared as written (``json.loads`` hooks), every
document is validated against the derived schema with ``jsonschema``, and the columns are
seeded random Spark types laid out with non-zero offsets at every level.

Then the edges: every control character, quotes, backslashes and non-ASCII in strings;
float32's shortest texts against numpy's ``unique=True`` output; decimals at precision 38;
timestamps and dates at year 1, year 9999, before 1970 and beyond; given schemas and the
type mismatches ``check`` refuses. Pure unit tests: no services, no Spark.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import math
import random
import re
import struct
from typing import Any

import jsonschema
import numpy as np
import pyarrow as pa
import pytest
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

from spark_ext.schemas import jsonschema_write as jw
from spark_ext.schemas.avro import SchemaError
from spark_ext.schemas.avro_write import arrow_type, small_type

HEADER = b"\0\0\0\0\x2a"  # magic byte and schema id 42
EPOCH = datetime.datetime(1970, 1, 1)
MIN_TS = -62135596800000000  # 0001-01-01T00:00:00Z
MAX_TS = 253402300799999999  # 9999-12-31T23:59:59.999999Z
MIN_DAY, MAX_DAY = -719162, 2932896  # 0001-01-01, 9999-12-31
CYCLE_DAYS = 146097  # days in 400 Gregorian years
DAY_US = 86_400_000_000
I64 = (-(2**63), 2**63 - 1)
I32 = (-(2**31), 2**31 - 1)
WIDE = decimal.Context(prec=100)

SCALARS: list[Any] = [
    BooleanType(),
    ByteType(),
    ShortType(),
    IntegerType(),
    LongType(),
    FloatType(),
    DoubleType(),
    StringType(),
    BinaryType(),
    DateType(),
    TimestampType(),
    TimestampNTZType(),
    "decimal",
]
MAP_KEYS: list[DataType] = [
    StringType(),
    IntegerType(),
    LongType(),
    BooleanType(),
    ByteType(),
    ShortType(),
    DateType(),
]
NAMES = ["a", "id", "with space", 'q"uote', "back\\slash", "é", "中文", "tab\t", "x" * 40, "$ref", "oneOf"]
STRINGS = [
    "",
    "a",
    "é",
    "中文",
    "😀",
    "\x00",
    "\x1f",
    "\x7f",
    "\n\r\t\b\f",
    '"',
    "\\",
    '\\"',
    "</script>",
    "\u2028\u2029",
    "\ud7ff\ue000\ufffd",
    "\U0010ffff",
    "x" * 300,
]

# --------------------------------------------------------------------------- reference


class Refused(Exception):
    pass


class F32:
    """A float32 whose text is free, within the shortest-round-trip rule."""

    def __init__(self, v: float) -> None:
        self.v = v

    def __repr__(self) -> str:
        return f"F32({self.v!r})"


def fmt_timestamp(us: int, local: bool = False) -> str:
    """RFC 3339 in UTC (``local``: Spark's TIMESTAMP_NTZ, without an offset, as to_json writes
    it); years beyond 1..9999 as the proleptic calendar continues them
    (400 Gregorian years are a whole number of days), signed when outside 0..9999."""
    shift = 0
    if us < MIN_TS:
        k = -(-(MIN_TS - us) // (CYCLE_DAYS * DAY_US))
        us, shift = us + k * CYCLE_DAYS * DAY_US, -400 * k
    elif us > MAX_TS:
        k = -(-(us - MAX_TS) // (CYCLE_DAYS * DAY_US))
        us, shift = us - k * CYCLE_DAYS * DAY_US, 400 * k
    dt = EPOCH + datetime.timedelta(microseconds=us)
    year = dt.year + shift
    ys = f"{year:04d}" if 0 <= year <= 9999 else f"{year:+05d}"
    frac = f".{dt.microsecond:06d}" if dt.microsecond else ""
    return f"{ys}-{dt:%m-%dT%H:%M:%S}{frac}{'' if local else 'Z'}"


def fmt_date(days: int) -> str:
    shift = 0
    if days < MIN_DAY:
        k = -(-(MIN_DAY - days) // CYCLE_DAYS)
        days, shift = days + k * CYCLE_DAYS, -400 * k
    elif days > MAX_DAY:
        k = -(-(days - MAX_DAY) // CYCLE_DAYS)
        days, shift = days - k * CYCLE_DAYS, 400 * k
    d = EPOCH.date() + datetime.timedelta(days=days)
    year = d.year + shift
    ys = f"{year:04d}" if 0 <= year <= 9999 else f"{year:+05d}"
    return f"{ys}-{d:%m-%d}"


def key_text(k: Any, t: DataType) -> str:
    """A map key cast to a string, as Spark's cast(key as string)."""
    if isinstance(t, BooleanType):
        return "true" if k else "false"
    if isinstance(t, DateType):
        return fmt_date(k)
    return str(k)


def reference(v: Any, t: DataType, where: str = "value") -> Any:
    """The document (parsed with ``parse``'s hooks) ``to_json`` writes for non-null ``v``."""
    if isinstance(t, StructType):
        pairs = []
        for f in t.fields:
            x = v[f.name]
            if x is None:
                if not f.nullable:
                    raise Refused(f"{where}.{f.name} is null, and the schema requires it")
                continue
            pairs.append((f.name, reference(x, f.dataType, f"{where}.{f.name}")))
        return ("obj", pairs)
    if isinstance(t, ArrayType):
        if any(x is None for x in v) and not t.containsNull:
            raise Refused(f"{where}[] is null, and the schema takes no null there")
        return [None if x is None else reference(x, t.elementType, f"{where}[]") for x in v]
    if isinstance(t, MapType):
        if any(x is None for _, x in v) and not t.valueContainsNull:
            raise Refused(f"{where}[] is null, and the schema takes no null there")
        return (
            "obj",
            [
                (key_text(k, t.keyType), None if x is None else reference(x, t.valueType, f"{where}[]"))
                for k, x in v
            ],
        )
    if isinstance(t, BooleanType):
        return bool(v)
    if isinstance(t, ByteType | ShortType | IntegerType | LongType):
        return ("num", str(v))
    if isinstance(t, FloatType | DoubleType):
        if not math.isfinite(v):
            raise Refused(f"{where} is NaN or infinite, which JSON has no number for")
        return F32(v) if isinstance(t, FloatType) else ("num", repr(v))
    if isinstance(t, DecimalType):
        return ("num", format(v, "f"))
    if isinstance(t, StringType):
        return v
    if isinstance(t, BinaryType):
        return base64.b64encode(v).decode()
    if isinstance(t, TimestampType | TimestampNTZType):
        return fmt_timestamp(v, local=isinstance(t, TimestampNTZType))
    if isinstance(t, DateType):
        return fmt_date(v)
    raise AssertionError(t)


def _reject(s: str) -> Any:
    raise AssertionError(f"{s} is not JSON")


def parse(doc: bytes) -> Any:
    """A document with its numbers' texts and its objects' key order kept."""
    text = doc.decode("utf-8")  # strict: the bytes are UTF-8
    return json.loads(
        text,
        object_pairs_hook=lambda pairs: ("obj", pairs),
        parse_int=lambda s: ("num", s),
        parse_float=lambda s: ("num", s),
        parse_constant=_reject,
    )


def digits(text: str) -> int:
    """Significant digits of a number's text."""
    mantissa = text.lower().split("e")[0].lstrip("-+").replace(".", "")
    return len(mantissa.strip("0")) or 1


def shortest_float32(text: str, v: float) -> str | None:
    """Why ``text`` is not the shortest float32 text for ``v``, or None."""
    back = np.float32(float(text))
    want = np.float32(v)
    if back.tobytes() != want.tobytes():
        return f"{text} reads back as {back!r}, not {want!r}"
    ref = np.format_float_scientific(want, unique=True)
    if digits(text) > digits(ref):
        return f"{text} has more digits than numpy's shortest {ref}"
    return None


def match(got: Any, want: Any, where: str) -> None:
    if isinstance(want, F32):
        assert isinstance(got, tuple) and got[0] == "num", f"{where}: {got!r} is not a number"
        why = shortest_float32(got[1], want.v)
        assert why is None, f"{where}: {why}"
    elif isinstance(want, tuple) and want[0] == "obj":
        assert isinstance(got, tuple) and got[0] == "obj", f"{where}: {got!r} is not an object"
        assert [k for k, _ in got[1]] == [k for k, _ in want[1]], f"{where}: keys {got[1]!r} vs {want[1]!r}"
        for (k, g), (_, w) in zip(got[1], want[1], strict=True):
            match(g, w, f"{where}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: {got!r} vs {want!r}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            match(g, w, f"{where}[{i}]")
    else:
        assert type(got) is type(want) and got == want, f"{where}: got {got!r}, want {want!r}"


# --------------------------------------------------------------------------- validation

_RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")
FORMATS = jsonschema.FormatChecker()


@FORMATS.checks("date-time", raises=ValueError)
def _date_time(s: object) -> bool:
    if not isinstance(s, str):
        return True
    if not _RFC3339.match(s):
        raise ValueError(f"{s!r} is not RFC 3339")
    datetime.datetime.fromisoformat(s.replace("Z", "+00:00"))
    return True


def validator(schema: Any) -> Any:
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema, format_checker=FORMATS)


# --------------------------------------------------------------------------- random types and values


def rand_scalar_type(rng: random.Random) -> DataType:
    t = rng.choice(SCALARS)
    if t == "decimal":
        p = rng.choice([1, 5, 18, 19, 38, rng.randint(1, 38)])
        return DecimalType(p, rng.choice([0, p, rng.randint(0, p)]))
    return t


def rand_struct(rng: random.Random, depth: int, width: int = 5) -> StructType:
    names = rng.sample(NAMES, min(len(NAMES), rng.randint(1, width)))
    return StructType([StructField(n, rand_type(rng, depth), rng.random() < 0.6) for n in names])


def rand_type(rng: random.Random, depth: int) -> DataType:
    roll = rng.random()
    if depth <= 0 or roll < 0.55:
        return rand_scalar_type(rng)
    if roll < 0.7:
        return rand_struct(rng, depth - 1, 3)
    if roll < 0.85:
        return ArrayType(rand_type(rng, depth - 1), rng.random() < 0.6)
    return MapType(rng.choice(MAP_KEYS), rand_type(rng, depth - 1), rng.random() < 0.6)


def rand_float32(rng: random.Random, odd: float) -> float:
    if rng.random() < odd:
        return rng.choice([math.nan, math.inf, -math.inf])
    roll = rng.random()
    if roll < 0.3:
        return float(
            np.float32(
                rng.choice(
                    [
                        0.0,
                        -0.0,
                        1.0,
                        0.1,
                        -2.5,
                        3.4028234663852886e38,
                        1e-45,
                        1.1754943508222875e-38,
                        16777216.0,
                        16777217.0,
                        1e10,
                        123456.7,
                    ]
                )
            )
        )
    if roll < 0.5:
        return float(np.float32(rng.uniform(-1000, 1000)))
    return float(np.array([rng.getrandbits(31) % 0x7F800000], np.uint32).view(np.float32)[0]) * rng.choice(
        [1, -1]
    )


def rand_double(rng: random.Random, odd: float) -> float:
    if rng.random() < odd:
        return rng.choice([math.nan, math.inf, -math.inf])
    roll = rng.random()
    if roll < 0.3:
        return rng.choice(
            [0.0, -0.0, 1.0, 0.1, 1e16, 1e22, 1e-7, 5e-324, 1.7976931348623157e308, 2.0**53 + 2]
        )
    if roll < 0.5:
        return rng.uniform(-1e6, 1e6)
    bits = rng.getrandbits(63) % 0x7FF0000000000000
    return struct.unpack("<d", struct.pack("<Q", bits))[0] * rng.choice([1, -1])


def rand_scalar(t: DataType, rng: random.Random, odd: float = 0.02) -> Any:
    if isinstance(t, BooleanType):
        return rng.random() < 0.5
    if isinstance(t, ByteType | ShortType | IntegerType | LongType):
        bits = {ByteType: 8, ShortType: 16, IntegerType: 32, LongType: 64}[type(t)]
        lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        return rng.choice([lo, hi, 0, -1, 1, rng.randint(lo, hi), rng.randint(max(lo, -300), min(hi, 300))])
    if isinstance(t, FloatType):
        return rand_float32(rng, odd)
    if isinstance(t, DoubleType):
        return rand_double(rng, odd)
    if isinstance(t, DecimalType):
        top = 10**t.precision - 1
        unscaled = rng.choice(
            [0, 1, -1, top, -top, rng.randint(-top, top), rng.randint(-1000, 1000) % (top + 1)]
        )
        return decimal.Decimal(unscaled).scaleb(-t.scale, WIDE)
    if isinstance(t, StringType):
        return (
            rng.choice(STRINGS)
            if rng.random() < 0.5
            else "".join(rng.choice('az09 _"\\\n\x01é中😀') for _ in range(rng.randint(0, 8)))
        )
    if isinstance(t, BinaryType):
        return bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 1, 2, 3, 4, 5, 6, 40])))
    if isinstance(t, TimestampType | TimestampNTZType):
        return rng.choice(
            [
                0,
                -1,
                1,
                -999_999,
                -1_000_000,
                -1_000_001,
                MIN_TS,
                MAX_TS,
                MIN_TS + 1,
                1_700_000_000_123_456,
                rng.randint(MIN_TS, MAX_TS),
                rng.randint(-(10**7), 10**7),
                rng.randint(MIN_TS, 0) // 1_000_000 * 1_000_000,
            ]
        )
    if isinstance(t, DateType):
        return rng.choice([0, -1, 1, MIN_DAY, MAX_DAY, -141427, 11016, rng.randint(MIN_DAY, MAX_DAY)])
    raise AssertionError(t)


def rand_value(
    t: DataType, rng: random.Random, null_p: float = 0.15, top: bool = True, odd: float = 0.02
) -> Any:
    if top and rng.random() < null_p:
        return None
    if isinstance(t, StructType):
        # a non-nullable field is rarely null (Spark would not hand one; the sink refuses it)
        return {
            f.name: rand_value(f.dataType, rng, null_p if f.nullable else null_p / 10, odd=odd)
            for f in t.fields
        }
    if isinstance(t, ArrayType):
        item_null = null_p if t.containsNull else null_p / 10
        return [
            rand_value(t.elementType, rng, item_null, odd=odd) for _ in range(rng.choice([0, 1, 2, 3, 5]))
        ]
    if isinstance(t, MapType):
        keys: dict[Any, None] = {}
        for _ in range(rng.choice([0, 1, 2, 3])):
            keys.setdefault(rand_scalar(t.keyType, rng))
        value_null = null_p if t.valueContainsNull else null_p / 10
        return [(k, rand_value(t.valueType, rng, value_null, odd=odd)) for k in keys]
    return rand_scalar(t, rng, odd)


def rand_row(t: StructType, rng: random.Random, null_p: float = 0.15, odd: float = 0.02) -> dict[str, Any]:
    got = rand_value(t, rng, null_p, top=False, odd=odd)
    assert got is not None
    return got


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

        def junk_items() -> list[Any]:
            return rand_value(t, rng, 0.0) or []

        flat = junk_items()[: rng.choice([0, 0, 1, 2])]
        offsets = [len(flat)]
        for v in padded:
            flat.extend(v if v is not None else junk_items())
            offsets.append(len(flat))
        if rng.random() < 0.5:
            flat.extend(junk_items())
        off = pa.array(offsets, pa.int32())
        if isinstance(t, MapType):
            keys = build([k for k, _ in flat], t.keyType, rng)
            items = build([x for _, x in flat], t.valueType, rng)
            arr = pa.MapArray.from_arrays(off, keys, items, type=at, mask=mask)
        else:
            arr = pa.ListArray.from_arrays(off, build(flat, t.elementType, rng), type=at, mask=mask)
    else:
        arr = pa.array(padded, at)
    return arr.slice(lead, len(values))


# --------------------------------------------------------------------------- the check


REASONS = (
    "is null, and the schema requires it",
    "is null, and the schema takes no null there",
    "is NaN or infinite",
)


def encode_and_check(spark: StructType, rows: list[Any], column: pa.Array, schema: Any = None) -> Any:
    schema = schema if schema is not None else jw.schema_of(spark)
    writer = jw.JsonWriter(schema)
    writer.check(spark, "value")
    got = writer.encode(column, HEADER)
    assert got.values.type == pa.binary() and len(got.values) == len(rows)
    refused = dict(got.refused)
    assert len(refused) == len(got.refused), "a row refused twice"
    check = validator(schema)
    for r, (row, raw) in enumerate(zip(rows, got.values.to_pylist(), strict=True)):
        if row is None:
            assert raw is None and r not in refused, f"row {r}: a null row is a null value"
            continue
        try:
            want = reference(row, spark)
        except Refused as e:
            assert raw is None and r in refused, f"row {r} should be refused ({e}), and was written: {raw!r}"
            assert any(s in refused[r] for s in REASONS) and "value" in refused[r], refused[r]
            continue
        assert r not in refused, f"row {r} refused: {refused[r]}"
        assert raw is not None and raw.startswith(HEADER), f"row {r}: no header"
        doc = raw[len(HEADER) :]
        match(parse(doc), want, f"row {r}")
        errors = list(check.iter_errors(json.loads(doc)))
        assert not errors, f"row {r}: {doc!r} breaks the schema: {errors[0].message}"
    return got


# --------------------------------------------------------------------------- differential


@pytest.mark.parametrize("seed", range(24))
def test_random_columns_match_reference(seed: int) -> None:
    rng = random.Random(seed)
    for case in range(8):
        spark = rand_struct(rng, 3)
        n = rng.randint(1, 40)
        top_nulls = case % 3 == 0  # a top-level null takes the writer's other path (take)
        rows = [None if top_nulls and rng.random() < 0.1 else rand_row(spark, rng) for _ in range(n)]
        column = build(rows, spark, rng)
        column.validate(full=True)
        encode_and_check(spark, rows, column)


def test_every_scalar_nullable_and_not() -> None:
    rng = random.Random(99)
    types = [rand_scalar_type(rng) if t == "decimal" else t for t in SCALARS] + [
        DecimalType(38, 0),
        DecimalType(38, 38),
        DecimalType(38, 10),
        DecimalType(1, 1),
        DecimalType(1, 0),
    ]
    fields = [StructField(f"f{i}_{n}", t, n) for i, t in enumerate(types) for n in (True, False)]
    spark = StructType(fields)
    rows = [rand_row(spark, rng, 0.0, 0.0) for _ in range(60)] + [
        {f.name: None if f.nullable else rand_scalar(f.dataType, rng, 0.0) for f in fields}
    ]
    got = encode_and_check(spark, rows, build(rows, spark, rng))
    assert not got.refused
    assert got.values[60].as_py().startswith(HEADER + b'{"f0_False":')


def test_document_text() -> None:
    spark = StructType(
        [
            StructField("i", IntegerType()),
            StructField("b", BooleanType()),
            StructField("s", StringType()),
            StructField("y", BinaryType()),
            StructField("t", TimestampType()),
            StructField("d", DateType()),
            StructField("n", DecimalType(5, 2)),
            StructField("f", FloatType()),
            StructField("x", DoubleType()),
            StructField("l", ArrayType(IntegerType())),
            StructField("m", MapType(IntegerType(), StringType())),
            StructField("o", StructType([StructField("p", LongType())])),
            StructField("z", LongType()),
        ]
    )
    row = {
        "i": -7,
        "b": False,
        "s": "é\n",
        "y": b"\xff\x00",
        "t": -1,
        "d": -1,
        "n": decimal.Decimal("-0.05"),
        "f": float(np.float32(0.1)),
        "x": 0.1,
        "l": [1, None],
        "m": [(3, None), (-4, "q")],
        "o": {"p": None},
        "z": None,
    }
    got = jw.JsonWriter(jw.schema_of(spark)).encode(pa.array([row], small_type(arrow_type(spark))), HEADER)
    assert (
        got.values[0].as_py()
        == HEADER
        + (
            '{"i":-7,"b":false,"s":"é\\n","y":"/wA=","t":"1969-12-31T23:59:59.999999Z","d":"1969-12-31",'
            '"n":-0.05,"f":0.1,"x":0.1,"l":[1,null],"m":{"3":null,"-4":"q"},"o":{}}'
        ).encode()
    )


def test_required_nulls_refuse_their_row_only() -> None:
    spark = StructType(
        [
            StructField("id", IntegerType(), False),
            StructField("inner", StructType([StructField("must", StringType(), False)]), True),
            StructField("xs", ArrayType(LongType(), False)),
            StructField("m", MapType(StringType(), DoubleType(), False)),
            StructField("f", FloatType()),
        ]
    )
    ok = {"id": 0, "inner": {"must": "x"}, "xs": [1], "m": [("k", 1.5)], "f": 1.0}
    rows = [
        ok,
        {**ok, "id": None},
        {**ok, "inner": {"must": None}},
        {**ok, "xs": [1, None]},
        {**ok, "m": [("k", None)]},
        {**ok, "inner": None, "xs": None, "m": None},  # nulls above: fine
        {**ok, "f": math.nan},
        {**ok, "m": [("k", -math.inf)]},
        None,
        ok,
    ]
    got = encode_and_check(spark, rows, build(rows, spark, random.Random(3)))
    assert [r for r, _ in got.refused] == [1, 2, 3, 4, 6, 7]
    whys = dict(got.refused)
    assert whys[1] == "value.id is null, and the schema requires it"
    assert whys[2] == "value.inner.must is null, and the schema requires it"
    assert whys[3].startswith("value.xs[]") and whys[4].startswith("value.m[]")
    assert whys[6].startswith("value.f is NaN") and whys[7].startswith("value.m[] is NaN")


def test_sliced_columns_encode_their_rows() -> None:
    rng = random.Random(4)
    spark = StructType(
        [
            StructField("a", IntegerType()),
            StructField("s", StringType()),
            StructField("l", ArrayType(StructType([StructField("b", BooleanType())]))),
            StructField("m", MapType(StringType(), ArrayType(LongType()))),
        ]
    )
    rows = [rand_row(spark, rng) for _ in range(30)]
    full = build(rows, spark, rng)
    for a, b in [(0, 30), (1, 29), (7, 3), (29, 1)]:
        encode_and_check(spark, rows[a : a + b], full.slice(a, b))


@pytest.mark.parametrize("rows", [[], [None], [None, None, None]], ids=["empty", "one-null", "all-null"])
def test_empty_and_all_null_columns(rows: list[Any]) -> None:
    """A batch of no rows, or of null rows only (tombstones; a key column that is all
    null): null values, nothing refused."""
    spark = StructType([StructField("a", IntegerType())])
    got = jw.JsonWriter(jw.schema_of(spark)).encode(pa.array(rows, small_type(arrow_type(spark))), HEADER)
    assert got.values.to_pylist() == rows and got.refused == []
    assert got.values.type == pa.binary()


def test_wide_struct_over_64_fields() -> None:
    """A column of 70 fields (wide rows are common) encodes like a narrow one."""
    spark = StructType([StructField(f"c{i}", IntegerType()) for i in range(70)])
    rows = [{f"c{i}": i * r for i in range(70)} for r in range(3)]
    encode_and_check(spark, rows, pa.array(rows, small_type(arrow_type(spark))))


# --------------------------------------------------------------------------- strings


def test_strings_every_control_character_quote_backslash_and_unicode() -> None:
    everything = [chr(c) for c in range(0x20)] + [
        '"',
        "\\",
        "/",
        "\x7f",
        "\x80",
        "\xa0",
        "é",
        "\u07ff",
        "\u0800",
        "\u2028",
        "\u2029",
        "\ud7ff",
        "\ue000",
        "\ufeff",
        "\ufffd",
        "\uffff",
        "\U00010000",
        "😀",
        "\U0010ffff",
    ]
    values = [*everything, "".join(everything), "a\x00b", "\\u0000", '\\"', "end\\", ""]
    spark = StructType(
        [
            StructField("s", StringType()),
            StructField("m", MapType(StringType(), StringType())),
            StructField("l", ArrayType(StringType())),
        ]
    )
    rows = [{"s": v, "m": [(v, v)], "l": [v, v]} for v in values]
    got = encode_and_check(spark, rows, build(rows, spark, random.Random(7)))
    for v, raw in zip(values, got.values.to_pylist(), strict=True):
        doc = raw[len(HEADER) :]
        assert json.loads(doc)["s"] == v
        # RFC 8259: control characters are escaped; everything else may pass as UTF-8
        assert not any(b < 0x20 for b in doc), doc


def test_property_names_are_escaped() -> None:
    names = ['q"', "b\\", "\n", "\x01", "é", "😀", "", " "]
    spark = StructType([StructField(n, IntegerType()) for n in names])
    rows = [{n: i for i, n in enumerate(names)}]
    got = encode_and_check(spark, rows, pa.array(rows, small_type(arrow_type(spark))))
    assert list(json.loads(got.values[0].as_py()[len(HEADER) :])) == names


def test_binary_base64() -> None:
    values = [b"", b"\0", b"\xff\xfe", b"abc", b"abcd", b"abcde", bytes(range(256))]
    spark = StructType([StructField("y", BinaryType())])
    rows = [{"y": v} for v in values]
    got = encode_and_check(spark, rows, build(rows, spark, random.Random(8)))
    for v, raw in zip(values, got.values.to_pylist(), strict=True):
        assert base64.b64decode(json.loads(raw[len(HEADER) :])["y"], validate=True) == v


# --------------------------------------------------------------------------- numbers


def float32_texts(values: np.ndarray) -> list[str]:
    spark = StructType([StructField("f", FloatType())])
    column = pa.StructArray.from_arrays([pa.array(values, pa.float32())], names=["f"])
    got = jw.JsonWriter(jw.schema_of(spark)).encode(column, HEADER)
    assert not got.refused
    return [v[len(HEADER) + 5 : -1].decode() for v in got.values.to_pylist()]


def test_float32_shortest_edges() -> None:
    edges = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.1,
        0.2,
        0.3,
        1 / 3,
        2 / 3,
        16777216.0,
        16777217.0,
        3.4028234663852886e38,
        1.1754943508222875e-38,
        1.1754942106924411e-38,
        1e-45,
        1.401298464324817e-45,
        2.802596928649634e-45,
        1e10,
        1e-10,
        123456.789,
        9.999999e-5,
        1e-4,
        1e-5,
        1e15,
        1e16,
        1e17,
        8388607.5,
        0.30000001192092896,
        7.038531e-26,
        3.4028235e38,
        1.7014118e38,
        9.8e-44,
        2.0**-126,
        2.0**127,
        2.0**-149,
    ]
    values = np.array(edges + [-x for x in edges], np.float32)
    for v, text in zip(values, float32_texts(values), strict=True):
        assert shortest_float32(text, float(v)) is None, (v, text)


def test_float32_powers_of_two() -> None:
    """At a power of two the float below is twice as close as the float above, and the
    shortest text may be one that rounds away from the value (numpy finds it)."""
    values = (np.arange(1, 255, dtype=np.uint32) << 23).view(np.float32)
    bad = [
        (repr(v), text, np.format_float_scientific(v, unique=True))
        for v, text in zip(values, float32_texts(values), strict=True)
        if shortest_float32(text, float(v)) is not None
    ]
    assert not bad, f"{len(bad)} powers of two not written shortest: {bad}"


def test_float32_random_bits() -> None:
    rng = np.random.default_rng(11)
    bits = rng.integers(0, 0x7F800000, 20000, dtype=np.uint32)
    bits = np.concatenate(
        [
            bits,
            bits | 0x80000000,
            np.arange(0, 2000, dtype=np.uint32),
            np.arange(0x7F7FF000, 0x7F800000, dtype=np.uint32),
        ]
    )
    values = bits.view(np.float32)
    for v, text in zip(values, float32_texts(values), strict=True):
        back = np.float32(float(text))
        assert back.tobytes() == v.tobytes(), (v, text)
        assert digits(text) <= digits(np.format_float_scientific(v, unique=True)), (v, text)


def test_doubles_are_python_repr() -> None:
    rng = random.Random(12)
    values = [
        0.0,
        -0.0,
        0.1,
        1e16,
        1e22,
        1e23,
        1e-7,
        5e-324,
        1.7976931348623157e308,
        2.0**53,
        2.0**53 + 2,
        123456789012345680.0,
    ] + [rand_double(rng, 0.0) for _ in range(3000)]
    spark = StructType([StructField("x", DoubleType())])
    column = pa.array([{"x": v} for v in values], small_type(arrow_type(spark)))
    got = jw.JsonWriter(jw.schema_of(spark)).encode(column, HEADER)
    for v, raw in zip(values, got.values.to_pylist(), strict=True):
        assert raw == HEADER + b'{"x":' + repr(v).encode() + b"}"


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("kind", ["float", "double"])
def test_non_finite_numbers_refuse_the_row(value: float, kind: str) -> None:
    t = FloatType() if kind == "float" else DoubleType()
    spark = StructType([StructField("x", t), StructField("l", ArrayType(t))])
    rows = [{"x": 1.0, "l": []}, {"x": value, "l": []}, {"x": None, "l": [0.5, value]}, {"x": 2.0, "l": None}]
    got = encode_and_check(spark, rows, pa.array(rows, small_type(arrow_type(spark))))
    assert [r for r, _ in got.refused] == [1, 2]


def decimal_texts(values: list[decimal.Decimal], t: pa.DataType) -> list[str]:
    column = pa.StructArray.from_arrays([pa.array(values, t)], names=["n"])
    spark = StructType([StructField("n", DecimalType(t.precision, max(t.scale, 0)))])
    got = jw.JsonWriter(jw.schema_of(spark)).encode(column, HEADER)
    assert not got.refused
    return [v[len(HEADER) + 5 : -1].decode() for v in got.values.to_pylist()]


@pytest.mark.parametrize("scale", [0, 1, 2, 10, 18, 19, 20, 37, 38])
def test_decimals_precision_38(scale: int) -> None:
    top = 10**38 - 1
    unscaled = [
        0,
        1,
        -1,
        top,
        -top,
        10**scale,
        -(10**scale),
        2**63,
        -(2**63),
        2**64,
        2**64 - 1,
        -(2**64),
        2**126,
        -(2**126),
        5 * 10**37,
        12345678901234567890123456789012345678,
    ]
    values = [decimal.Decimal(u).scaleb(-scale, WIDE) for u in unscaled if abs(u) <= top]
    for v, text in zip(values, decimal_texts(values, pa.decimal128(38, scale)), strict=True):
        assert text == format(v, "f"), (v, text)
        assert decimal.Decimal(text) == v


def test_decimal_negative_scale() -> None:
    """Arrow (and Spark with spark.sql.legacy.allowNegativeScaleOfDecimal) can hold a
    negative scale: the value is still an exact number."""
    values = [decimal.Decimal("12300"), decimal.Decimal("-9999900"), decimal.Decimal(0)]
    t = pa.decimal128(5, -2)
    column = pa.StructArray.from_arrays([pa.array(values, t)], names=["n"])
    schema = {"type": "object", "properties": {"n": {"type": "number"}}}
    got = jw.JsonWriter(schema).encode(column, HEADER)
    assert [
        decimal.Decimal(json.loads(v[len(HEADER) :])["n"]) if v else None for v in got.values.to_pylist()
    ] == values


# --------------------------------------------------------------------------- dates and times


def test_timestamps_at_the_extremes() -> None:
    values = [
        MIN_TS,
        MIN_TS + 1,
        MIN_TS + 999_999,
        MAX_TS,
        MAX_TS - 999_999,
        0,
        -1,
        -999_999,
        -1_000_000,
        -1_000_001,
        -DAY_US,
        -DAY_US - 1,
        -62135596800000000 + DAY_US * 59,  # 0001-03-01
        951782400000000,
        951868800000000 - 1,
        4107542400000000,  # 2000-02-29, 2100-03-01
        -2208988800000001,
        -12219292800000000,
    ]  # 1899-12-31T23:59:59.999999, 1582-10-15
    spark = StructType([StructField("t", TimestampType()), StructField("n", TimestampNTZType())])
    rows = [{"t": v, "n": v} for v in values]
    got = encode_and_check(spark, rows, build(rows, spark, random.Random(13)))
    texts = [json.loads(v[len(HEADER) :])["t"] for v in got.values.to_pylist()]
    assert texts[:6] == [
        "0001-01-01T00:00:00Z",
        "0001-01-01T00:00:00.000001Z",
        "0001-01-01T00:00:00.999999Z",
        "9999-12-31T23:59:59.999999Z",
        "9999-12-31T23:59:59Z",
        "1970-01-01T00:00:00Z",
    ]
    assert texts[6:10] == [
        "1969-12-31T23:59:59.999999Z",
        "1969-12-31T23:59:59.000001Z",
        "1969-12-31T23:59:59Z",
        "1969-12-31T23:59:58.999999Z",
    ]
    assert texts[-1] == "1582-10-15T00:00:00Z"


def test_timestamps_beyond_year_9999_and_before_year_1() -> None:
    """Arrow holds any int64 of microseconds: outside Spark's years the text continues the
    proleptic calendar (a signed year, as ISO 8601's expanded years)."""
    values = [I64[0], I64[1], I64[0] + 1, MIN_TS - 1, MAX_TS + 1, MIN_TS - 366 * DAY_US]
    spark = StructType([StructField("t", TimestampType())])
    rows = [{"t": v} for v in values]
    got = jw.JsonWriter(jw.schema_of(spark)).encode(pa.array(rows, small_type(arrow_type(spark))), HEADER)
    texts = [json.loads(v[len(HEADER) :])["t"] for v in got.values.to_pylist()]
    assert texts == [fmt_timestamp(v) for v in values]
    assert texts[0] == "-290308-12-21T19:59:05.224192Z" and texts[1] == "+294247-01-10T04:00:54.775807Z"
    assert texts[3] == "0000-12-31T23:59:59.999999Z" and texts[4] == "+10000-01-01T00:00:00Z"


def test_dates_at_the_extremes() -> None:
    values = [MIN_DAY, MAX_DAY, 0, -1, 1, 11016, -141427, -719103, MIN_DAY - 1, MAX_DAY + 1, I32[0], I32[1]]
    spark = StructType([StructField("d", DateType()), StructField("m", MapType(DateType(), DateType()))])
    rows = [{"d": v, "m": [(v, v)]} if MIN_DAY <= v <= MAX_DAY else {"d": v, "m": None} for v in values]
    got = jw.JsonWriter(jw.schema_of(spark)).encode(pa.array(rows, small_type(arrow_type(spark))), HEADER)
    docs = [json.loads(v[len(HEADER) :]) for v in got.values.to_pylist()]
    assert [d["d"] for d in docs] == [fmt_date(v) for v in values]
    assert [d["d"] for d in docs[:4]] == ["0001-01-01", "9999-12-31", "1970-01-01", "1969-12-31"]
    assert docs[8]["d"] == "0000-12-31" and docs[9]["d"] == "+10000-01-01"
    for v, d in zip(values[:8], docs[:8], strict=True):
        assert d["m"] == {fmt_date(v): fmt_date(v)}


# --------------------------------------------------------------------------- schemas


def test_schema_of_shape() -> None:
    spark = StructType(
        [
            StructField("id", LongType(), False),
            StructField("name", StringType()),
            StructField("tags", ArrayType(StringType(), False)),
            StructField("m", MapType(StringType(), DoubleType(), True), False),
            StructField("when", TimestampType()),
            StructField("day", DateType()),
            StructField("raw", BinaryType()),
            StructField("n", DecimalType(5, 2)),
        ]
    )
    s = jw.schema_of(spark)
    jsonschema.Draft7Validator.check_schema(s)
    assert s["type"] == "object" and s["required"] == ["id", "m"]
    assert s["properties"]["id"] == {"type": "integer"}
    assert s["properties"]["name"] == {"oneOf": [{"type": "null"}, {"type": "string"}]}
    assert s["properties"]["tags"]["oneOf"][1] == {"type": "array", "items": {"type": "string"}}
    assert s["properties"]["m"] == {
        "type": "object",
        "additionalProperties": {"oneOf": [{"type": "null"}, {"type": "number"}]},
    }
    assert s["properties"]["when"]["oneOf"][1] == {"type": "string", "format": "date-time"}
    assert s["properties"]["day"]["oneOf"][1] == {"type": "string", "format": "date"}


@pytest.mark.parametrize(
    "stype",
    [
        IntegerType(),
        StructType([StructField("i", DayTimeIntervalType())]),
        StructType([StructField("a", ArrayType(DayTimeIntervalType()))]),
    ],
    ids=lambda t: t.simpleString(),
)
def test_schema_of_refuses(stype: DataType) -> None:
    with pytest.raises(SchemaError):
        jw.schema_of(stype)


GIVEN = {
    "type": "object",
    "definitions": {"Pt": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}},
    "properties": {
        "i": {"type": "integer"},
        "n": {"type": "number"},
        "s": {"type": "string"},
        "b": {"type": "boolean"},
        "o": {"$ref": "#/definitions/Pt"},
        "l": {"type": "array", "items": {"type": "integer"}},
        "ln": {"type": "array", "items": {"type": ["integer", "null"]}},
        "m": {"type": "object", "additionalProperties": {"type": "string"}},
        "u": {"oneOf": [{"type": "null"}, {"type": "integer"}]},
        "any": {},
        "tl": {"type": ["string", "null"], "format": "date-time"},
    },
    "required": ["i"],
}


@pytest.mark.parametrize(
    "field,stype,needle",
    [
        ("i", StringType(), "value.i"),
        ("i", DoubleType(), "value.i"),
        ("i", DecimalType(10, 0), "value.i"),
        ("i", BooleanType(), "value.i"),
        ("n", StringType(), "value.n"),
        ("s", IntegerType(), "value.s"),
        ("s", ArrayType(StringType()), "value.s"),
        ("b", IntegerType(), "value.b"),
        ("o", IntegerType(), "value.o"),
        ("o", StructType([StructField("x", StringType())]), "value.o.x"),
        ("l", StringType(), "value.l"),
        ("l", ArrayType(StringType()), r"value.l\[\]"),
        ("m", ArrayType(StringType()), "value.m"),
        ("m", MapType(StringType(), IntegerType()), r"value.m\[\]"),
        ("u", StringType(), "value.u"),
        ("tl", IntegerType(), "value.tl"),
    ],
)
def test_check_refuses_mismatches(field: str, stype: DataType, needle: str) -> None:
    with pytest.raises(SchemaError, match=needle):
        jw.JsonWriter(GIVEN).check(StructType([StructField(field, stype)]), "value")


@pytest.mark.parametrize(
    "field,stype",
    [
        ("i", ByteType()),
        ("i", LongType()),
        ("n", IntegerType()),
        ("n", FloatType()),
        ("n", DecimalType(38, 2)),
        ("s", BinaryType()),
        ("s", DateType()),
        ("s", TimestampType()),
        ("o", StructType([StructField("x", ShortType())])),
        ("l", ArrayType(LongType())),
        ("m", MapType(IntegerType(), StringType())),
        ("u", LongType()),
        ("any", StructType([StructField("q", StringType())])),
        ("any", ArrayType(DoubleType())),
        ("undeclared", IntegerType()),
        ("tl", TimestampNTZType()),
    ],
)
def test_check_accepts(field: str, stype: DataType) -> None:
    jw.JsonWriter(GIVEN).check(StructType([StructField(field, stype)]), "value")


def test_given_schema_required_and_item_nulls() -> None:
    arrow = pa.struct(
        [
            ("i", pa.int64()),
            ("o", pa.struct([("x", pa.int32())])),
            ("l", pa.list_(pa.int32())),
            ("ln", pa.list_(pa.int32())),
            ("m", pa.map_(pa.string(), pa.string())),
        ]
    )
    rows = [
        {"i": 1, "o": {"x": 2}, "l": [1], "ln": [None], "m": [("k", "v")]},
        {"i": None, "o": None, "l": None, "ln": None, "m": None},
        {"i": 1, "o": {"x": None}, "l": None, "ln": None, "m": None},
        {"i": 1, "o": None, "l": [None], "ln": None, "m": None},
        {"i": 1, "o": None, "l": None, "ln": None, "m": [("k", None)]},
        {"i": 5, "o": None, "l": None, "ln": None, "m": None},
    ]
    got = jw.JsonWriter(GIVEN).encode(pa.array(rows, arrow), HEADER)
    assert [r for r, _ in got.refused] == [1, 2, 3, 4]
    assert json.loads(got.values[0].as_py()[len(HEADER) :]) == {
        "i": 1,
        "o": {"x": 2},
        "l": [1],
        "ln": [None],
        "m": {"k": "v"},
    }
    assert got.values[5].as_py() == HEADER + b'{"i":5}'


def test_given_schema_additional_properties_false() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False}
    jw.JsonWriter(schema).check(StructType([StructField("a", IntegerType())]), "value")
    with pytest.raises(SchemaError, match="additionalProperties"):
        jw.JsonWriter(schema).check(
            StructType([StructField("a", IntegerType()), StructField("b", IntegerType())]), "value"
        )


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": True}},
        {"type": "object", "properties": {"a": {"type": "object", "additionalProperties": True}}},
        {"type": "object", "properties": {"a": {"type": "array", "items": True}}},
    ],
    ids=["property-true", "additionalProperties-true", "items-true"],
)
def test_given_schema_boolean_subschemas(schema: Any) -> None:
    """Draft 7's boolean schemas (``true``: anything) are common in registry schemas."""
    spark = StructType(
        [
            StructField(
                "a",
                MapType(StringType(), IntegerType())
                if "additionalProperties" in json.dumps(schema)
                else ArrayType(IntegerType()),
            )
        ]
    )
    jw.JsonWriter(schema).check(spark, "value")
    rows = [{"a": [("k", 1)] if isinstance(spark["a"].dataType, MapType) else [1, None]}]
    got = jw.JsonWriter(schema).encode(pa.array(rows, small_type(arrow_type(spark))), HEADER)
    assert got.refused == []


def test_double_map_keys_are_spark_strings() -> None:
    """Map keys are cast to strings as Spark casts them (and as its to_json writes them): a
    double 1.0 is "1.0", not Arrow's cast text "1"."""
    spark = StructType(
        [
            StructField("d", MapType(DoubleType(), IntegerType())),
            StructField("f", MapType(FloatType(), IntegerType())),
        ]
    )
    rows = [{"d": [(1.0, 1), (0.5, 2)], "f": [(-2.0, 1)]}]
    got = jw.JsonWriter(jw.schema_of(spark)).encode(pa.array(rows, small_type(arrow_type(spark))), HEADER)
    doc = json.loads(got.values[0].as_py()[len(HEADER) :])
    assert list(doc["d"]) == ["1.0", "0.5"] and list(doc["f"]) == ["-2.0"]
