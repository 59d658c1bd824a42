"""The jdbc sink's binary COPY (``binary_copy``, ``_pgcopy.c``) against the real PostgreSQL:
every pair of Arrow and column type it encodes stores, row for row, what the CSV path
stores (property-based over values, nulls, empty and sliced batches); a refused value is
refused with the same SQLSTATE (dead letters tell row errors by it); the pairs whose binary
input would store something else keep the CSV path.
"""

from __future__ import annotations

import datetime as dt
import io
import json
from collections import Counter
from types import SimpleNamespace
from typing import Any

import psycopg2
import pyarrow as pa
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import types as T

from spark_ext.connectors.jdbc import binary_copy
from spark_ext.connectors.jdbc.writer import to_csv
from tests.support.pg_util import execute, table_name

pytestmark = pytest.mark.services

UTC = dt.UTC
# (column, Arrow type, PostgreSQL type, Spark type, values)
_TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=40)
_DAY = dt.date(1970, 1, 1)


def _micros(d: dt.datetime) -> int:
    return (d - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)


_TIMES = st.datetimes(min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31, 23, 59, 59))
COLUMNS: list[tuple[str, pa.DataType, str, T.DataType, Any]] = [
    ("i8_2", pa.int8(), "int2", T.ByteType(), st.integers(-(2**7), 2**7 - 1)),
    ("i8_4", pa.int8(), "int4", T.ByteType(), st.integers(-(2**7), 2**7 - 1)),
    ("i8_8", pa.int8(), "int8", T.ByteType(), st.integers(-(2**7), 2**7 - 1)),
    ("i16_2", pa.int16(), "int2", T.ShortType(), st.integers(-(2**15), 2**15 - 1)),
    ("i16_4", pa.int16(), "int4", T.ShortType(), st.integers(-(2**15), 2**15 - 1)),
    ("i16_8", pa.int16(), "int8", T.ShortType(), st.integers(-(2**15), 2**15 - 1)),
    ("i32_4", pa.int32(), "int4", T.IntegerType(), st.integers(-(2**31), 2**31 - 1)),
    ("i32_8", pa.int32(), "int8", T.IntegerType(), st.integers(-(2**31), 2**31 - 1)),
    ("i64_8", pa.int64(), "int8", T.LongType(), st.integers(-(2**63), 2**63 - 1)),
    ("f4", pa.float32(), "float4", T.FloatType(), st.floats(width=32)),
    ("f8", pa.float64(), "float8", T.DoubleType(), st.floats()),
    ("b", pa.bool_(), "bool", T.BooleanType(), st.booleans()),
    ("s_text", pa.string(), "text", T.StringType(), _TEXT),
    ("s_varchar", pa.string(), "varchar(40)", T.StringType(), _TEXT),
    ("s_bpchar", pa.string(), "char(8)", T.StringType(), _TEXT.filter(lambda s: len(s) <= 8)),
    ("s_json", pa.string(), "json", T.StringType(), _TEXT.map(json.dumps)),
    ("s_jsonb", pa.string(), "jsonb", T.StringType(), _TEXT.map(lambda s: json.dumps({"k": s, "n": [1]}))),
    ("bin", pa.binary(), "bytea", T.BinaryType(), st.binary(max_size=40)),
    ("ts_tz", pa.timestamp("us", tz="UTC"), "timestamptz", T.TimestampType(), _TIMES.map(_micros)),
    ("ts_utc", pa.timestamp("us", tz="UTC"), "timestamp", T.TimestampType(), _TIMES.map(_micros)),
    ("ts_ntz", pa.timestamp("us"), "timestamp", T.TimestampNTZType(), _TIMES.map(_micros)),
    ("d", pa.date32(), "date", T.DateType(), st.dates().map(lambda d: (d - _DAY).days)),
]
SCHEMA = T.StructType([T.StructField(c[0], c[3]) for c in COLUMNS])
_TYPNAME = {"varchar(40)": "varchar", "char(8)": "bpchar"}  # pg_type's names of the declared types
KINDS = binary_copy.kinds(SCHEMA, {c[0]: _TYPNAME.get(c[2], c[2]) for c in COLUMNS})


def _pg(url: str) -> Any:
    return psycopg2.connect(sa.engine.make_url(url).render_as_string(hide_password=False)
                            .replace("postgresql+psycopg2", "postgresql"))


@pytest.fixture(scope="module")
def tables(services: Any) -> Any:
    url = services.postgres_url
    names = table_name("bcopy"), table_name("ccopy")
    cols = ", ".join(f"{c[0]} {c[2]}" for c in COLUMNS)
    for t in names:
        execute(url, f"CREATE TABLE {t} (seq int8, {cols})")
    conn = _pg(url)
    yield conn, names
    conn.close()
    for t in names:
        execute(url, f"DROP TABLE {t}")


def _batch(rows: list[list[Any]], skip: int) -> pa.RecordBatch:
    arrays = [pa.array([r[i] for r in rows], c[1]) for i, c in enumerate(COLUMNS)]
    seq = pa.array(range(len(rows)), pa.int64())
    return pa.RecordBatch.from_arrays([seq, *arrays], ["seq", *(c[0] for c in COLUMNS)]).slice(skip)


def _stored(conn: Any, table: str) -> Counter[str]:
    with conn.cursor() as cur:
        cur.execute(f"SELECT row_to_json(t)::text FROM {table} t")
        return Counter(r[0] for r in cur.fetchall())


def _copy(conn: Any, stmt: str, data: bytes) -> None:
    with conn.cursor() as cur:
        cur.copy_expert(stmt, io.BytesIO(data), len(data))


_ROW = st.tuples(*(st.none() | c[4] for c in COLUMNS)).map(list)


def test_every_planned_pair_has_an_encoding() -> None:
    assert len(KINDS) == len(COLUMNS)


@settings(max_examples=60, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rows=st.lists(_ROW, max_size=30), skip=st.integers(0, 3))
def test_a_binary_copy_stores_what_the_csv_copy_stores(tables: Any, rows: list[list[Any]], skip: int) -> None:
    conn, (binary, csv) = tables
    rb = _batch(rows, min(skip, len(rows)))
    cols = ", ".join(rb.schema.names)
    data = binary_copy.encode(rb, (binary_copy.I64_8, *KINDS))
    assert data is not None
    try:
        _copy(conn, f"COPY {binary} ({cols}) FROM STDIN (FORMAT binary)", data)
        _copy(conn, f"COPY {csv} ({cols}) FROM STDIN (FORMAT csv)", to_csv(rb, _plan(rb), None))
        assert _stored(conn, binary) == _stored(conn, csv)
        assert sum(_stored(conn, binary).values()) == rb.num_rows
    finally:
        conn.rollback()


def _plan(rb: pa.RecordBatch) -> Any:
    """What ``to_csv`` reads of the plan: the bytea columns."""
    return SimpleNamespace(binary_columns=tuple(n for n in rb.schema.names if n == "bin"))


@pytest.mark.parametrize(("pg_type", "arrow", "value", "sqlstate"), [
    ("varchar(3)", pa.string(), "four", "22001"),  # too long
    ("text", pa.string(), "a\x00b", "22021"),  # a NUL byte
    ("json", pa.string(), "{not json", "22P02"),
    ("int2", pa.int16(), None, "23502"),  # NULL into NOT NULL
])
def test_a_refused_value_is_refused_with_the_csv_paths_sqlstate(services: Any, pg_type: str,
                                                                 arrow: pa.DataType, value: Any,
                                                                 sqlstate: str) -> None:
    url, t = services.postgres_url, table_name("brefuse")
    execute(url, f"CREATE TABLE {t} (v {pg_type} NOT NULL)")
    conn = _pg(url)
    try:
        rb = pa.RecordBatch.from_arrays([pa.array([value], arrow)], ["v"])
        spark_type = T.ShortType() if arrow == pa.int16() else T.StringType()
        schema = T.StructType([T.StructField("v", spark_type)])
        kinds = binary_copy.kinds(schema, {"v": pg_type.split("(")[0]})
        data = binary_copy.encode(rb, kinds)
        assert data is not None
        got = []
        for stmt, payload in ((f"COPY {t} (v) FROM STDIN (FORMAT binary)", data),
                              (f"COPY {t} (v) FROM STDIN (FORMAT csv)", to_csv(rb, _plan(rb), None))):
            with pytest.raises(psycopg2.Error) as e:
                _copy(conn, stmt, payload)
            conn.rollback()
            got.append(e.value.pgcode)
        assert got == [sqlstate, sqlstate]
    finally:
        conn.close()
        execute(url, f"DROP TABLE {t}")


@pytest.mark.parametrize(("spark_type", "pg_type"), [
    (T.FloatType(), "float8"),  # CSV's shortest text of the float, not its widened bits
    (T.TimestampNTZType(), "timestamptz"),  # the server would read a local time in its zone
    (T.StringType(), "bytea"),  # CSV's text is read as bytea's escape format
    (T.BinaryType(), "text"),  # CSV writes bytes as \x hex
    (T.LongType(), "int4"),  # CSV's text is range-checked by the server
    (T.DecimalType(10, 2), "numeric"),
    (T.StringType(), "uuid"),
    (T.ArrayType(T.LongType()), "_int8"),
])
def test_a_pair_whose_binary_input_differs_keeps_the_csv_path(spark_type: T.DataType, pg_type: str) -> None:
    schema = T.StructType([T.StructField("id", T.LongType()), T.StructField("v", spark_type)])
    assert binary_copy.kinds(schema, {"id": "int8", "v": pg_type}) == ()
    assert binary_copy.kinds(schema, {"id": "int8"}) == ()  # a column the table lacks


def test_a_batch_of_other_arrow_types_than_planned_is_sent_as_csv() -> None:
    kinds = binary_copy.kinds(T.StructType([T.StructField("v", T.StringType())]), {"v": "text"})
    assert kinds == (binary_copy.BYTES,)
    large = pa.RecordBatch.from_arrays([pa.array(["x"], pa.large_string())], ["v"])
    assert binary_copy.encode(large, kinds) is None
    assert binary_copy.encode(pa.RecordBatch.from_arrays([pa.array(["x"])], ["v"]), kinds) is not None
