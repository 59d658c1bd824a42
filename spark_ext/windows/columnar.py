"""Column helpers for the aggregates: dense grouping and NumPy reductions over group ids.

Grouping hashes key columns with Arrow's C++ ``dictionary_encode`` into dense ids; the
reductions are ``bincount`` / ``ufunc.at`` over those ids. Pure functions, no Spark.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_ext.errors import ConfigurationError


class AggregateError(ConfigurationError):
    """An aggregate names a missing column or one of an unsupported type."""


@dataclass(frozen=True)
class Grouping:
    """Rows mapped to dense group ids: ``ids[row]`` is in ``[0, count)``, ``first[g]`` is a row of g."""

    ids: np.ndarray
    count: int
    first: np.ndarray

    @classmethod
    def from_ids(cls, ids: np.ndarray, count: int) -> Grouping:
        first = np.full(count, len(ids), np.int64)
        np.minimum.at(first, ids, np.arange(len(ids), dtype=np.int64))
        return cls(ids.astype(np.int64, copy=False), count, first)


def group_rows(table: pa.Table, cols: Sequence[str]) -> Grouping:
    """Dense group ids of the distinct values of ``cols`` (nulls form a group of their own)."""
    ids = np.zeros(table.num_rows, np.int64)
    count = 1 if table.num_rows else 0
    for name in cols:
        arr = column(table, name)
        if pa.types.is_dictionary(arr.type):  # its dictionary may hold duplicates or unused values
            arr = arr.dictionary_decode()
        elif pa.types.is_floating(arr.type):  # -0.0 + 0.0 == 0.0: one group, as Spark normalises keys
            arr = pc.add(arr, pa.scalar(0.0, arr.type))
        enc = pc.dictionary_encode(arr, null_encoding="encode")
        codes = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        combined = ids * len(enc.dictionary) + codes
        space = count * len(enc.dictionary)
        if space <= 4 * len(ids) + 1024:  # dense remap: O(n), no hashing
            used = np.zeros(space, bool)
            used[combined] = True
            ids, count = (np.cumsum(used) - 1)[combined], int(used.sum())
        else:
            enc = pc.dictionary_encode(pa.array(combined))
            ids = enc.indices.to_numpy().astype(np.int64)
            count = len(enc.dictionary)
    return Grouping.from_ids(ids, count)


def column(table: pa.Table, name: str) -> pa.Array:
    """Column ``name`` as one contiguous Arrow array; AggregateError if it is missing."""
    if name not in table.column_names:
        raise AggregateError(f"column {name!r} not found; the table has {table.column_names}")
    return table.column(name).combine_chunks()


def to_numpy(arr: pa.Array, name: str = "value") -> tuple[np.ndarray, np.ndarray | None]:
    """Values (nulls as 0) and validity mask (None if no nulls) of a numeric/temporal array."""
    t = arr.type
    if pa.types.is_timestamp(t) or pa.types.is_date64(t) or pa.types.is_duration(t):
        arr = arr.cast(pa.int64())
    elif pa.types.is_date32(t):
        arr = arr.cast(pa.int32())
    elif not (pa.types.is_integer(t) or pa.types.is_floating(t)):
        raise AggregateError(f"{name!r} has type {t}; aggregate only integer, floating, date or "
                             "timestamp columns (cast others first)")
    valid = arr.is_valid().to_numpy(zero_copy_only=False) if arr.null_count else None
    return arr.fill_null(0).to_numpy(zero_copy_only=False), valid


def to_arrow_array(values: np.ndarray, type_: pa.DataType) -> pa.Array:
    """``values`` as an Arrow array of ``type_`` (cast only when NumPy's type differs)."""
    arr = pa.array(values)
    return arr if arr.type == type_ else arr.cast(type_)


def reduce_by_group(fn: str, values: np.ndarray, valid: np.ndarray | None, g: Grouping) -> np.ndarray:
    """One ``fn`` (count, sum, min or max) per group of ``g`` over the ``valid`` values;
    empty groups hold the function's identity."""
    ids = g.ids if valid is None else g.ids[valid]
    values = values if valid is None else values[valid]
    if fn == "count":
        return np.bincount(ids, minlength=g.count).astype(np.int64)
    if fn == "sum":
        if values.dtype.kind == "f":
            return np.bincount(ids, weights=values, minlength=g.count)
        out = np.zeros(g.count, np.int64)
        np.add.at(out, ids, values.astype(np.int64, copy=False))
        return out
    kind = values.dtype.kind
    # fmin skips NaN (Spark ranks NaN highest), so NaN is also its identity; maximum keeps NaN.
    if fn == "min":
        init = np.nan if kind == "f" else np.iinfo(values.dtype).max
    else:
        init = -np.inf if kind == "f" else np.iinfo(values.dtype).min
    out = np.full(g.count, init, values.dtype)
    with np.errstate(invalid="ignore"):
        (np.maximum if fn == "max" else np.fmin if kind == "f" else np.minimum).at(out, ids, values)
    return out


def merge_values(fn: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Two partial results of ``fn``, element-wise, combined into one."""
    if fn in ("count", "sum"):
        return a + b
    with np.errstate(invalid="ignore"):
        if fn == "min":
            return np.fmin(a, b) if a.dtype.kind == "f" else np.minimum(a, b)
        return np.maximum(a, b)


def nonzero_divisor(n: np.ndarray) -> np.ndarray:
    """Counts as float divisors, 0 replaced by 1 (the caller masks those results as null)."""
    return np.where(n > 0, n, 1).astype(np.float64)
