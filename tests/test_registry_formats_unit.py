"""The registry formats without services: options checked on the driver, the sink's encoding
edge cases, and a source's unreadable records told from other columns of that name."""

from __future__ import annotations

import builtins

import pytest

from spark_ext.errors import InvalidOptionError, MissingExtraError, MissingOptionError
from spark_ext.options import Options
from spark_ext.schemas.registry import RegistryConfig


def _opts(**kv: str) -> Options:
    return Options({k.lower(): v for k, v in kv.items()}, "hzsource")


def test_a_missing_registry_client_names_the_extra(monkeypatch):
    real = builtins.__import__

    def no_registry(name, *args, **kwargs):
        if name.startswith("confluent_kafka.schema_registry"):
            raise ImportError("no", name=name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_registry)
    with pytest.raises(MissingExtraError, match=r"pip install 'spark-ext\[avro\]'"):
        RegistryConfig.parse(_opts(**{"schemaRegistry.url": "http://127.0.0.1:1"}), "option valueFormat=avro")


def test_registry_settings_are_checked_and_the_password_kept_out_of_the_config(tmp_path):
    with pytest.raises(MissingOptionError, match=r"set option 'schemaRegistry\.url'"):
        RegistryConfig.parse(_opts(), "option valueFormat=avro")
    with pytest.raises(InvalidOptionError, match="expected http://host:port"):
        RegistryConfig.parse(_opts(**{"schemaRegistry.url": "127.0.0.1:8081"}), "option valueFormat=avro")
    with pytest.raises(InvalidOptionError, match=r"needs both 'schemaRegistry\.username'"):
        RegistryConfig.parse(_opts(**{"schemaRegistry.url": "http://h:1", "schemaRegistry.username": "u"}),
                             "x")
    secret = tmp_path / "pw"
    secret.write_text("s3cret\n")
    cfg = RegistryConfig.parse(_opts(**{"schemaRegistry.url": "http://h:1/", "schemaRegistry.username": "u",
                                        "schemaRegistry.passwordFile": str(secret)}), "x")
    assert "s3cret" not in repr(cfg) and cfg.url == "http://h:1"
    assert cfg.client_conf()["basic.auth.user.info"] == "u:s3cret"


def test_only_the_sources_struct_is_taken_for_unreadable_records():
    """Spark's own JSON and CSV readers name a string column _corrupt_record: it is data."""
    import pyarrow as pa
    from pyspark.sql.types import StringType, StructField, StructType

    from spark_ext import deadletters

    text = pa.RecordBatch.from_pydict({"a": [1, 2], "_corrupt_record": [None, '{"a":']})
    assert not deadletters.is_corrupt_column(text.schema)
    assert deadletters.refuse_corrupt(text).num_columns == 2  # kept and written
    assert not deadletters.is_corrupt_column(StructType([StructField("_corrupt_record", StringType())]))
    ours = StructType([StructField("_corrupt_record", deadletters.corrupt_type())])
    assert deadletters.is_corrupt_column(ours)


def test_sink_encoding_edge_cases():
    import io
    import json
    from decimal import Decimal

    import fastavro
    import pyarrow as pa
    from pyspark.sql.types import NullType, StringType, StructField, StructType

    from spark_ext.schemas.avro_write import Writer, schema_of

    # A fixed decimal wider than 16 bytes: sign bytes first (it overflowed a 16-byte buffer).
    s = {"type": "record", "name": "r", "fields": [{"name": "f", "type": {
        "type": "fixed", "name": "F", "size": 40, "logicalType": "decimal", "precision": 10, "scale": 2}}]}
    arr = pa.StructArray.from_arrays([pa.array([Decimal("-1.00"), Decimal("3.5")], pa.decimal128(10, 2))],
                                     names=["f"])
    out = Writer(s).encode(arr, b"").values.to_pylist()
    assert [fastavro.schemaless_reader(io.BytesIO(v), fastavro.parse_schema(s)) for v in out] == [
        {"f": Decimal("-1.00")}, {"f": Decimal("3.50")}]
    # A null column is "null", not a union of null twice (the registry refuses that).
    assert json.loads(json.dumps(schema_of(StructType([StructField("n", NullType())]))))["fields"] == [
        {"name": "n", "type": "null"}]
    # A null key or value is a tombstone, as the registry's serializers send it, not a refused row.
    enc = Writer(schema_of(StringType())).encode(pa.array(["a", None, "b"]), b"H", "key")
    assert enc.refused == [] and enc.values.to_pylist() == [b"H\x02a", None, b"H\x02b"]
