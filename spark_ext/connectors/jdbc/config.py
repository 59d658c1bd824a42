"""Options of the jdbc sink (PostgreSQL, MariaDB, MySQL), parsed on the driver into a
frozen, picklable config.

``url`` is a SQLAlchemy URL (``postgresql+psycopg2://user:pw@host:5432/db``,
``mysql+pymysql://user:pw@host:3306/db``) or Spark's JDBC form
(``jdbc:postgresql://host:5432/db``, ``jdbc:mysql://``, ``jdbc:mariadb://``) with
``user`` / ``password`` options. MariaDB's TLS settings are PyMySQL's ``ssl_ca``,
``ssl_cert``, ``ssl_key``, ``ssl_verify_identity`` in the URL's query.
A password given inline travels inside the config to executors (they must connect) but
is never part of a message or a log line: ``safe_url`` is what we show. One given by
``passwordFile`` / ``passwordEnv`` travels as the file's or variable's name and is read
at each connect (``open_url``). TLS settings (``sslmode``, ``sslrootcert``, ``sslcert``,
``sslkey``) ride in the URL's query and reach every connection; pgjdbc's ``ssl=true``
means ``sslmode=verify-full``, as it does for pgjdbc.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from spark_ext.errors import InvalidOptionError
from spark_ext.guarantees import Guarantee
from spark_ext.options import Option, Options, OptionSpec, stable_sink_id
from spark_ext.secrets import Secret, secret, secret_options

SINK_OPTIONS = OptionSpec.of(
    Option("url", "SQLAlchemy URL (`postgresql+psycopg2://user@host:5432/db`, "
           "`mysql+pymysql://user@host:3306/db`) or Spark's `jdbc:postgresql://host:5432/db`, "
           "`jdbc:mysql://...`, `jdbc:mariadb://...`.", required=True),
    Option("user", "Overrides the URL's user."),
    Option("password", "Overrides the URL's password; never logged (prefer `passwordFile`)."),
    *secret_options(),
    Option("dbtable", "`table` or `schema.table`; must exist unless `createTable` is true.", required=True),
    Option("createTable", "Create the table when missing: columns from the DataFrame, `upsertKeys` as "
           "primary key.", default=False),
    Option("guarantee", "`exactly_once`: prepared transactions committed with the batch (two-phase "
           "commit); `at_least_once`: each task commits, a replayed partition is skipped only when it "
           "holds exactly the rows that landed; `none`: plain append.", default="exactly_once"),
    Option("upsertKeys", "Comma list: write by `INSERT ... ON CONFLICT (keys) DO UPDATE` (needs a primary "
           "key or unique index on exactly those columns). With `exactly_once`, partition by the keys."),
    Option("upsertOrderBy", "A version or event-time column: the row with the greatest value wins, within a "
           "batch and against the row in the table (ties: the later row). Needs `upsertKeys`."),
    Option("sinkId", "Stable sink name (1-64 letters, digits, `_`, `-`, `.`); `exactly_once` needs it or a "
           "`checkpointLocation`.", shown="derived from `checkpointLocation`"),
    Option("lockTimeoutMs", "How long a task waits for a row lock (ms).", default=60_000),
    Option("reconnectTimeoutMs", "How long every connection of the sink waits out a server that refuses or "
           "drops it (a restart, a failover) before the query fails (ms; 0: fail at once). Other connection "
           "errors (credentials, a missing database) fail at once. The default outlasts a managed "
           "database's failover (60-120 s).", default=180_000),
)


# URL scheme -> (SQLAlchemy driver, the dialect's name). MariaDB and MySQL share one.
_DIALECTS = {"postgresql": ("postgresql+psycopg2", "postgresql"),
             "postgres": ("postgresql+psycopg2", "postgresql"), "mysql": ("mysql+pymysql", "mysql"),
             "mariadb": ("mysql+pymysql", "mysql")}
SUPPORTED = ("postgresql+psycopg2://user@host:5432/db", "jdbc:postgresql://host:5432/db",
             "mysql+pymysql://user@host:3306/db", "jdbc:mysql://host:3306/db", "jdbc:mariadb://host:3306/db")


# What the MariaDB / MySQL dialect reads from the URL's query (PyMySQL's names).
MYSQL_QUERY = ("ssl_ca", "ssl_cert", "ssl_key", "ssl_verify_cert", "ssl_verify_identity", "connect_timeout",
               "read_timeout")


def parse_url(value: str, user: str | None, password: str | None) -> URL:
    """SQLAlchemy or Spark's ``jdbc:`` URL -> a psycopg2 or PyMySQL SQLAlchemy URL."""
    try:
        if value.startswith("jdbc:"):
            parts = urlsplit(value[len("jdbc:"):])
            if parts.scheme not in _DIALECTS:
                raise InvalidOptionError(
                    f"option 'url' names JDBC scheme {parts.scheme!r}; this sink writes PostgreSQL, MariaDB "
                    f"and MySQL: {', '.join(SUPPORTED)}"
                )
            query = dict(parse_qsl(parts.query))
            if _DIALECTS[parts.scheme][1] == "postgresql":
                query = _libpq_query(query)
            url = URL.create(
                _DIALECTS[parts.scheme][0], username=query.pop("user", None),
                password=query.pop("password", None), host=parts.hostname, port=parts.port,
                database=parts.path.lstrip("/") or None, query=query,
            )
        else:
            url = make_url(value)
    except InvalidOptionError:
        raise
    except (ArgumentError, ValueError) as e:
        raise InvalidOptionError(
            f"option 'url' is not a database URL; expected one of {', '.join(SUPPORTED)} ({type(e).__name__})"
        ) from None
    backend = url.get_backend_name()
    if backend not in _DIALECTS:
        raise InvalidOptionError(
            f"option 'url' names database {backend!r}; this sink writes PostgreSQL, MariaDB and MySQL: "
            f"{', '.join(SUPPORTED)}"
        )
    url = url.set(drivername=_DIALECTS[backend][0])
    if _DIALECTS[backend][1] == "mysql" and (unknown := sorted(set(url.query) - set(MYSQL_QUERY))):
        # refused rather than dropped: a user who wrote useSSL=true must not get clear text
        raise InvalidOptionError(
            f"option 'url' has setting(s) {', '.join(unknown)} that the MariaDB / MySQL dialect does not "
            f"take; it takes {', '.join(MYSQL_QUERY)} (TLS: ssl_ca=/path/ca.pem&ssl_verify_identity=true)")
    if user:
        url = url.set(username=user)
    if password:
        url = url.set(password=password)
    return url


def _libpq_query(query: dict[str, str]) -> dict[str, str]:
    """pgjdbc's ``ssl=true`` as libpq says it: pgjdbc then verifies the server's
    certificate and name (``verify-full``) unless ``sslmode`` says otherwise."""
    ssl = query.pop("ssl", None)
    if ssl is not None and ssl.lower() not in ("true", "false"):
        raise InvalidOptionError(f"option 'url' has ssl={ssl!r}; expected ssl=true or ssl=false")
    if ssl is not None and ssl.lower() == "true":
        query.setdefault("sslmode", "verify-full")
    return query


@dataclass(frozen=True)
class JdbcSinkConfig:
    """Everything writers and committers need. No connections; secrets never in repr."""

    url: URL
    schema: str | None
    table: str
    upsert_keys: tuple[str, ...]
    upsert_order_by: str | None  # the row with the greatest value wins (else: the last one)
    create_table: bool
    sink_id: str
    lock_timeout_ms: int
    guarantee: Guarantee
    reconnect_timeout_s: float = 180.0  # how long a restarting server is waited for
    password: Secret | None = None  # by reference (passwordFile / passwordEnv): read at each connect

    def __repr__(self) -> str:
        return f"JdbcSinkConfig({self.safe_url}, {self.qualified}, sink_id={self.sink_id!r})"

    @property
    def safe_url(self) -> str:
        return self.url.render_as_string(hide_password=True)

    def open_url(self) -> URL:
        """The URL to connect with: a password given by reference is read now."""
        return self.url if self.password is None else self.url.set(password=self.password.reveal())

    @property
    def dialect(self) -> str:
        """``postgresql`` or ``mysql`` (MariaDB and MySQL)."""
        return "mysql" if self.url.get_backend_name() == "mysql" else "postgresql"

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.table}" if self.schema else self.table

    @staticmethod
    def parse(opts: Options, guarantee: Guarantee) -> JdbcSinkConfig:
        spec = SINK_OPTIONS
        spec.check(opts.raw(), "hzsink connector 'jdbc'")
        pw = secret(opts)
        url = parse_url(opts.require("url"), opts.get_str("user"), pw.value if pw else None)
        if pw is not None and pw.by_reference and url.password is not None:
            raise InvalidOptionError(f"option 'url' carries a password and option '{pw.given}' gives one "
                                     "too; drop it from the URL")
        dbtable = opts.require("dbtable").strip()
        schema, _, table = dbtable.rpartition(".")
        if not table:
            raise InvalidOptionError(f"option 'dbtable' is {dbtable!r}; expected table or schema.table")
        keys = tuple(k.strip() for k in (opts.get_str("upsertkeys") or "").split(",") if k.strip())
        if len(set(keys)) != len(keys):
            raise InvalidOptionError(f"option 'upsertKeys' names a column twice: {', '.join(keys)}")
        return JdbcSinkConfig(
            url=url,
            schema=schema or None,
            table=table,
            upsert_keys=keys,
            upsert_order_by=_order_by(opts, keys),
            create_table=opts.get_bool("createtable", spec.default_bool("createTable")),
            sink_id=_sink_id(opts, guarantee, url, dbtable),
            lock_timeout_ms=spec.int_of(opts, "lockTimeoutMs", minimum=1),
            guarantee=guarantee,
            reconnect_timeout_s=spec.seconds_of(opts, "reconnectTimeoutMs", minimum=0),
            password=pw if pw is not None and pw.by_reference else None,
        )


def _order_by(opts: Options, keys: tuple[str, ...]) -> str | None:
    col = (opts.get_str("upsertorderby") or "").strip() or None
    if col is not None and not keys:
        raise InvalidOptionError("option 'upsertOrderBy' orders the rows of one key: it needs 'upsertKeys'")
    if col is not None and col in keys:
        raise InvalidOptionError(f"option 'upsertOrderBy' names key column {col!r}; name a version or "
                                 "event-time column")
    return col



def _sink_id(opts: Options, guarantee: Guarantee, url: URL, dbtable: str) -> str:
    """A stable name for this sink: ``sinkId``, else derived from the checkpoint location."""
    given = stable_sink_id(opts, "jdbc", guarantee is Guarantee.EXACTLY_ONCE,
                           "to find its own in-doubt transactions after a restart")
    if given is not None:
        return given
    db = f"{url.host}:{url.port}/{url.database}/{dbtable}"
    return "tb-" + hashlib.sha256(db.encode()).hexdigest()[:16]
