"""Dead letters: rows a sink's target refuses for a reason of their own, written to another
sink under the same batch decision as the good rows.

    .option("connector", "jdbc").option("dbtable", "ledger")      # the sink, as always
    .option("deadLetter.connector", "kafka")                      # then a sink of any connector
    .option("deadLetter.kafka.bootstrap.servers", ...).option("deadLetter.topic", "ledger-dlq")
    .option("maxDeadLetters", "100")                              # per batch; beyond, the batch fails
    .option("maxDeadLetterRatio", "0.01")                         # of a batch's rows; the same

Driver: ``compose`` turns such options into a ``routing`` sink with two sub-sinks, ``target``
(the sink) and ``dead`` (the destination), whose one decision per batch covers both: after
any crash every input row is in exactly one of them, once. Executor: the target's writer
sets refused rows aside (``SetsAside``); ``table`` makes them the dead sub-sink's rows.

Only row errors are set aside: each connector decides which of its target's errors belong
to the row (PostgreSQL: SQLSTATE classes 22 and 23). Anything else (a connection lost, a
missing table, a full disk) fails the batch as without dead letters.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_ext.errors import InvalidOptionError, SparkExtError
from spark_ext.options import Options

if TYPE_CHECKING:
    import pyarrow as pa

PREFIX = "deadletter."  # as options reach a data source: lower-cased
USERS_PREFIX = "deadLetter."  # as users write them
TARGET, DEAD = "target", "dead"
COMPOSED = f"{TARGET}:{DEAD}"  # option deadLetters of the routing sink ``compose`` makes
# The dead-letter rows' columns; ``value`` / ``body``: all the others as one JSON document,
# for a Kafka topic or a queue.
COLUMNS = ("sink_id", "batch_id", "partition_id", "error_class", "error_code", "error_message", "row")
BY_CONNECTOR = {"kafka": ("value",), "jms": ("body",)}
ALL_COLUMNS = (*COLUMNS, "value", "body")
CAP_OPTIONS = ("maxDeadLetters", "maxDeadLetterRatio")
# A source's records it could not read (the Kafka source's mode PERMISSIVE), as Spark's own
# readers name that column. Sinks never write it: they set its rows aside, or fail.
CORRUPT = "_corrupt_record"
_CORRUPT_FIELDS = ("topic", "partition", "offset", "key", "value", "headers", "error")


@dataclass(frozen=True)
class Cap:
    """How many refused rows a batch may set aside: a count, a fraction of its rows, or both."""

    most: int | None = None
    ratio: float | None = None

    def exceeded(self, dead: int, rows: int) -> str | None:
        """Why ``dead`` refused rows among ``rows`` are too many (None: they are not)."""
        if self.most is not None and dead > self.most:
            return f"more than maxDeadLetters {self.most}"
        if self.ratio is not None and rows and dead / rows > self.ratio:
            return f"{dead / rows:.2%} of its {rows} rows, more than maxDeadLetterRatio {self.ratio:g}"
        return None


@dataclass(frozen=True)
class Refusal:
    """One row the target refused: the row as it was (one-row Arrow batch) and why."""

    row: Any  # pa.RecordBatch of one row
    error_class: str
    error_code: str
    message: str


class SetsAside:
    """Mixin of a writer that can set refused rows aside: with ``refused`` a list (the
    routing writer's, per task), row errors go there instead of failing the task."""

    refused: list[Refusal] | None = None


def has_dead_letters(opts: Options) -> bool:
    """Are dead letters configured? ``maxDeadLetters`` alone is refused."""
    if any(k.startswith(PREFIX) for k in opts.raw()):
        return True
    for cap in CAP_OPTIONS:
        if cap.lower() in opts:
            raise InvalidOptionError(f"option {cap} needs a dead-letter destination: "
                                     "deadLetter.connector and its options")
    return False


def compose(opts: Options, id_option: str) -> Options:
    """The sink's options with ``deadLetter.*`` as the equivalent routing sink's: the sink
    as sub-sink ``target``, the destination as sub-sink ``dead``. Driver, at start."""
    raw = opts.raw()
    dead = {k[len(PREFIX):]: v for k, v in raw.items() if k.startswith(PREFIX)}
    if "connector" not in dead:
        raise InvalidOptionError("the dead-letter destination needs option 'deadLetter.connector' ('jdbc', "
                                 "'kafka' or 'jms') and that connector's options as deadLetter.<option>")
    outer = {"guarantee", "sinkid", "transactionalidprefix", "checkpointlocation", "queryname",
             *(c.lower() for c in CAP_OPTIONS)}
    own = {k: v for k, v in raw.items() if not k.startswith(PREFIX) and k not in outer}
    out = {k: v for k, v in raw.items() if k in outer - {"sinkid", "transactionalidprefix"}}
    given_id = raw.get(id_option.lower())
    if given_id is not None:
        out["sinkid"] = given_id
    out["connector"] = "routing"
    out["deadletters"] = COMPOSED
    out.update({f"sinks.{TARGET}.{k}": v for k, v in own.items()})
    out.update({f"sinks.{DEAD}.{k}": v for k, v in dead.items()})
    if "columns" not in dead:
        cols = BY_CONNECTOR.get(dead["connector"].strip().lower(), COLUMNS)
        out[f"sinks.{DEAD}.columns"] = ",".join(cols)
    return Options(out, opts.what)


# The composed routing sink's words for the options the user wrote, longest first.
_USERS_WORDS = (
    (f"sub-sinks {TARGET!r} and {DEAD!r}", "the sink and its dead-letter destination"),
    (f"sub-sink {DEAD!r}", "the dead-letter destination (deadLetter.* options)"),
    (f"sub-sink {TARGET!r}", "the sink"),
    (f"sinks.{DEAD}.", USERS_PREFIX),
    (f"sinks.{TARGET}.", ""),
    (f"'{DEAD}'", "the dead-letter destination"),
    (f"'{TARGET}'", "the sink"),
)


def in_users_words(e: SparkExtError) -> SparkExtError:
    """``e``, raised by the routing sink ``compose`` made, as the options the user wrote
    name things: ``deadLetter.*`` for the destination, the sink's own options for the
    target (never the internal sub-sinks ``target`` and ``dead``). Same class, so callers
    that tell errors apart by type still can."""
    text = str(e)
    for internal, users in _USERS_WORDS:
        text = text.replace(internal, users)
    if text.startswith("the dead-letter destination ("):
        # about the destination alone: its own options, as the user must spell them
        for option in ("createTable", "dbtable", "upsertKeys", "topic", "destination", "url"):
            text = text.replace(f"'{option}'", f"'{USERS_PREFIX}{option}'")
    if text == str(e):
        return e
    out = type(e)(text)
    out.__cause__ = e.__cause__
    return out


def schema() -> Any:
    """The dead-letter rows' Spark schema (what the dead sub-sink is configured for)."""
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    types = {"batch_id": LongType(), "partition_id": IntegerType()}
    return StructType([StructField(c, types.get(c, StringType()), c in ("error_code",)) for c in ALL_COLUMNS])


def _plain(v: Any) -> Any:
    if isinstance(v, bytes):
        return base64.b64encode(v).decode()
    if isinstance(v, (datetime.date, datetime.datetime, datetime.time)):
        return v.isoformat()
    if isinstance(v, (decimal.Decimal, datetime.timedelta)):
        return str(v)
    return v


def table(refused: list[Refusal], sink_id: str, batch_id: int, partition_id: int) -> pa.RecordBatch:
    """The dead sub-sink's rows for ``refused`` (the row as JSON; binary as base64)."""
    import pyarrow as pa

    from spark_ext import compat

    rows = []
    for r in refused:
        row = json.dumps(r.row.to_pylist()[0], default=_plain, ensure_ascii=False)
        d = {"sink_id": sink_id, "batch_id": batch_id, "partition_id": partition_id,
             "error_class": r.error_class, "error_code": r.error_code, "error_message": r.message, "row": row}
        doc = json.dumps(d, ensure_ascii=False)
        rows.append({**d, "value": doc, "body": doc})
    return pa.RecordBatch.from_pylist(rows, schema=compat.to_arrow_schema(schema()))


def corrupt_type() -> Any:
    """``_corrupt_record``'s Spark type: the record as it came, and why it is unreadable."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    types = {"partition": IntegerType(), "offset": LongType(), "key": BinaryType(), "value": BinaryType(),
             "headers": ArrayType(header)}  # the headers: null unless the source reads them (includeHeaders)
    return StructType([StructField(f, types.get(f, StringType())) for f in _CORRUPT_FIELDS])


def is_corrupt_column(schema: Any) -> bool:
    """Does ``schema`` (Spark's or Arrow's) hold a source's ``_corrupt_record``? Only the
    struct of the record as it came: Spark's own readers' string column of that name is
    data, written as any other."""
    from pyspark.sql.types import StructType

    if CORRUPT not in schema.names:
        return False
    if isinstance(schema, StructType):  # the driver's planning worker loads no Arrow for it
        spark = schema[CORRUPT].dataType
        names = [f.name for f in spark.fields] if isinstance(spark, StructType) else []
    else:
        import pyarrow as pa

        kind = schema.field(CORRUPT).type
        names = [kind.field(i).name for i in range(kind.num_fields)] if pa.types.is_struct(kind) else []
    return tuple(names) == _CORRUPT_FIELDS


def corrupt_column(raw: dict[str, Any], errors: dict[int, str], n: int) -> Any:
    """Source, executor: ``_corrupt_record`` for ``n`` records whose columns as they came are
    ``raw``; rows in ``errors`` hold their record and error, the others are null."""
    import numpy as np
    import pyarrow as pa
    from pyspark.sql.types import StructField, StructType

    from spark_ext import compat

    arrow = compat.to_arrow_schema(StructType([StructField(CORRUPT, corrupt_type())])).field(CORRUPT).type
    if not errors:
        return pa.nulls(n, arrow)
    message: list[str | None] = [None] * n
    for row, why in errors.items():
        message[row] = why
    mask = np.ones(n, bool)
    mask[list(errors)] = False
    def child(f: str) -> Any:
        if f == "error":
            return pa.array(message, pa.string())
        if f not in raw:  # the headers, when the source does not read them
            return pa.nulls(n, arrow.field(f).type)
        return raw[f].cast(arrow.field(f).type)

    children = [child(f) for f in _CORRUPT_FIELDS]
    return pa.StructArray.from_arrays(children, fields=list(arrow), mask=pa.array(mask))


def split_corrupt(rb: pa.RecordBatch) -> tuple[pa.RecordBatch, list[Refusal]]:
    """Sink, executor: ``rb`` without ``_corrupt_record`` and without the rows it holds a
    record in, and those records as refusals (their row: the record as it came)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not is_corrupt_column(rb.schema):
        return rb, []
    col = rb.column(CORRUPT)
    clean = rb.drop_columns([CORRUPT])
    if col.null_count == len(col):
        return clean, []
    valid = col.is_valid()
    refusals = []
    for i in valid.to_numpy(zero_copy_only=False).nonzero()[0].tolist():
        rec = col[i].as_py()
        row = pa.RecordBatch.from_pylist([{f: rec[f] for f in _CORRUPT_FIELDS if f != "error"}])
        refusals.append(Refusal(row, "UndecodableRecordError", "", rec["error"]))
    return clean.filter(pc.invert(valid)), refusals


def refuse_corrupt(rb: pa.RecordBatch) -> pa.RecordBatch:
    """Sink without dead letters, executor: ``rb`` without ``_corrupt_record``; a record in it
    fails the task, naming the record."""
    from spark_ext.errors import UndecodableRecordError

    clean, refused = split_corrupt(rb)
    if refused:
        rec = refused[0].row.to_pylist()[0]
        raise UndecodableRecordError(
            f"the record at offset {rec['offset']} of {rec['topic']}-{rec['partition']} could not be read by "
            f"the source ({refused[0].message}); {len(refused)} such records in this task's rows. Set "
            "dead-letter options on this sink to set them aside, or fix or skip them at the producer")
    return clean
