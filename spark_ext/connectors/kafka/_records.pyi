# The C decoder's interface (_records.c).
from collections.abc import Callable

_Binary = tuple[bytes, int, bytes, bytes]  # validity bitmap, null count, int32 offsets, data

def decode(records: bytes, pos: int, end: int, committed: bool, aborted: list[tuple[int, int]],
           headers: bool, decompress: Callable[[int, bytes], bytes]
           ) -> tuple[int, int, int, bytes, bytes, bytes, _Binary, _Binary, tuple[bytes, int, bytes], _Binary,
                      _Binary, int]: ...
def crc32c(data: bytes, portable: bool = ...) -> int: ...
def frame(records: bytes | bytearray, attributes: int, count: int, base_ts: int, max_ts: int,
          producer_id: int, epoch: int, base_sequence: int) -> bytes: ...
def encode(n: int, key: object, value: object, headers: object, ts_delta: int, count: int, size: int,
           limit: int) -> list[tuple[bytes, int]]: ...
