# The C Avro decoder's interface (_avro.c).
from typing import Any

_Out = tuple[int, int, bytes, bytes | None, bytes | None]  # length, nulls, validity, offsets, data

def decode(code: bytes, entries: list[int], outs: list[tuple[int, int, tuple[int, ...]]],
           strings: list[bytes], consts: list[bytes | None], values: tuple[Any, Any, Any], progs: Any,
           skip: int) -> tuple[None, list[_Out]] | tuple[int, str]: ...
def encode(nodes: list[tuple[Any, ...]], n: int, header: bytes
           ) -> tuple[None, bytes, bytes] | tuple[int, str]: ...
