# The C JSON encoder's interface (_json.c).
from typing import Any

def encode(nodes: list[tuple[Any, ...]], n: int, header: bytes
           ) -> tuple[None, bytes, bytes] | tuple[int, str]: ...
