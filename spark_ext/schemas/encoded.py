"""A column encoded by one of the C encoders (``_avro.c``, ``_proto.c``, ``_json.c``), with the
rows the schema refused: the loop every writer shares.

An encoder stops at the first row it refuses; the rows before it are encoded again on
their own, the refused row comes out null, and encoding goes on after it. Refused rows are
rare (each is a row error: a dead letter, or the task fails), so the common case is one
C call per column.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

# One C call over a column: (None, offsets, data) or (row, why) for the first refused row.
Run = Callable[[pa.Array], tuple[Any, ...]]


@dataclass(frozen=True)
class Encoded:
    """A column encoded: the values (null where a row was refused) and the refused rows."""

    values: pa.Array
    refused: list[tuple[int, str]]


def encode_column(column: pa.Array, run: Run, tombstones: bool = True) -> Encoded:
    """Every row of ``column`` through ``run``. With ``tombstones``, a null row is a null value
    (a Kafka tombstone, as the registry's serializers send it) and is not given to ``run``."""
    if tombstones and column.null_count:
        present = np.flatnonzero(column.is_valid().to_numpy(zero_copy_only=False))
        done = _rows(column.take(pa.array(present)), run)
        where = np.full(len(column), -1, np.int64)
        where[present] = np.arange(len(present))
        values = done.values.take(pa.array(where, mask=where < 0))
        return Encoded(values, [(int(present[r]), why) for r, why in done.refused])
    return _rows(column, run)


def _rows(column: pa.Array, run: Run) -> Encoded:
    pieces: list[pa.Array] = []
    refused: list[tuple[int, str]] = []
    start, n = 0, len(column)
    while start < n:
        part = column.slice(start)
        got = run(part)
        if got[0] is None:
            _, offsets, data = got
            pieces.append(pa.Array.from_buffers(pa.binary(), len(part), [None, pa.py_buffer(offsets),
                                                                          pa.py_buffer(data)]))
            break
        row, why = int(got[0]), str(got[1])
        if row:
            pieces.append(_rows(column.slice(start, row), run).values)
        pieces.append(pa.nulls(1, pa.binary()))
        refused.append((start + row, why))
        start += row + 1
    if not pieces:
        return Encoded(pa.array([], pa.binary()), refused)
    return Encoded(pa.concat_arrays(pieces) if len(pieces) > 1 else pieces[0], refused)
