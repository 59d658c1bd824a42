# The C encoder's interface (_pgcopy.c).
import pyarrow as pa

_Column = tuple[int, int, pa.Buffer | None, pa.Buffer, pa.Buffer | None]  # kind, offset, valid, data, offsets

def encode(n: int, columns: list[_Column]) -> bytes: ...
