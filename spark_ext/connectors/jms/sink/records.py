"""The queue sink's input columns and their STOMP SEND frames.

Columns: ``body`` (string or binary, required), ``headers`` (map<string,string>),
``priority`` (integer 0-9), ``correlation_id`` and ``reply_to`` (strings). A string body
goes without ``content-length``, which Artemis delivers to JMS consumers as a
TextMessage; a binary body carries it (a BytesMessage, NUL bytes allowed).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa

from spark_ext.connectors.jms import wire
from spark_ext.errors import ConfigurationError, ConnectorError

COLUMNS = {"body": ("string", "binary"), "headers": ("map<string,string>",),
           "priority": ("tinyint", "smallint", "int", "bigint"), "correlation_id": ("string",),
           "reply_to": ("string",)}
#: Headers the sink sets itself; a ``headers`` map naming one is refused.
RESERVED = frozenset({"destination", "transaction", "receipt", "content-length", "content-type", "persistent",
                      "priority", "correlation-id", "reply-to", "message-id", "subscription", "ack",
                      "expires",
                      # Artemis makes a message with these scheduled: invisible to the staging
                      # queue's counts until its time, so the batch's check would find it missing.
                      "AMQ_SCHEDULED_DELAY", "AMQ_SCHEDULED_TIME"})
#: The sink's own headers on every exactly-once message: the attempt's transaction token
#: and its batch (filters of the broker's move and remove operations select by them).
TXN_HEADER = "spark_ext_txn"
BATCH_HEADER = "spark_ext_batch"


class BadMessageError(ConnectorError):
    """A row cannot become a message (a NUL in a string body, a reserved header name).
    ``code`` names the rule, for a dead letter."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


def check_schema(columns: dict[str, str], where: str) -> None:
    """Driver, at query start: the input columns against ``COLUMNS``."""
    if "body" not in columns:
        raise ConfigurationError(
            f"hzsink connector 'jms' ({where}) needs a column 'body' (string or binary); the input has "
            f"{sorted(columns)}. Select one, e.g. df.selectExpr('to_json(struct(*)) AS body')")
    for name, kind in columns.items():
        if name not in COLUMNS:
            raise ConfigurationError(
                f"hzsink connector 'jms' got column {name!r}, which it does not write; the columns are "
                f"{', '.join(COLUMNS)}. Drop it, or put it into 'headers' (map<string,string>)")
        if kind not in COLUMNS[name]:
            raise ConfigurationError(
                f"hzsink connector 'jms': column {name!r} is {kind}; expected {' or '.join(COLUMNS[name])}")


def _header(name: str, value: object) -> bytes:
    return f"{wire.escape(name)}:{wire.escape(str(value))}\n".encode()


def send_frames(rb: pa.RecordBatch, common: bytes,
                refuse: Callable[[int, BadMessageError], None] | None = None) -> Iterator[bytes]:
    """One SEND frame per row. ``common``: the frame's command and the headers every row
    shares (``SEND\\ndestination:...\\n...``). A row that cannot be a message raises
    ``BadMessageError``, or with ``refuse`` is handed to it (row index, error) and skipped."""
    for i, frame in enumerate(_frames(rb, common)):
        if isinstance(frame, BadMessageError):
            if refuse is None:
                raise frame
            refuse(i, frame)
        else:
            yield frame


def _frames(rb: pa.RecordBatch, common: bytes) -> Iterator[bytes | BadMessageError]:
    cols = {name: rb.column(i).to_pylist() for i, name in enumerate(rb.schema.names)}
    bodies = cols["body"]
    binary = pa.types.is_binary(rb.schema.field("body").type) or pa.types.is_large_binary(
        rb.schema.field("body").type)
    headers, prio = cols.get("headers"), cols.get("priority")
    corr, reply = cols.get("correlation_id"), cols.get("reply_to")
    for i, body in enumerate(bodies):
        parts = [common]
        if headers is not None and headers[i]:
            taken = [k for k, _ in headers[i] if k in RESERVED or k.startswith(("spark_ext_", "_AMQ_"))]
            if taken:
                yield BadMessageError(f"row {i}: header {taken[0]!r} in column 'headers' is set by the sink "
                                      "or the broker; rename it", "RESERVED_HEADER")
                continue
            parts += [_header(k, v) for k, v in headers[i] if v is not None]
        if prio is not None and prio[i] is not None:
            if not 0 <= prio[i] <= 9:
                yield BadMessageError(f"row {i}: priority {prio[i]} is outside 0-9", "PRIORITY_OUT_OF_RANGE")
                continue
            parts.append(_header("priority", prio[i]))
        if corr is not None and corr[i] is not None:
            parts.append(_header("correlation-id", corr[i]))
        if reply is not None and reply[i] is not None:
            parts.append(_header("reply-to", reply[i]))
        if body is None:
            raw = b""
        elif binary:
            raw = body
            parts.append(f"content-length:{len(raw)}\n".encode())
        else:
            raw = body.encode("utf-8")
            if b"\x00" in raw:
                yield BadMessageError(f"row {i}: a string body holds a NUL character, which ends a STOMP "
                                      "frame; send it as binary", "NUL_IN_TEXT_BODY")
                continue
        parts.append(b"\n")
        parts.append(raw)
        parts.append(b"\x00")
        yield b"".join(parts)


def common_headers(destination: str, persistent: bool, tx: str | None = None,
                   own: dict[str, str] | None = None) -> bytes:
    """The start of every SEND frame to ``destination`` (in transaction ``tx``)."""
    out = [b"SEND\n", _header("destination", destination)]
    if tx is not None:
        out.append(_header("transaction", tx))
    if persistent:
        out.append(b"persistent:true\n")
    for k, v in (own or {}).items():
        out.append(_header(k, v))
    return b"".join(out)
