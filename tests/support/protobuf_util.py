"""Protobuf helpers of the registry-format tests: message classes compiled from .proto text,
and a message as Spark's from_protobuf shows it."""

from __future__ import annotations

import importlib.resources
from types import SimpleNamespace


def compile_proto(tmp_path, text: str, module: str) -> SimpleNamespace:
    """The .proto text compiled by protoc (grpcio-tools) into message classes of a pool of their
    own (two versions of one package cannot share the default pool): ``.Payment`` etc."""
    from google.protobuf import descriptor_pb2, descriptor_pool, duration_pb2, message_factory, timestamp_pb2
    from grpc_tools import protoc

    d = tmp_path / module
    d.mkdir()
    (d / f"{module}.proto").write_text(text)
    include = str(importlib.resources.files("grpc_tools") / "_proto")
    assert protoc.main(["protoc", f"-I{d}", f"-I{include}", f"--descriptor_set_out={d}/set.desc",
                        f"{module}.proto"]) == 0
    fds = descriptor_pb2.FileDescriptorSet.FromString((d / "set.desc").read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for wkt in (timestamp_pb2, duration_pb2):
        pool.AddSerializedFile(wkt.DESCRIPTOR.serialized_pb)
    for f in fds.file:
        pool.Add(f)
    fd = pool.FindFileByName(f"{module}.proto")
    classes = {name: message_factory.GetMessageClass(m) for name, m in fd.message_types_by_name.items()}
    return SimpleNamespace(**classes)


def spark_view(m) -> dict:
    """A message as Spark's from_protobuf shows it: an absent singular field (or, without
    presence, one at its default) is null; repeated fields and maps are always there."""
    out: dict = {}
    for f in m.DESCRIPTOR.fields:
        v = getattr(m, f.name)
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            vf = f.message_type.fields_by_name["value"]
            out[f.name] = {k: (spark_view(x) if vf.message_type is not None else x) for k, x in v.items()}
        elif f.is_repeated:
            out[f.name] = [spark_view(x) if f.message_type is not None else scalar_view(f, x) for x in v]
        elif f.has_presence:
            out[f.name] = scalar_view(f, v) if m.HasField(f.name) else None
        else:
            out[f.name] = scalar_view(f, v) if v != f.default_value else None
    return out


def scalar_view(f, v):
    if f.message_type is not None:
        name = f.message_type.full_name
        if name == "google.protobuf.Timestamp":
            return v.ToDatetime()
        if name == "google.protobuf.Duration":
            return v.ToTimedelta()
        return spark_view(v)
    if f.enum_type is not None:
        got = f.enum_type.values_by_number.get(v)
        return got.name if got is not None else f"UNKNOWN_ENUM_VALUE_{f.enum_type.name}_{v}"
    return v
