"""Message IDs as they are written into the source's offsets: compact.

A batch's offset holds the IDs of all its messages (see ``source.py``), and Spark copies
each offset into the offset log, into every progress event (start and end offset), and
through py4j to whoever reads ``recentProgress``. As a JSON list, 20,000 Artemis IDs are
280 KB per offset; parsing and copying them took more of the JVM's time than the batch
itself. So the list is packed into one string:

- ``"d:" + base64(zlib(JSON of the differences))`` when every ID is a decimal integer
  written the canonical way (Artemis's message IDs): 20,000 IDs in about 100 bytes;
- ``"z:" + base64(zlib(JSON list))`` for any other IDs (an application header).

Offsets written before this (a plain JSON list) are still read.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Sequence

from spark_ext.errors import ConnectorError


def _canonical_ints(ids: Sequence[str]) -> list[int] | None:
    out: list[int] = []
    for i in ids:
        if not i.isascii() or not i.isdigit() or (len(i) > 1 and i[0] == "0"):
            return None
        out.append(int(i))
    return out


def _zip(value: object) -> str:
    raw = json.dumps(value, separators=(",", ":")).encode()
    return base64.b64encode(zlib.compress(raw)).decode("ascii")


def _unzip(text: str) -> list:
    value = json.loads(zlib.decompress(base64.b64decode(text)))
    if not isinstance(value, list):
        raise ValueError("not a list")
    return value


def pack_ids(ids: Sequence[str]) -> str:
    """Driver: the IDs of a batch, as one string for its offset."""
    nums = _canonical_ints(ids)
    if nums is None:
        return "z:" + _zip(list(ids))
    deltas = [b - a for a, b in zip([0, *nums], nums, strict=False)]
    return "d:" + _zip(deltas)


def unpack_ids(value: str | list[str]) -> list[str]:
    """Driver: the IDs ``pack_ids`` wrote, in order; a plain list (older offsets) as it is."""
    if isinstance(value, list):
        return [str(i) for i in value]
    try:
        kind, body = value[:2], value[2:]
        if kind == "z:":
            return [str(i) for i in _unzip(body)]
        if kind == "d:":
            total, out = 0, []
            for d in _unzip(body):
                total += int(d)
                out.append(str(total))
            return out
    except (ValueError, zlib.error) as e:
        raise ConnectorError(f"the checkpoint's offset holds message IDs that cannot be read ({e}); "
                             "was the offset log edited?") from None
    raise ConnectorError(f"the checkpoint's offset holds message IDs in an unknown form {value[:20]!r}; "
                         "was it written by a newer spark-ext?")
