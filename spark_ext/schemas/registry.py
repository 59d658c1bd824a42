"""The schema registry: its settings, and the client every process keeps one of.

Any registry speaking Confluent's REST API (Confluent's own, Apicurio's ``/apis/ccompat/v7``,
Karapace, Redpanda's) through confluent-kafka's ``SchemaRegistryClient``, which caches
schemas by id. Settings travel to executors as a frozen config; a password given by file
or environment variable is read by each process when its client is made.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from typing import Any

from spark_ext.errors import ConnectorError, InvalidOptionError, MissingExtraError, MissingOptionError
from spark_ext.options import Option, Options
from spark_ext.secrets import Secret, secret, secret_options

REGISTRY_OPTIONS = (
    Option("schemaRegistry.url", "The schema registry's address, `http(s)://host:port[/path]` (Confluent's "
           "REST API; for Apicurio, its `/apis/ccompat/v7`). Needed by the `avro` formats."),
    Option("schemaRegistry.username", "Basic authentication's user, with one of the password options."),
    Option("schemaRegistry.password", "Basic authentication's password (prefer the file or variable)."),
    *secret_options("schemaRegistry.password", "the registry's basic authentication password"),
    Option("schemaRegistry.ssl.ca.location", "The CA certificate (PEM) that signed the registry's."),
    Option("schemaRegistry.ssl.certificate.location", "A client certificate (PEM), for a registry that "
           "asks for one."),
    Option("schemaRegistry.ssl.key.location", "The client certificate's key (PEM)."),
)

_SSL = ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location")


class RegistryError(ConnectorError):
    """The schema registry did not answer, or refused what was asked."""


@dataclass(frozen=True)
class RegistryConfig:
    """How to reach the registry. Picklable; holds a password only when given inline."""

    url: str
    username: str | None = None
    password: Secret | None = None
    ssl: tuple[tuple[str, str], ...] = ()

    @staticmethod
    def parse(opts: Options, needed_by: str) -> RegistryConfig:
        """Driver, at query start. ``needed_by`` names the option that wants a registry."""
        _client_installed(needed_by)
        url = (opts.get_str("schemaregistry.url") or "").strip()
        if not url:
            raise MissingOptionError(f"{needed_by} reads through a schema registry: set option "
                                     "'schemaRegistry.url' (http://host:port)")
        if not url.startswith(("http://", "https://")):
            raise InvalidOptionError(f"option 'schemaRegistry.url' is {url!r}; expected http://host:port or "
                                     "https://host:port")
        user = opts.get_str("schemaregistry.username")
        password = secret(opts, "schemaRegistry.password")
        if (user is None) != (password is None):
            raise InvalidOptionError("the schema registry's basic authentication needs both "
                                     "'schemaRegistry.username' and one of 'schemaRegistry.passwordFile', "
                                     "'schemaRegistry.passwordEnv', 'schemaRegistry.password'")
        ssl = tuple((k, v) for k in _SSL if (v := opts.get_str(f"schemaregistry.{k}")) is not None)
        return RegistryConfig(url.rstrip("/"), user, password, ssl)

    def client_conf(self) -> dict[str, Any]:
        conf: dict[str, Any] = {"url": self.url, **dict(self.ssl)}
        if self.username is not None and self.password is not None:
            conf["basic.auth.user.info"] = f"{self.username}:{self.password.reveal()}"
        return conf


def _client_installed(needed_by: str) -> None:
    """The registry's client comes with the ``avro`` extra: say so at query start."""
    try:
        import confluent_kafka.schema_registry  # noqa: F401
    except ImportError as e:
        raise MissingExtraError(
            f"{needed_by} needs the schema registry's client (Python package {e.name!r}), which is not "
            f"installed in this Python ({sys.executable}); install the extra: pip install 'spark-ext[avro]' "
            "(on a cluster, in the environment the executors run too)") from None


_clients: dict[RegistryConfig, Any] = {}
_lock = threading.Lock()


def client(cfg: RegistryConfig) -> Any:
    """This process's client for ``cfg`` (its schema cache is shared by every task)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    with _lock:
        c = _clients.get(cfg)
        if c is None:
            c = _clients[cfg] = SchemaRegistryClient(cfg.client_conf())
        return c


def _call(cfg: RegistryConfig, what: str, fn: Any, *args: Any) -> Any:
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    try:
        return fn(*args)
    except SchemaRegistryError as e:
        raise RegistryError(f"the schema registry at {cfg.url} refused {what}: HTTP {e.http_status_code} "
                            f"({e.error_message})") from None
    except Exception as e:  # noqa: BLE001 - connection errors come as httpx's, with no common base
        raise RegistryError(f"the schema registry at {cfg.url} did not answer {what}: "
                            f"{type(e).__name__}: {e}") from None


@dataclass(frozen=True)
class Registered:
    """One schema as the registry holds it."""

    id: int
    kind: str  # AVRO, PROTOBUF or JSON
    text: str
    subject: str | None = None
    version: int | None = None
    references: tuple[tuple[str, str, int], ...] = ()  # (name, subject, version): a protobuf schema's imports


def subject_version(cfg: RegistryConfig, subject: str, version: int | None) -> Registered:
    """The subject's schema at ``version`` (None: its latest)."""
    c = client(cfg)
    what = f"subject {subject!r} version {version if version is not None else 'latest'}"
    got = _call(cfg, what, c.get_version, subject, version if version is not None else "latest")
    return Registered(got.schema_id, got.schema.schema_type or "AVRO", got.schema.schema_str, subject,
                      got.version, _references(got.schema))


def by_id(cfg: RegistryConfig, schema_id: int) -> Registered | None:
    """The schema with ``schema_id``, None when the registry has none of that id."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    try:
        got = client(cfg).get_schema(schema_id)
    except SchemaRegistryError as e:
        if e.http_status_code == 404:
            return None
        raise RegistryError(f"the schema registry at {cfg.url} refused schema id {schema_id}: HTTP "
                            f"{e.http_status_code} ({e.error_message})") from None
    except Exception as e:  # noqa: BLE001 - connection errors come as httpx's
        raise RegistryError(f"the schema registry at {cfg.url} did not answer for schema id {schema_id}: "
                            f"{type(e).__name__}: {e}") from None
    return Registered(schema_id, got.schema_type or "AVRO", got.schema_str, references=_references(got))


def _references(schema: Any) -> tuple[tuple[str, str, int], ...]:
    return tuple((r.name, r.subject, int(r.version)) for r in (getattr(schema, "references", None) or ()))
