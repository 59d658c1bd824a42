"""Driver side, at query start: the target table checked against the DataFrame, the
sink's bookkeeping tables, and every SQL statement the writers will run.

SQLAlchemy reflects the table and quotes every identifier; names from options never
reach SQL unquoted. The statements are built here once and travel to executors as
plain strings in the ``SqlPlan``.
"""

from __future__ import annotations

import datetime
import decimal
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)
from sqlalchemy.dialects import postgresql as pg

from spark_ext.connectors.jdbc import binary_copy
from spark_ext.connectors.jdbc.config import JdbcSinkConfig
from spark_ext.connectors.jdbc.transactions import connect, prepared_gids
from spark_ext.errors import ConnectorError, InvalidOptionError

SINKS_TABLE = "spark_ext_sinks"
BATCHES_TABLE = "spark_ext_commits"
LANDED_TABLE = "spark_ext_landed"


def _family_spark(t: DataType) -> str | None:
    if isinstance(t, (ByteType, ShortType, IntegerType, LongType)):
        return "int"
    if isinstance(t, (FloatType, DoubleType)):
        return "float"
    if isinstance(t, DecimalType):
        return "decimal"
    if isinstance(t, StringType):
        return "string"
    if isinstance(t, BooleanType):
        return "bool"
    if isinstance(t, (TimestampType, TimestampNTZType)):
        return "timestamp"
    if isinstance(t, DateType):
        return "date"
    if isinstance(t, BinaryType):
        return "binary"
    return None


_ACCEPTS: dict[type, tuple[str, ...]] = {
    int: ("int",),
    float: ("int", "float", "decimal"),
    decimal.Decimal: ("int", "float", "decimal"),
    bool: ("bool",),
    datetime.datetime: ("timestamp", "date"),
    datetime.date: ("date",),
    bytes: ("binary",),
    str: ("string",),
}


def _accepts(db_type: sa.types.TypeEngine[Any], family: str) -> bool:
    """May a DataFrame column of ``family`` be written into a column of ``db_type``?"""
    try:
        py = db_type.python_type
    except NotImplementedError:
        py = object
    # uuid, json, enums, intervals...: PostgreSQL parses their text form.
    return family in _ACCEPTS.get(py, ("string",))


_CREATE: dict[str, Callable[[Any], sa.types.TypeEngine[Any]]] = {
    "int": lambda t: sa.BigInteger() if isinstance(t, LongType) else sa.Integer(),
    "float": lambda t: pg.DOUBLE_PRECISION() if isinstance(t, DoubleType) else pg.REAL(),
    "decimal": lambda t: sa.Numeric(t.precision, t.scale),
    "string": lambda t: sa.Text(),
    "bool": lambda t: sa.Boolean(),
    "timestamp": lambda t: sa.TIMESTAMP(timezone=isinstance(t, TimestampType)),
    "date": lambda t: sa.Date(),
    "binary": lambda t: pg.BYTEA(),
}


@dataclass(frozen=True)
class SqlPlan:
    """The statements writers and committers run, quoted once on the driver."""

    columns: tuple[str, ...]
    binary_columns: tuple[str, ...]
    copy_target: str
    copy_staging: str
    upsert_from_staging: str
    clear_staging: str
    sinks_table: str
    batches_table: str
    landed_table: str
    stage_setup: tuple[str, ...] = ()  # run by each task before its transaction (MariaDB's staging)
    binary_kinds: tuple[int, ...] = ()  # each column's binary COPY encoding; () sends CSV
    copy_target_binary: str = ""
    copy_staging_binary: str = ""


@dataclass(frozen=True)
class JdbcSinkSetup:
    """The sink's config and its SQL: what writers and the committer are built from."""

    cfg: JdbcSinkConfig
    sql: SqlPlan


def engine(cfg: JdbcSinkConfig) -> sa.Engine:
    """Connections that wait out a restarting server, as every connection of the sink does."""
    return sa.create_engine(cfg.url, poolclass=sa.pool.NullPool,
                            creator=lambda: connect(cfg.open_url(), cfg.reconnect_timeout_s, cfg.sink_id))


# libpq's words for a refused connection -> the fix, checked in this order.
_FIXES = (
    ("certificate verify failed", "the server's certificate could not be verified: it is not signed by "
     "the CA in the URL's sslrootcert (point sslrootcert at the CA that signed it), or it has expired"),
    ("does not match host name", "the server's certificate does not name the URL's host: connect by a "
     "name the certificate carries"),
    ("certificate expired", "a certificate has expired (the client's sslcert, or the server's): renew it"),
    ("requires a valid client certificate", "the server logs this user in by certificate: add sslcert "
     "and sslkey to the URL"),
    ("no encryption", "the server refuses clear text: add sslmode=verify-full and sslrootcert to the URL"),
    ("server does not support SSL", "the server does not serve TLS: enable ssl on it, or lower sslmode"),
    ("could not open certificate file", "the URL's sslcert cannot be read on this host"),
    ("could not load private key file", "the URL's sslkey cannot be read on this host"),
    ("has group or world access", "the URL's sslkey is readable by others: chmod 0600 it"),
    ("root certificate file", "the URL's sslrootcert cannot be read on this host"),
    ("password authentication failed", "check the user and the password (url, password, passwordFile or "
     "passwordEnv)"),
)


def connect_error(cfg: JdbcSinkConfig, e: Exception) -> ConnectorError:
    """A clear error naming the server and the fix, never the password."""
    return server_error(cfg.safe_url, e)


def server_error(safe_url: str, e: Exception) -> ConnectorError:
    """``connect_error`` for a URL shown as ``safe_url`` (its password hidden): the sink's
    and the command line tools' one wording of libpq's refusals."""
    orig = getattr(e, "orig", None) or e
    text = str(orig).strip()
    first = text.splitlines()[0] if text else type(orig).__name__
    fix = next((f for words, f in _FIXES if words in text), None)
    return ConnectorError(f"cannot use PostgreSQL at {safe_url}: {first}" + (f"; {fix}" if fix else ""))


def left_in_doubt(cfg: JdbcSinkConfig, left: list[str]) -> ConnectorError:
    """An exactly_once run of this sink left ``left`` prepared; only its take-over (or the
    doctor) knows which batch they decided, and a weaker run would write that batch again."""
    return ConnectorError(
        f"sink {cfg.sink_id!r} has {len(left)} prepared transaction(s) left by an exactly_once run "
        f"({left[0]}{', ...' if len(left) > 1 else ''}), and this query runs with guarantee "
        f"{cfg.guarantee.value}: restart it once with guarantee exactly_once to finish them, or "
        f"resolve them with 'spark-ext doctor jdbc resolve --sink {cfg.sink_id}', then change "
        "the guarantee")


def prepare_tables(cfg: JdbcSinkConfig, schema: StructType, need_2pc: bool) -> SqlPlan:
    """Check the database and the target table, create what is missing, build the SQL.

    Driver, at query start; raising stops the query before anything is written.
    """
    eng = engine(cfg)
    try:
        for attempt in range(_DDL_ATTEMPTS):
            try:
                staging, pg_types = _check_and_create(eng, cfg, schema, need_2pc)
                break
            except sa.exc.DBAPIError as e:
                # PostgreSQL's CREATE TABLE (IF NOT EXISTS too) fails when another session
                # creates the same table concurrently, e.g. two queries starting together on
                # a new database. Their table is then there: check again from the top.
                raced = getattr(e.orig, "pgcode", None) in _CREATED_CONCURRENTLY
                if not raced or attempt == _DDL_ATTEMPTS - 1:
                    raise
    except sa.exc.DBAPIError as e:
        raise connect_error(cfg, e) from None
    finally:
        eng.dispose()
    return statements(cfg, schema, staging, pg_types)


# unique_violation (on the catalog), duplicate_table, duplicate_object
_CREATED_CONCURRENTLY = frozenset({"23505", "42P07", "42710"})
# Each retry follows a table another session created, and a start creates at most four.
_DDL_ATTEMPTS = 5


def _check_and_create(eng: sa.Engine, cfg: JdbcSinkConfig, schema: StructType,
                      need_2pc: bool) -> tuple[str, dict[str, str]]:
    """One pass of prepare_tables; returns the staging table's name and the target's column
    types (``pg_type.typname`` by column)."""
    with eng.connect() as conn:
        if not need_2pc and (left := prepared_gids(conn.connection, cfg.sink_id)):
            raise left_in_doubt(cfg, left)
        if need_2pc:
            n = int(conn.execute(sa.text("SHOW max_prepared_transactions")).scalar_one())
            if n == 0:
                raise ConnectorError(
                    f"PostgreSQL at {cfg.safe_url} has max_prepared_transactions = 0, so it cannot "
                    "prepare transactions (two-phase commit). Raise it in postgresql.conf (at least "
                    "the number of Spark tasks per batch: 200 after a shuffle at Spark's default "
                    "spark.sql.shuffle.partitions) and restart PostgreSQL, or use "
                    "guarantee at_least_once with upsertKeys"
                )
        insp = sa.inspect(conn)
        if not insp.has_table(cfg.table, schema=cfg.schema):
            if not cfg.create_table:
                raise InvalidOptionError(
                    f"table {cfg.qualified} does not exist in {cfg.safe_url}; create it, or set "
                    ".option('createTable', 'true') to create it from the DataFrame's schema"
                )
            create_target(conn, cfg, schema, "PostgreSQL", lambda t, fam, key: _CREATE[fam](t))
        cols = {c["name"]: c for c in insp.get_columns(cfg.table, schema=cfg.schema)}
        check_columns(cfg, schema, cols)
        if cfg.upsert_keys:
            _check_keys(cfg, insp)
        _create_bookkeeping(conn, cfg)
        pg_types = _type_names(conn, _qualify(cfg, cfg.table))
        conn.commit()
    return _create_staging(eng, cfg) if cfg.upsert_keys else staging_name(cfg, ""), pg_types


def create_target(conn: sa.Connection, cfg: JdbcSinkConfig, schema: StructType, database: str,
                  column_type: Callable[[DataType, str, bool], sa.types.TypeEngine[Any]],
                  **table_kw: Any) -> None:
    """``createTable``: the target from the DataFrame's columns, ``upsertKeys`` its primary
    key. ``column_type(Spark type, its family, is a key)``: the column's type in ``database``
    (the dialect's); ``table_kw``: the dialect's table options."""
    cols: list[sa.Column[Any]] = []
    for f in schema.fields:
        fam = _family_spark(f.dataType)
        if fam is None:
            raise InvalidOptionError(f"createTable cannot map column {f.name!r} of type "
                                     f"{f.dataType.simpleString()} to {database}; create the table yourself")
        key = f.name in cfg.upsert_keys
        cols.append(sa.Column(f.name, column_type(f.dataType, fam, key), primary_key=key))
    sa.Table(cfg.table, sa.MetaData(), *cols, schema=cfg.schema, **table_kw).create(conn)


def check_columns(cfg: JdbcSinkConfig, schema: StructType, cols: dict[str, Any],
                  accepts: Callable[[sa.types.TypeEngine[Any], str], bool] = _accepts) -> None:
    """The DataFrame's columns are the table's (``cols``: reflected), of types it ``accepts``;
    the upsert columns are the DataFrame's."""
    missing = [f.name for f in schema.fields if f.name not in cols]
    if missing:
        raise InvalidOptionError(
            f"DataFrame column(s) {', '.join(missing)} are not in table {cfg.qualified} (its columns: "
            f"{', '.join(cols)}); select or rename columns to match, or alter the table"
        )
    for f in schema.fields:
        fam = _family_spark(f.dataType)
        db_type = cols[f.name]["type"]
        if fam is None or not accepts(db_type, fam):
            raise InvalidOptionError(
                f"column {f.name!r} is {f.dataType.simpleString()} in the DataFrame but {db_type} in "
                f"table {cfg.qualified}; cast it in the query"
            )
    for k in cfg.upsert_keys:
        if k not in schema.fieldNames():
            raise InvalidOptionError(f"upsertKeys column {k!r} is not a DataFrame column")
    if cfg.upsert_order_by is not None and cfg.upsert_order_by not in schema.fieldNames():
        raise InvalidOptionError(f"upsertOrderBy column {cfg.upsert_order_by!r} is not a DataFrame column")


def _check_keys(cfg: JdbcSinkConfig, insp: sa.Inspector) -> None:
    keys = set(cfg.upsert_keys)
    pk = insp.get_pk_constraint(cfg.table, schema=cfg.schema).get("constrained_columns") or []
    uniques = [set(u["column_names"]) for u in insp.get_unique_constraints(cfg.table, schema=cfg.schema)]
    uniques += [{c for c in i["column_names"] if c} for i in insp.get_indexes(cfg.table, schema=cfg.schema)
                if i.get("unique")]
    if set(pk) != keys and keys not in uniques:
        raise InvalidOptionError(
            f"upsertKeys ({', '.join(cfg.upsert_keys)}) need a primary key or unique index on exactly those "
            f"columns of {cfg.qualified}; create one, e.g. CREATE UNIQUE INDEX ON {cfg.qualified} "
            f"({', '.join(cfg.upsert_keys)})"
        )


def _qualify(cfg: JdbcSinkConfig, name: str) -> str:
    prep = pg.dialect().identifier_preparer
    return f"{prep.quote_schema(cfg.schema)}.{prep.quote(name)}" if cfg.schema else prep.quote(name)


# Characters of the sink id in a staging table's name: 63 bytes, less "spark_ext_stg_" and
# "_<8 hex digits>" of the version.
_STAGING_ID_ROOM = 63 - 14 - 9


def staging_name(cfg: JdbcSinkConfig, version: str) -> str:
    """The upsert staging table for one shape of the target (``version``: a hash of its columns)."""
    sid = cfg.sink_id.replace("-", "_").replace(".", "_")
    if len(sid) > _STAGING_ID_ROOM:
        # Cut to fit PostgreSQL's 63-byte names, a long id keeps a hash of all of it: two ids
        # that differ only past the cut would share a name, and each sink's start would drop
        # the other's staging table as a stale version of its own.
        digest = hashlib.sha256(cfg.sink_id.encode()).hexdigest()[:8]
        sid = f"{sid[:_STAGING_ID_ROOM - 9]}_{digest}"
    base = f"spark_ext_stg_{sid}"
    return f"{base}_{version}" if version else base


def _columns(conn: sa.Connection, qualified: str) -> list[tuple[str, str]]:
    """(name, exact type with modifiers) of a table's live columns, in order."""
    rows = conn.execute(sa.text(
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = "
        "CAST(:t AS regclass) AND attnum > 0 AND NOT attisdropped ORDER BY attnum"), {"t": qualified})
    return [(r[0], r[1]) for r in rows]


def _type_names(conn: sa.Connection, qualified: str) -> dict[str, str]:
    """The type name (``pg_type.typname``: a domain's own, not its base's) of each live column."""
    rows = conn.execute(sa.text(
        "SELECT a.attname, t.typname FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid WHERE "
        "a.attrelid = CAST(:t AS regclass) AND a.attnum > 0 AND NOT a.attisdropped"), {"t": qualified})
    return {r[0]: r[1] for r in rows}


def _create_staging(eng: sa.Engine, cfg: JdbcSinkConfig) -> str:
    """The sink's upsert staging table for the target as it is now; returns its name.

    Unlogged; each task's rows are tagged and removed in its own transaction (temporary
    tables cannot take part in PREPARE TRANSACTION). It must have the target's columns
    and exact types (a narrower numeric would round silently), so its name carries a hash
    of them: an altered target gets a new one, without waiting for locks that in-doubt
    transactions of an earlier run may hold on the old one (dropped when it is free).
    """
    target = _qualify(cfg, cfg.table)
    with eng.begin() as conn:
        shape = _columns(conn, target)
        name = staging_name(cfg, hashlib.sha256(repr(shape).encode()).hexdigest()[:8])
        mine = re.compile(re.escape(staging_name(cfg, "")) + r"(_[0-9a-f]{8})?")  # not a longer sink id's
        stale = [t for t in sa.inspect(conn).get_table_names(schema=cfg.schema)
                 if mine.fullmatch(t) and t != name]
        if name not in sa.inspect(conn).get_table_names(schema=cfg.schema):
            stg = _qualify(cfg, name)
            conn.execute(sa.text(f"CREATE UNLOGGED TABLE {stg} AS SELECT * FROM {target} WITH NO DATA"))
            conn.execute(sa.text(f"ALTER TABLE {stg} ADD COLUMN _sx_task text, ADD COLUMN _sx_seq bigserial"))
    for old in stale:
        try:
            with eng.begin() as conn:
                conn.execute(sa.text("SET LOCAL lock_timeout = '200ms'"))
                conn.execute(sa.text(f"DROP TABLE IF EXISTS {_qualify(cfg, old)}"))
        except sa.exc.DBAPIError:
            pass  # still locked by an in-doubt transaction: dropped by a later start
    return name


def _create_bookkeeping(conn: sa.Connection, cfg: JdbcSinkConfig) -> None:
    sinks, batches = _qualify(cfg, SINKS_TABLE), _qualify(cfg, BATCHES_TABLE)
    conn.execute(sa.text(
        f"CREATE TABLE IF NOT EXISTS {sinks} (sink_id text PRIMARY KEY, target text NOT NULL, "
        "epoch bigint NOT NULL, updated_at timestamptz NOT NULL DEFAULT now())"
    ))
    # partition_id = -1 marks the driver's decision "batch N commits", listing its winners.
    # query_id: Spark's query id, the same across restarts from one checkpoint and new
    # with a new checkpoint, so a query restarted from scratch never mistakes the rows of
    # its predecessor for its own batches.
    conn.execute(sa.text(
        f"CREATE TABLE IF NOT EXISTS {batches} (sink_id text NOT NULL, query_id text NOT NULL, "
        "batch_id bigint NOT NULL, partition_id int NOT NULL, attempt int NOT NULL, "
        "epoch bigint NOT NULL, rows bigint, winners text, at timestamptz NOT NULL DEFAULT now(), "
        "PRIMARY KEY (sink_id, query_id, batch_id, partition_id, attempt))"
    ))
    # at_least_once: what each partition of a batch sent (a digest of its rows), so that a
    # replay skips a partition only when it holds the same rows. A table of its own: adding
    # a column to the commits table would need a lock that in-doubt transactions hold.
    conn.execute(sa.text(
        f"CREATE TABLE IF NOT EXISTS {_qualify(cfg, LANDED_TABLE)} (sink_id text NOT NULL, "
        "query_id text NOT NULL, batch_id bigint NOT NULL, partition_id int NOT NULL, digest text NOT NULL, "
        "rows bigint, at timestamptz NOT NULL DEFAULT now(), "
        "PRIMARY KEY (sink_id, query_id, batch_id, partition_id, digest))"
    ))


def statements(cfg: JdbcSinkConfig, schema: StructType, staging: str,
               pg_types: dict[str, str] | None = None) -> SqlPlan:
    """Every statement the sink runs, quoted. Pure: no database access. ``pg_types`` (the
    target's column types, known once the table was checked) lets the rows go as binary COPY."""
    prep = pg.dialect().identifier_preparer
    names = tuple(schema.fieldNames())
    cols = ", ".join(prep.quote(c) for c in names)
    target = _qualify(cfg, cfg.table)
    stg = _qualify(cfg, staging)
    keys = ", ".join(prep.quote(k) for k in cfg.upsert_keys)
    rest = [c for c in names if c not in cfg.upsert_keys]
    on_conflict = (f"DO UPDATE SET {', '.join(f'{prep.quote(c)} = EXCLUDED.{prep.quote(c)}' for c in rest)}"
                   if rest else "DO NOTHING")
    order = "_sx_seq DESC"  # without upsertOrderBy: the last row per key (COPY order) wins
    if cfg.upsert_order_by is not None and rest:
        o = prep.quote(cfg.upsert_order_by)
        order = f"{o} DESC NULLS LAST, _sx_seq DESC"  # the greatest version wins in the batch ...
        on_conflict += f" WHERE t.{o} IS NULL OR EXCLUDED.{o} >= t.{o}"  # ... and against the table
    upsert = (f"INSERT INTO {target} AS t ({cols}) SELECT DISTINCT ON ({keys}) {cols} FROM {stg} "
              f"WHERE _sx_task = %s ORDER BY {keys}, {order} ON CONFLICT ({keys}) {on_conflict}"
              ) if keys else ""
    binary = tuple(f.name for f in schema.fields if isinstance(f.dataType, BinaryType))
    return SqlPlan(
        columns=names,
        binary_columns=binary,
        copy_target=f"COPY {target} ({cols}) FROM STDIN WITH (FORMAT csv)",
        copy_staging=f"COPY {stg} ({cols}, _sx_task) FROM STDIN WITH (FORMAT csv)" if keys else "",
        binary_kinds=binary_copy.kinds(schema, pg_types or {}),
        copy_target_binary=f"COPY {target} ({cols}) FROM STDIN WITH (FORMAT binary)",
        copy_staging_binary=f"COPY {stg} ({cols}, _sx_task) FROM STDIN WITH (FORMAT binary)" if keys else "",
        upsert_from_staging=upsert,
        clear_staging=f"DELETE FROM {stg} WHERE _sx_task = %s" if keys else "",
        sinks_table=_qualify(cfg, SINKS_TABLE),
        batches_table=_qualify(cfg, BATCHES_TABLE),
        landed_table=_qualify(cfg, LANDED_TABLE),
    )
