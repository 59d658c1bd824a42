"""The registry formats' options, checked on the driver before anything runs."""

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
