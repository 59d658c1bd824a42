"""A Kafka key or value column in the schema registry's wire format, read as typed columns.

The wire format: a zero byte, the writer schema's id (4 bytes, big-endian), then the
datum (for protobuf, the message's indexes in its file first). The reader schema is fixed
on the driver when the query starts: the subject's latest version, or the one pinned by
``valueSchemaVersion``; its Spark type is the column's. Executors fetch each writer schema
by id once per process and read every value of a column in one call: C for Avro
(``avro.Reader``) and protobuf (``protobuf.ProtoReader``), Arrow's JSON reader for JSON
Schema.

A value that cannot be read (no wire-format header, an id the registry does not know,
bytes that do not decode) is reported with its row; the source decides what becomes of
it. A writer schema the reader schema cannot read fails the query: that is a producer
breaking the subject's contract, not one bad record.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.types import DataType

from spark_ext.errors import InvalidOptionError
from spark_ext.options import Option, Options
from spark_ext.schemas import protobuf
from spark_ext.schemas.avro import IncompatibleSchemaError, Reader, SchemaError
from spark_ext.schemas.jsonschema import JsonReader
from spark_ext.schemas.protobuf import message_paths
from spark_ext.schemas.registry import REGISTRY_OPTIONS, Registered, RegistryConfig, by_id, subject_version

FORMATS = ("raw", "avro", "protobuf", "json-schema")
# the registry's schemaType of each format
KINDS = {"avro": "AVRO", "protobuf": "PROTOBUF", "json-schema": "JSON"}
HEADER = 5  # the magic byte and the schema id

FORMAT_OPTIONS = (
    Option("valueFormat", "`raw`: the value as bytes, as Spark's kafka source gives it. `avro`: the value in "
           "the schema registry's wire format, read as the typed column Spark's `from_avro` gives (a "
           "struct for a record), with the reader schema of `valueSubject`; each record's writer schema "
           "comes from the registry by the id it carries. `protobuf`: a protobuf message in that wire "
           "format, read as the column Spark's `from_protobuf` gives for the reader's message "
           "(`valueMessage`). `json-schema`: a JSON document in that wire "
           "format, read into the struct of the reader schema's properties (every field nullable, as "
           "Spark's `from_json` reads).", default="raw"),
    Option("keyFormat", "The same for the key.", default="raw"),
    Option("valueSubject", "The registry subject of the reader schema.", shown="`<topic>-value` (one topic "
           "subscribed)"),
    Option("keySubject", "The same for the key.", shown="`<topic>-key`"),
    Option("valueSchemaVersion", "The subject's version to read with, fixed for the query's run.",
           shown="the latest at query start"),
    Option("keySchemaVersion", "The same for the key.", shown="the latest at query start"),
    Option("valueMessage", "With valueFormat protobuf: the reader's message, by full name "
           "(`package.Message`).", shown="the schema's one top-level message"),
    Option("keyMessage", "The same for the key.", shown="the schema's one top-level message"),
    *REGISTRY_OPTIONS,
)


class IncompatibleWriterError(IncompatibleSchemaError):
    """A record's writer schema cannot be read with the query's reader schema."""


@dataclass(frozen=True)
class ColumnFormat:
    """How one column (``key`` or ``value``) is read. Picklable: the reader schema's text
    travels with it, fixed on the driver."""

    column: str
    format: str
    registry: RegistryConfig
    subject: str
    reader: Registered
    message: str = ""  # protobuf: the reader's message, by full name

    @staticmethod
    def parse(opts: Options, column: str, topics: tuple[str, ...]) -> ColumnFormat | None:
        """Driver, at query start: None for ``raw``; else the reader schema, read now."""
        option = f"{column}Format"
        fmt = (opts.get_str(option.lower()) or "raw").strip().lower()
        if fmt not in FORMATS:
            raise InvalidOptionError(f"option {option!r} is {fmt!r}; expected one of {', '.join(FORMATS)}")
        if fmt == "raw":
            for name in (f"{column}Subject", f"{column}SchemaVersion", f"{column}Message"):
                if opts.get_str(name.lower()) is not None:
                    raise InvalidOptionError(f"option {name!r} applies to a registry format of option "
                                             f"{option!r}; set {option}=avro (or protobuf, json-schema) or "
                                             "drop it")
            return None
        registry = RegistryConfig.parse(opts, f"option {option}={fmt}")
        if fmt == "protobuf":
            protobuf.installed(f"option {option}=protobuf")
        subject = opts.get_str(f"{column}subject")
        if subject is None:
            if len(topics) != 1:
                raise InvalidOptionError(
                    f"option {option}={fmt} reads with the reader schema of one subject, by default "
                    f"'<topic>-{column}' of the one topic subscribed; this query reads "
                    f"{'a pattern or assignment' if not topics else 'topics ' + ', '.join(topics)}: set "
                    f"option '{column}Subject'")
            subject = f"{topics[0]}-{column}"
        version = opts.get_int(f"{column}schemaversion", minimum=1)
        reader = subject_version(registry, subject, version)
        if reader.kind != KINDS[fmt]:
            raise InvalidOptionError(f"subject {subject!r} version {reader.version} holds a {reader.kind} "
                                     f"schema, and option {option} is {fmt}")
        message = opts.get_str(f"{column}message")
        if message is not None and fmt != "protobuf":
            raise InvalidOptionError(f"option '{column}Message' applies to {option}=protobuf; drop it")
        try:
            if fmt == "json-schema":
                JsonReader(reader.text)
            elif fmt == "protobuf":
                message = _reader_message(registry, reader, message, f"{column}Message")
            else:
                Reader(reader.text)
        except SchemaError as e:
            raise InvalidOptionError(f"subject {subject!r} version {reader.version} (id {reader.id}): "
                                     f"{e}") from None
        return ColumnFormat(column, fmt, registry, subject, reader, message or "")

    def spark_type(self) -> DataType:
        st = _reader(self)
        if st.proto is not None:
            return st.proto.spark_type
        return st.json.spark if st.json is not None else st.reader.spark_type

    def decode(self, values: pa.Array) -> tuple[pa.Array, list[tuple[int, str]]]:
        """Executor: ``values`` as the typed column, and the rows that could not be read
        (row, why), which come out null."""
        state = _reader(self)
        n = len(values)
        progs = np.full(n, -1, dtype=np.int32)
        bad: dict[int, str] = {}
        ids, header_bad = _wire_ids(values)
        bad.update(header_bad)
        if state.proto is not None:
            return self._decode_protobuf(state, values, ids, bad)
        present = ids >= 0
        for sid in np.unique(ids[present]).tolist():
            rows = np.flatnonzero(ids == sid)
            prog = state.program(self, int(sid))
            if isinstance(prog, str):
                bad.update((int(r), prog) for r in rows)
            else:
                progs[rows] = prog
        if state.json is not None:  # documents name their fields: any known JSON writer reads alike
            column, unparsed = state.json.decode(values, progs >= 0, HEADER)
            bad.update(unparsed)
            return column, sorted(bad.items())
        while True:
            column, row, why = state.reader.decode(values, progs, HEADER)
            if column is not None:
                return column, sorted(bad.items())
            bad[row] = f"the datum does not decode with writer schema id {int(ids[row])}: {why}"
            progs[row] = -1


    def _decode_protobuf(self, state: _State, values: pa.Array, ids: np.ndarray,
                         bad: dict[int, str]) -> tuple[pa.Array, list[tuple[int, str]]]:
        assert state.proto is not None
        starts, which, paths = message_paths(values, ids, HEADER, bad)
        keyed = np.where(which >= 0, ids * len(paths) + which, -1)
        for key in np.unique(keyed[keyed >= 0]).tolist():
            sid, at = divmod(int(key), len(paths))
            why = state.proto_writer(self, sid, paths[at])
            if why is not None:
                rows = np.flatnonzero(keyed == key)
                bad.update((int(r), why) for r in rows)
                starts[rows] = -1
        while True:
            column, row, why = state.proto.decode(values, starts)
            if column is not None:
                return column, sorted(bad.items())
            bad[row] = f"the message does not decode with writer schema id {int(ids[row])}: {why}"
            starts[row] = -1


def _files(registry: RegistryConfig, schema: Registered, seen: frozenset[str] = frozenset()) -> list[Any]:
    """A protobuf schema's file and the files its references name, dependencies first."""
    out: list[Any] = []
    for name, subject, version in schema.references:
        if name in seen:
            continue
        out += _files(registry, subject_version(registry, subject, version), seen | {name})
    return [*out, protobuf.file_descriptor(schema.text, schema.subject or f"schema-{schema.id}.proto")]


def _reader_message(registry: RegistryConfig, reader: Registered, message: str | None, option: str) -> str:
    """Driver: the reader's message, checked to load into Spark's types."""
    files = _files(registry, reader)
    names = protobuf.message_names(files[-1])
    if message is None:
        if len(names) != 1:
            raise SchemaError(f"the schema holds messages {', '.join(names)}: set option '{option}' to the "
                              "one to read with")
        message = names[0]
    pool = protobuf.pool_of(files)
    try:
        desc = pool.FindMessageTypeByName(message)
    except KeyError:
        raise SchemaError(f"option '{option}' is {message!r}, which the schema does not hold; it holds "
                          f"{', '.join(names)} (full names, with the package)") from None
    protobuf.ProtoReader(desc)
    return message


class _State:
    """One process's reader for a column format: its writer programs by schema id."""

    def __init__(self, fmt: ColumnFormat) -> None:
        self.json = JsonReader(fmt.reader.text) if fmt.format == "json-schema" else None
        self.proto: protobuf.ProtoReader | None = None
        if fmt.format == "protobuf":
            pool = protobuf.pool_of(_files(fmt.registry, fmt.reader))
            self.proto = protobuf.ProtoReader(pool.FindMessageTypeByName(fmt.message))
        self.reader = Reader(fmt.reader.text) if fmt.format == "avro" else Reader('"null"')
        self.programs: dict[int, int | str] = {}
        self.writers: dict[tuple[int, tuple[int, ...]], str | None] = {}
        self.lock = threading.Lock()

    def proto_writer(self, fmt: ColumnFormat, schema_id: int, path: tuple[int, ...]) -> str | None:
        """Check writer ``schema_id``'s message at ``path`` against the reader's, once per process;
        a string says why records of it are unreadable."""
        assert self.proto is not None
        with self.lock:
            key = (schema_id, path)
            if key in self.writers:
                return self.writers[key]
            writer = by_id(fmt.registry, schema_id)
            got: str | None = None
            if writer is None:
                got = f"schema id {schema_id} is not in the registry at {fmt.registry.url}"
            elif writer.kind != "PROTOBUF":
                got = f"schema id {schema_id} is a {writer.kind} schema, not PROTOBUF"
            else:
                try:
                    files = _files(fmt.registry, writer)
                    desc = protobuf.by_path(protobuf.pool_of(files), files[-1], path)
                    self.proto.check_writer(desc)
                except SchemaError as e:
                    got = f"schema id {schema_id}: {e}"
                except IncompatibleSchemaError as e:
                    raise IncompatibleWriterError(
                        f"the {fmt.column}s written with schema id {schema_id} (message indexes "
                        f"{list(path)}) cannot be read with the reader's message {fmt.message!r}, "
                        f"subject {fmt.subject!r} version {fmt.reader.version} (id {fmt.reader.id}): "
                        f"{e}. A producer registered a schema the subject's compatibility rule should "
                        f"have refused. Fix the producer, or read with a schema that reads both: "
                        f"register it in subject {fmt.subject!r} and restart the query (or pin it with "
                        f"option '{fmt.column}SchemaVersion')") from None
            self.writers[key] = got
            return got

    def program(self, fmt: ColumnFormat, schema_id: int) -> int | str:
        """The program for writer ``schema_id``; a string says why a record with it is unreadable."""
        with self.lock:
            got = self.programs.get(schema_id)
            if got is not None:
                return got
            writer = by_id(fmt.registry, schema_id)
            if writer is None:
                got = f"schema id {schema_id} is not in the registry at {fmt.registry.url}"
            elif writer.kind != KINDS[fmt.format]:
                got = f"schema id {schema_id} is a {writer.kind} schema, not {KINDS[fmt.format]}"
            elif self.json is not None:
                got = 0  # a JSON document is read by its field names, whatever its writer schema
            else:
                try:
                    got = self.reader.add_writer(writer.text)
                except (IncompatibleSchemaError, SchemaError) as e:
                    raise IncompatibleWriterError(
                        f"the {fmt.column}s written with schema id {schema_id} cannot be read with the "
                        f"reader schema, subject {fmt.subject!r} version {fmt.reader.version} "
                        f"(id {fmt.reader.id}): {e}. A producer registered a schema the subject's "
                        f"compatibility rule should have refused. Fix the producer, or read with a schema "
                        f"that reads both: register it in "
                        f"subject {fmt.subject!r} and restart the query (or pin it with option "
                        f"'{fmt.column}SchemaVersion')") from None
            self.programs[schema_id] = got
            return got


_states: dict[ColumnFormat, _State] = {}
_states_lock = threading.Lock()


def _reader(fmt: ColumnFormat) -> _State:
    with _states_lock:
        st = _states.get(fmt)
        if st is None:
            st = _states[fmt] = _State(fmt)
        return st


def _wire_ids(values: pa.Array) -> tuple[np.ndarray, dict[int, str]]:
    """Each row's writer schema id (-1: none), and the rows whose header is not the wire format's."""
    n = len(values)
    if values.type != pa.binary():
        values = values.cast(pa.binary())
    _, obuf, dbuf = values.buffers()
    assert obuf is not None
    offs = np.frombuffer(obuf, np.int32)[values.offset:values.offset + n + 1]
    data = np.frombuffer(dbuf, np.uint8) if dbuf is not None else np.zeros(0, np.uint8)
    lens = offs[1:] - offs[:-1]
    valid = values.is_valid().to_numpy(zero_copy_only=False) if values.null_count else np.ones(n, bool)
    ids = np.full(n, -1, dtype=np.int64)
    bad: dict[int, str] = {}
    short = valid & (lens < HEADER)
    for r in np.flatnonzero(short).tolist():
        bad[r] = f"{int(lens[r])} bytes, shorter than the schema registry wire format's 5-byte header"
    ok = valid & ~short
    starts = offs[:-1][ok].astype(np.int64)
    magic = data[starts]
    b = [data[starts + i].astype(np.int64) for i in range(1, 5)]
    sid = (b[0] << 24) | (b[1] << 16) | (b[2] << 8) | b[3]
    rows = np.flatnonzero(ok)
    wrong = magic != 0
    for r, m in zip(rows[wrong].tolist(), magic[wrong].tolist(), strict=True):
        bad[r] = f"its first byte is {m}, not 0: not in the schema registry's wire format"
    ids[rows[~wrong]] = sid[~wrong]
    return ids, bad
