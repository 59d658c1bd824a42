"""Protobuf values to typed Arrow columns, decoded in C (``_proto.c``).

The reader's message fixes the column's type, the one Spark's ``from_protobuf`` gives for
it: messages as structs, enums as their value's name, repeated fields as arrays, maps as
maps, ``google.protobuf.Timestamp`` as a timestamp and ``Duration`` as a day-time
interval. Protobuf matches fields by number, so one table of the reader's message reads
every writer; each writer schema is still checked once against the reader (same numbers,
wire-compatible types), and one that breaks it is refused with the field
(``IncompatibleSchemaError``). A value that does not decode is reported by row.

The registry holds a protobuf schema as a serialized ``FileDescriptorProto`` (base64, as
confluent-kafka's serializers register it) or as ``.proto`` text (as Java's do); text is
compiled with ``grpcio-tools``' protoc when that is installed.
"""

from __future__ import annotations

import base64
import sys
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DayTimeIntervalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_ext.errors import MissingExtraError
from spark_ext.schemas import _proto
from spark_ext.schemas.avro import IncompatibleSchemaError, SchemaError
from spark_ext.schemas.outputs import O_BIN, O_BOOL, O_FIXED, O_LIST, O_MAP, O_STRUCT, Shape, build

# Message kinds (``_proto.c``: M_*) and field flags (F_*).
M_PLAIN, M_ENTRY, M_TIME = range(3)
F_REPEATED, F_IMPLICIT, F_MAP, F_CLOSED = 1, 2, 4, 8

# descriptor.proto's field types
(T_DOUBLE, T_FLOAT, T_INT64, T_UINT64, T_INT32, T_FIXED64, T_FIXED32, T_BOOL, T_STRING, T_GROUP, T_MESSAGE,
 T_BYTES, T_UINT32, T_ENUM, T_SFIXED32, T_SFIXED64, T_SINT32, T_SINT64) = range(1, 19)
INT32_TYPES = (T_INT32, T_UINT32, T_SINT32, T_FIXED32, T_SFIXED32)
INT64_TYPES = (T_INT64, T_UINT64, T_SINT64, T_FIXED64, T_SFIXED64)
# Types a writer may change a field between without changing what the bytes mean to a reader.
_WIRE_FAMILY = {T_INT32: "varint", T_INT64: "varint", T_UINT32: "varint", T_UINT64: "varint",
                T_BOOL: "varint", T_ENUM: "varint", T_SINT32: "zigzag", T_SINT64: "zigzag",
                T_FIXED32: "fixed32", T_SFIXED32: "fixed32", T_FIXED64: "fixed64", T_SFIXED64: "fixed64",
                T_FLOAT: "float", T_DOUBLE: "double", T_STRING: "bytes", T_BYTES: "bytes",
                T_MESSAGE: "message"}
TIME_TYPES = {"google.protobuf.Timestamp": (TimestampType(), pa.timestamp("us", tz="UTC")),
         "google.protobuf.Duration": (DayTimeIntervalType(), pa.duration("us"))}


def installed(needed_by: str) -> None:
    """Protobuf's runtime comes with the ``protobuf`` extra: say so at query start."""
    try:
        import google.protobuf.descriptor_pool  # noqa: F401
    except ImportError as e:
        raise MissingExtraError(
            f"{needed_by} needs protobuf's runtime (Python package {e.name!r}), which is not installed in "
            f"this Python ({sys.executable}); install the extra: pip install 'spark-ext[protobuf]' (on a "
            "cluster, in the environment the executors run too)") from None


def file_descriptor(text: str, name: str) -> Any:
    """The ``FileDescriptorProto`` a registry schema holds: serialized (base64) or ``.proto`` text."""
    from google.protobuf import descriptor_pb2

    fdp = descriptor_pb2.FileDescriptorProto()
    stripped = "".join(text.split())
    try:
        raw = base64.b64decode(stripped, validate=True)
        fdp.ParseFromString(raw)
        if fdp.message_type or fdp.enum_type or fdp.name:
            if not fdp.name:
                fdp.name = name
            return fdp
    except Exception:  # noqa: BLE001 - binascii's error, or protobuf's DecodeError
        pass
    return _compile(text, name)


def _compile(text: str, name: str) -> Any:
    import os
    import tempfile

    from google.protobuf import descriptor_pb2

    try:
        from grpc_tools import protoc
    except ImportError:
        raise MissingExtraError("the registry holds this protobuf schema as .proto text, and reading "
                                "that needs protoc: pip install 'spark-ext[protobuf]' (it brings "
                                "grpcio-tools), or register the schema serialized, as confluent-kafka's "
                                "ProtobufSerializer does") from None
    import importlib.resources

    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, name)
        os.makedirs(os.path.dirname(src), exist_ok=True)
        with open(src, "w", encoding="utf-8") as f:
            f.write(text)
        out = os.path.join(tmp, "out.desc")
        include = str(importlib.resources.files("grpc_tools") / "_proto")
        rc, why = _protoc(protoc, ["protoc", f"-I{tmp}", f"-I{include}", f"--descriptor_set_out={out}", name],
                          os.path.join(tmp, "stderr"))
        if rc != 0 or not os.path.exists(out):
            why = why.replace(f"{tmp}/", "") or f"exit {rc}"
            raise SchemaError(f"protoc could not compile the .proto text of {name!r}: {why}")
        fds = descriptor_pb2.FileDescriptorSet()
        with open(out, "rb") as f:
            fds.ParseFromString(f.read())
    return fds.file[-1]


def _protoc(protoc: Any, args: list[str], err_path: str) -> tuple[int, str]:
    """protoc's exit status and what it wrote to stderr (the C++ compiler writes to file
    descriptor 2 itself, so the descriptor is pointed at a file for the call)."""
    import os

    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(err_path, "wb") as err:
            os.dup2(err.fileno(), 2)
            try:
                rc = protoc.main(args)
            finally:
                os.dup2(saved, 2)
    finally:
        os.close(saved)
    with open(err_path, encoding="utf-8", errors="replace") as f:
        return int(rc), " ".join(f.read().split())[:500]


def pool_of(files: list[Any]) -> Any:
    """A descriptor pool holding ``files`` (dependencies first) and protobuf's well-known types."""
    from google.protobuf import (
        any_pb2,
        descriptor_pool,
        duration_pb2,
        empty_pb2,
        field_mask_pb2,
        struct_pb2,
        timestamp_pb2,
        wrappers_pb2,
    )

    pool = descriptor_pool.DescriptorPool()
    for mod in (any_pb2, duration_pb2, empty_pb2, field_mask_pb2, struct_pb2, timestamp_pb2, wrappers_pb2):
        pool.AddSerializedFile(mod.DESCRIPTOR.serialized_pb)
    seen = set()
    for fdp in files:
        if fdp.name in seen or fdp.name.startswith("google/protobuf/"):
            continue
        seen.add(fdp.name)
        try:
            pool.Add(fdp)
        except Exception as e:  # noqa: BLE001 - the pool raises TypeError or its own errors
            raise SchemaError(f"the protobuf schema {fdp.name!r} does not load: {e}") from None
    return pool


def message_names(fdp: Any) -> list[str]:
    """The full names of a file's top-level messages, in order."""
    pkg = f"{fdp.package}." if fdp.package else ""
    return [pkg + m.name for m in fdp.message_type]


def by_path(pool: Any, fdp: Any, path: tuple[int, ...]) -> Any:
    """The message a record's message indexes name in its writer's file."""
    try:
        desc = pool.FindFileByName(fdp.name).message_types_by_name[fdp.message_type[path[0]].name]
        for i in path[1:]:
            desc = desc.nested_types[i]
        return desc
    except (IndexError, KeyError):
        raise SchemaError(f"the record's message indexes {list(path)} name no message in "
                          f"{fdp.name!r}") from None


class ProtoReader:
    """The reader message's column, its decode table, and the writers checked against it."""

    def __init__(self, desc: Any) -> None:
        self.desc = desc
        self.outs: list[tuple[int, int, tuple[int, ...]]] = []
        self.msgs: list[tuple[int, tuple[tuple[Any, ...], ...]]] = []
        self.enums: list[tuple[str, bytes, list[bytes]]] = []
        self._enum_index: dict[str, int] = {}
        out = self._new(O_STRUCT)
        self.msgs.append((M_PLAIN, ()))
        spark, arrow, kids = self._message(desc, 0, out, (desc.full_name,))
        self.root = Shape(out, desc.full_name, spark, arrow, True, kids)
        self._checked: set[tuple[str, str]] = set()

    @property
    def spark_type(self) -> DataType:
        return self.root.spark

    def _new(self, kind: int, width: int = 0, children: tuple[int, ...] = ()) -> int:
        self.outs.append((kind, width, children))
        return len(self.outs) - 1

    def _message(self, desc: Any, m: int, out: int, stack: tuple[str, ...]) -> tuple[DataType, pa.DataType,
                                                                                       list[Shape]]:
        """Fill message table entry ``m`` for ``desc``, whose values go to struct output ``out``."""
        rows: list[tuple[Any, ...]] = []
        kids: list[Shape] = []
        oneofs = {o.full_name: i for i, o in enumerate(desc.oneofs)}
        for f in desc.fields:
            shape, sub = self._field(f, stack)
            flags = 0
            if repeated(f):
                flags |= F_REPEATED | (F_MAP if isinstance(shape.spark, MapType) else 0)
            elif not f.has_presence:
                flags |= F_IMPLICIT
            oneof = oneofs[f.containing_oneof.full_name] if f.containing_oneof is not None else -1
            en = self._enum(f.enum_type) if f.type == T_ENUM else -1
            if f.type == T_ENUM and getattr(f.enum_type, "is_closed", False):
                flags |= F_CLOSED  # proto2: a number the enum lacks is an unknown field
            rows.append((f.number, f.type, shape.out, flags, sub, en, oneof, f.name))
            kids.append(shape)
        self.outs[out] = (O_STRUCT, 0, tuple(k.out for k in kids))
        self.msgs[m] = (M_PLAIN, tuple(rows))
        pairs = list(zip(desc.fields, kids, strict=True))
        spark = StructType([StructField(f.name, k.spark, True) for f, k in pairs])
        arrow = pa.struct([pa.field(f.name, k.arrow, True) for f, k in pairs])
        return spark, arrow, kids

    def _field(self, f: Any, stack: tuple[str, ...]) -> tuple[Shape, int]:
        """A field's output shape and the message table index its items decode with (-1: a
        scalar; a map's entry for a map)."""
        if f.type == T_GROUP:
            raise SchemaError(f"field {f.full_name!r} is a proto2 group, which Spark's from_protobuf does "
                              "not read")
        if repeated(f) and f.type == T_MESSAGE and f.message_type.GetOptions().map_entry:
            entry = f.message_type
            kf, vf = entry.fields_by_number[1], entry.fields_by_number[2]
            out = self._new(O_MAP)
            (key, _), (value, vsub) = self._value(kf, stack), self._value(vf, stack)
            self.outs[out] = (O_MAP, 0, (key.out, value.out))
            rows = []
            for ef, shape, sub in ((kf, key, -1), (vf, value, vsub)):
                en = self._enum(ef.enum_type) if ef.type == T_ENUM else -1
                rows.append((ef.number, ef.type, shape.out, 0, sub, en, -1, f"{f.name}.{ef.name}"))
            self.msgs.append((M_ENTRY, tuple(rows)))
            spark = MapType(key.spark, value.spark, True)
            arrow = pa.map_(key.arrow, pa.field("value", value.arrow, True))
            return Shape(out, f.full_name, spark, arrow, True, [key, value]), len(self.msgs) - 1
        if repeated(f):
            out = self._new(O_LIST)
            item, sub = self._value(f, stack)
            self.outs[out] = (O_LIST, 0, (item.out,))
            return Shape(out, f.full_name, ArrayType(item.spark, True),
                         pa.list_(pa.field("element", item.arrow, True)), True, [item]), sub
        return self._value(f, stack)

    def _value(self, f: Any, stack: tuple[str, ...]) -> tuple[Shape, int]:
        """One value of field ``f`` (an item, when it is repeated) and its message table index."""
        t = f.type
        if t == T_MESSAGE:
            name = f.message_type.full_name
            if name in TIME_TYPES:
                spark, arrow = TIME_TYPES[name]
                self.msgs.append((M_TIME, ()))
                return Shape(self._new(O_FIXED, 8), name, spark, arrow, True), len(self.msgs) - 1
            if name in stack:
                raise SchemaError(f"message {name!r} holds itself (field {f.full_name!r}): a recursive "
                                  "message has no Spark type")
            out = self._new(O_STRUCT)
            self.msgs.append((M_PLAIN, ()))
            m = len(self.msgs) - 1
            st, arrow, kids = self._message(f.message_type, m, out, (*stack, name))
            return Shape(out, name, st, arrow, True, kids), m
        if t in INT32_TYPES:
            return Shape(self._new(O_FIXED, 4), t, IntegerType(), pa.int32(), True), -1
        if t in INT64_TYPES:
            return Shape(self._new(O_FIXED, 8), t, LongType(), pa.int64(), True), -1
        if t == T_FLOAT:
            return Shape(self._new(O_FIXED, 4), t, FloatType(), pa.float32(), True), -1
        if t == T_DOUBLE:
            return Shape(self._new(O_FIXED, 8), t, DoubleType(), pa.float64(), True), -1
        if t == T_BOOL:
            return Shape(self._new(O_BOOL), t, BooleanType(), pa.bool_(), True), -1
        if t in (T_STRING, T_ENUM):
            return Shape(self._new(O_BIN), t, StringType(), pa.string(), True), -1
        if t == T_BYTES:
            return Shape(self._new(O_BIN), t, BinaryType(), pa.binary(), True), -1
        raise SchemaError(f"field {f.full_name!r} has protobuf type {t}, which Spark does not read")

    def _enum(self, ed: Any) -> int:
        got = self._enum_index.get(ed.full_name)
        if got is None:
            pairs = sorted({v.number: v.name for v in reversed(ed.values)}.items())  # aliases: the first name
            numbers = np.array([n for n, _ in pairs], dtype=np.int32).tobytes()
            self.enums.append((ed.name, numbers, [s.encode() for _, s in pairs]))
            got = self._enum_index[ed.full_name] = len(self.enums) - 1
        return got

    # ---- writers

    def check_writer(self, writer: Any) -> None:
        """Refuse a writer message whose fields the reader's would misread (``IncompatibleSchemaError``)."""
        _compatible(writer, self.desc, self._checked, writer.full_name)

    # ---- decoding

    def decode(self, values: pa.Array, starts: np.ndarray) -> tuple[pa.Array | None, int, str]:
        """``values`` (binary) each read from byte ``starts[i]`` (-1: a null row). Returns
        (column, -1, "") or (None, row, why) for the first row that does not decode."""
        if values.type != pa.binary():
            values = values.cast(pa.binary())
        if values.offset:
            values = pa.concat_arrays([values])
        vb = values.buffers()
        assert vb[1] is not None and len(values) == len(starts)
        data = vb[2] if vb[2] is not None else pa.py_buffer(b"")
        bad, result = _proto.decode(self.msgs, self.enums, self.outs,
                                    (vb[0] if values.null_count else None, vb[1], data),
                                    np.ascontiguousarray(starts, dtype=np.int32))
        if bad is not None:
            return None, int(bad), str(result)
        assert not isinstance(result, str)
        return build(self.root, result), -1, ""


def _compatible(w: Any, r: Any, seen: set[tuple[str, str]], where: str) -> None:
    if (w.full_name, r.full_name) in seen:
        return
    seen.add((w.full_name, r.full_name))
    for rf in r.fields:
        wf = w.fields_by_number.get(rf.number)
        if wf is None:
            continue
        at = f"{where}.{rf.name} (number {rf.number})"
        wk, rk = _WIRE_FAMILY.get(wf.type), _WIRE_FAMILY.get(rf.type)
        if wk != rk:
            raise IncompatibleSchemaError(f"field {at} is {_type_name(wf)} in the writer's schema and "
                                          f"{_type_name(rf)} in the reader's")
        if repeated(wf) != repeated(rf) and rk in ("message", "bytes"):
            raise IncompatibleSchemaError(f"field {at} is repeated in one schema and singular in the other")
        if rk == "message":
            wt, rt = wf.message_type.full_name, rf.message_type.full_name
            if (wt in TIME_TYPES or rt in TIME_TYPES) and wt != rt:
                raise IncompatibleSchemaError(f"field {at} is {wt} in the writer's schema and {rt} in the "
                                              "reader's")
            _compatible(wf.message_type, rf.message_type, seen, at)


def repeated(f: Any) -> bool:
    got = getattr(f, "is_repeated", None)  # protobuf 6.30+; older ones have only the label
    return bool(got) if got is not None else f.label == 3


def _type_name(f: Any) -> str:
    if f.type == T_MESSAGE:
        return f"message {f.message_type.full_name}"
    if f.type == T_ENUM:
        return f"enum {f.enum_type.full_name}"
    names: dict[int, str] = {T_DOUBLE: "double", T_FLOAT: "float", T_INT64: "int64", T_UINT64: "uint64",
                             T_INT32: "int32", T_FIXED64: "fixed64", T_FIXED32: "fixed32", T_BOOL: "bool",
                             T_STRING: "string", T_BYTES: "bytes", T_UINT32: "uint32", T_SFIXED32: "sfixed32",
                             T_SFIXED64: "sfixed64", T_SINT32: "sint32", T_SINT64: "sint64"}
    return names.get(f.type, str(f.type))


def message_paths(values: pa.Array, ids: np.ndarray, header: int,
                  bad: dict[int, str]) -> tuple[np.ndarray, np.ndarray, list[tuple[int, ...]]]:
    """Each record's message indexes, after the registry header: zigzag varints, a count and
    that many indexes (a count of 0: the file's first message). Returns each row's payload
    start (-1: none), its path's position in the returned paths (-1: none), and the paths.
    Rows that carry no readable indexes go into ``bad``."""
    n = len(values)
    starts = np.full(n, -1, dtype=np.int32)
    which = np.full(n, -1, dtype=np.int32)
    paths: list[tuple[int, ...]] = [(0,)]
    _, obuf, dbuf = values.buffers()
    assert obuf is not None
    offs = np.frombuffer(obuf, np.int32)[values.offset:values.offset + n + 1]
    data = np.frombuffer(dbuf, np.uint8) if dbuf is not None else np.zeros(0, np.uint8)
    rows = np.flatnonzero(ids >= 0)
    short = rows[offs[rows + 1] - offs[rows] <= header]
    for r in short.tolist():
        bad[r] = "the value ends after the registry header, before the protobuf message indexes"
    rows = rows[offs[rows + 1] - offs[rows] > header]
    lead = data[offs[rows] + header] if len(rows) else np.zeros(0, np.uint8)
    first = lead == 0
    starts[rows[first]] = header + 1
    which[rows[first]] = 0
    index: dict[tuple[int, ...], int] = {(0,): 0}
    # One index of one byte (a count of 1, then an even byte: a top-level message below 64),
    # as a file's other top-level messages are written: a column at a time too.
    one = (lead == 2) & (offs[rows + 1] - offs[rows] > header + 1)
    second = data[offs[rows[one]] + header + 1] if one.any() else np.zeros(0, np.uint8)
    plain = (second & 0x81) == 0
    for byte in np.unique(second[plain]).tolist():
        top: tuple[int, ...] = (byte >> 1,)
        at = index.setdefault(top, len(index))
        if at == len(paths):
            paths.append(top)
        hit = rows[one][plain & (second == byte)]
        starts[hit] = header + 2
        which[hit] = at
    done = first.copy()
    done[np.flatnonzero(one)[plain]] = True
    for r in rows[~done].tolist():  # nested messages' records, and longer indexes: read one by one
        raw = bytes(data[offs[r] + header:offs[r + 1]][:64])
        got = _indexes(raw)
        if got is None:
            bad[r] = "the protobuf message indexes after the registry header do not decode"
            continue
        path, used = got
        starts[r] = header + used
        which[r] = index.setdefault(path, len(index))
        if which[r] == len(paths):
            paths.append(path)
    return starts, which, paths


def _zigzag(raw: bytes, at: int) -> tuple[int, int] | None:
    v = shift = 0
    while at < len(raw) and shift < 64:
        b = raw[at]
        at += 1
        v |= (b & 0x7F) << shift
        if not b & 0x80:
            return (v >> 1) ^ -(v & 1), at
        shift += 7
    return None


def _indexes(raw: bytes) -> tuple[tuple[int, ...], int] | None:
    got = _zigzag(raw, 0)
    if got is None or not 0 <= got[0] <= 16:
        return None
    count, at = got
    if count == 0:
        return (0,), at
    path = []
    for _ in range(count):
        got = _zigzag(raw, at)
        if got is None or got[0] < 0:
            return None
        path.append(got[0])
        at = got[1]
    return tuple(path), at
