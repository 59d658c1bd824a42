"""PostgreSQL's binary COPY of Arrow record batches (``_pgcopy.c``): the rows go as each
column type's binary input, so neither side formats or parses text per value.

The driver picks each column's encoding at query start (``kinds``) from its Spark type and
the target column's PostgreSQL type, and only where the binary input stores exactly what
the CSV text would: a table with any other pair (a numeric, an enum, a float into a double,
a naive timestamp into ``timestamptz``, which the server would read in its own time zone)
keeps the CSV path for all its columns. Executors encode each batch (``encode``), falling
back to CSV for a batch whose Arrow types are not the ones planned.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

if TYPE_CHECKING:
    import pyarrow as pa

# the codes of _pgcopy.c
(I8_2, I16_2, I8_4, I16_4, I32_4, I8_8, I16_8, I32_8, I64_8,
 F4, F8, BOOL, BYTES, JSONB, TS, DATE) = range(1, 17)

_INTS: dict[type[DataType], dict[str, int]] = {
    ByteType: {"int2": I8_2, "int4": I8_4, "int8": I8_8},
    ShortType: {"int2": I16_2, "int4": I16_4, "int8": I16_8},
    IntegerType: {"int4": I32_4, "int8": I32_8},
    LongType: {"int8": I64_8},
}
_TEXT = {"text": BYTES, "varchar": BYTES, "bpchar": BYTES, "json": BYTES, "jsonb": JSONB}
_OTHER: dict[type[DataType], dict[str, int]] = {
    FloatType: {"float4": F4},
    DoubleType: {"float8": F8},
    BooleanType: {"bool": BOOL},
    StringType: _TEXT,
    BinaryType: {"bytea": BYTES},
    TimestampType: {"timestamptz": TS, "timestamp": TS},  # UTC instants; a timestamp column holds UTC
    TimestampNTZType: {"timestamp": TS},
    DateType: {"date": DATE},
}

# the Arrow type each code reads (named: the driver's planning imports no pyarrow)
_ARROW = {I8_2: "int8", I8_4: "int8", I8_8: "int8", I16_2: "int16", I16_4: "int16", I16_8: "int16",
          I32_4: "int32", I32_8: "int32", I64_8: "int64", F4: "float", F8: "double", BOOL: "bool",
          DATE: "date32[day]"}


#: A binary COPY stream's header (signature, flags, no extension) and trailer (a field
#: count of -1): ``encode`` puts both around each batch's rows, so batches sent as one
#: stream keep the first header and the last trailer only.
HEADER_BYTES = 19
TRAILER = b"\xff\xff"


def kinds(schema: StructType, pg_types: dict[str, str]) -> tuple[int, ...]:
    """Each column's encoding, in the schema's order; () when one has none (CSV then).
    ``pg_types``: the target's columns' type names (``pg_type.typname``). Driver."""
    out = []
    for f in schema.fields:
        by_type = _INTS.get(type(f.dataType)) or _OTHER.get(type(f.dataType)) or {}
        kind = by_type.get(pg_types.get(f.name, ""))
        if kind is None:
            return ()
        out.append(kind)
    return tuple(out)


def _fits(kind: int, t: pa.DataType) -> bool:
    import pyarrow as pa

    if kind == TS:
        return pa.types.is_timestamp(t) and t.unit == "us"
    if kind in (BYTES, JSONB):
        return pa.types.is_string(t) or pa.types.is_binary(t)  # 32-bit offsets
    return str(t) == _ARROW[kind]


def _column(kind: int, col: pa.Array) -> tuple[int, int, pa.Buffer | None, pa.Buffer, pa.Buffer | None]:
    import pyarrow as pa

    bufs = col.buffers()
    valid = bufs[0] if col.null_count else None
    if kind in (BYTES, JSONB):
        return kind, col.offset, valid, bufs[2] if bufs[2] is not None else pa.py_buffer(b""), bufs[1]
    return kind, col.offset, valid, bufs[1], None


def encode(rb: pa.RecordBatch, kinds: tuple[int, ...], tag: str | None = None) -> bytes | None:
    """``rb`` (and, if given, ``tag`` in a last text column) as one binary COPY stream; None
    when a column's Arrow type is not the one ``kinds`` planned for (send it as CSV). Executor."""
    import pyarrow as pa

    from spark_ext.connectors.jdbc import _pgcopy

    if len(kinds) != rb.num_columns:
        return None
    if not all(_fits(k, c.type) for k, c in zip(kinds, rb.columns, strict=True)):
        return None
    cols = [_column(k, c) for k, c in zip(kinds, rb.columns, strict=True)]
    if tag is not None:
        cols.append(_column(BYTES, pa.repeat(pa.scalar(tag), rb.num_rows)))
    return _pgcopy.encode(rb.num_rows, cols)
