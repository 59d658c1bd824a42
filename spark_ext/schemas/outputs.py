"""The columns the C decoders (``_avro.c``, ``_proto.c``) write: each output's shape, and the
Arrow array built from the buffers a decode returns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.types import DataType

# Output kinds (``_outs_types.h``: O_*), in the C header's order.
O_NULL, O_BOOL, O_FIXED, O_BIN, O_STRUCT, O_LIST, O_MAP = range(7)

Buffers = Sequence[tuple[int, int, bytes, bytes | None, bytes | None]]


@dataclass
class Shape:
    """One output of the reader schema: where it goes (``out``), what Spark and Arrow call it."""

    out: int
    schema: Any
    spark: DataType
    arrow: pa.DataType
    nullable: bool
    children: list[Shape] = field(default_factory=list)
    union: str = ""  # "struct": a union kept as a struct of members; "" otherwise


def build(shape: Shape, bufs: Buffers) -> pa.Array:
    """The column of output ``shape.out`` (its children too) from a decode's buffers."""
    n, nulls, valid, offs, data = bufs[shape.out]
    kind = shape.arrow
    vbuf = pa.py_buffer(valid) if nulls else None
    if pa.types.is_null(kind):
        return pa.nulls(n)
    if pa.types.is_boolean(kind):
        assert data is not None
        bits = np.packbits(np.frombuffer(data, np.uint8), bitorder="little")
        return pa.Array.from_buffers(kind, n, [vbuf, pa.py_buffer(bits)], null_count=nulls)
    if pa.types.is_struct(kind):
        kids = [build(k, bufs) for k in shape.children]
        return pa.Array.from_buffers(kind, n, [vbuf], null_count=nulls, children=kids)
    if pa.types.is_map(kind):
        assert offs is not None
        keys, items = (build(k, bufs) for k in shape.children)
        entries = pa.StructArray.from_arrays([keys, items], fields=[kind.key_field, kind.item_field])
        return pa.Array.from_buffers(kind, n, [vbuf, pa.py_buffer(offs)], null_count=nulls,
                                     children=[entries])
    if pa.types.is_list(kind):
        assert offs is not None
        item = build(shape.children[0], bufs)
        return pa.Array.from_buffers(kind, n, [vbuf, pa.py_buffer(offs)], null_count=nulls, children=[item])
    if offs is not None:
        assert data is not None
        return pa.Array.from_buffers(kind, n, [vbuf, pa.py_buffer(offs), pa.py_buffer(data)],
                                     null_count=nulls)
    assert data is not None
    return pa.Array.from_buffers(kind, n, [vbuf, pa.py_buffer(data)], null_count=nulls)
