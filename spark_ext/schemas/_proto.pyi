# The C protobuf decoder's interface (_proto.c).
from typing import Any

_Out = tuple[int, int, bytes, bytes | None, bytes | None]  # length, nulls, validity, offsets, data

def decode(msgs: list[tuple[int, tuple[tuple[Any, ...], ...]]], enums: list[tuple[str, bytes, list[bytes]]],
           outs: list[tuple[int, int, tuple[int, ...]]], values: tuple[Any, Any, Any], starts: Any
           ) -> tuple[None, list[_Out]] | tuple[int, str]: ...
def encode(nodes: list[tuple[Any, ...]], n: int, header: bytes
           ) -> tuple[None, bytes, bytes] | tuple[int, str]: ...
