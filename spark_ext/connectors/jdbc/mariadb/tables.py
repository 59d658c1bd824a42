"""Driver side of the MariaDB / MySQL dialect, at query start: the server and the target
checked (XA allowed, a transactional engine, columns that take the DataFrame's), the
sink's bookkeeping tables, and every statement the writers run.

Rows travel by ``LOAD DATA LOCAL INFILE`` (the bulk path, as ``COPY`` is PostgreSQL's):
tab-separated, backslash-escaped, ``\\N`` for NULL, binary columns as hex through
``UNHEX``. Upserts load into the task's temporary staging table and merge with ``INSERT
... SELECT ... ON DUPLICATE KEY UPDATE``, the latest row per key picked by
``ROW_NUMBER()``.
"""

from __future__ import annotations

import re
from typing import Any

import pymysql
import sqlalchemy as sa
from pyspark.sql.types import BinaryType, DoubleType, LongType, StructType
from sqlalchemy.dialects import mysql as my

from spark_ext.connectors.jdbc.config import JdbcSinkConfig
from spark_ext.connectors.jdbc.mariadb.transactions import (
    ACCESS_DENIED,
    MyConn,
    TlsRefusedError,
    connect,
    error_code,
    prepared_gids,
    sink_format,
)
from spark_ext.connectors.jdbc.tables import (
    BATCHES_TABLE,
    LANDED_TABLE,
    SINKS_TABLE,
    SqlPlan,
    _accepts,
    check_columns,
    create_target,
    left_in_doubt,
)
from spark_ext.errors import ConnectorError, InvalidOptionError

# Engines that take part in XA and roll back: anything else would leave a batch half written.
_TRANSACTIONAL = frozenset({"innodb", "xtradb"})


def _create_type(t: Any, fam: str, key: bool) -> sa.types.TypeEngine[Any]:
    """A column for ``createTable``; a key column must be indexable (no TEXT or BLOB)."""
    if fam == "int":
        return sa.BigInteger() if isinstance(t, LongType) else sa.Integer()
    if fam == "float":
        return my.DOUBLE() if isinstance(t, DoubleType) else my.FLOAT()
    if fam == "decimal":
        return sa.Numeric(t.precision, t.scale)
    if fam == "string":
        return sa.String(255) if key else my.LONGTEXT()
    if fam == "bool":
        return sa.Boolean()
    if fam == "timestamp":
        return my.DATETIME(fsp=6)
    if fam == "date":
        return sa.Date()
    return my.VARBINARY(255) if key else my.LONGBLOB()


def _accepts_my(db_type: sa.types.TypeEngine[Any], fam: str) -> bool:
    # BOOLEAN is TINYINT(1) in MySQL: a Spark boolean goes in as 1 / 0.
    return _accepts(db_type, fam) or (fam == "bool" and isinstance(db_type, sa.types.Integer))


def _quote(name: str) -> str:
    return str(my.dialect().identifier_preparer.quote(name))


def _qualify(cfg: JdbcSinkConfig, name: str) -> str:
    return f"{_quote(cfg.schema)}.{_quote(name)}" if cfg.schema else _quote(name)


def engine(cfg: JdbcSinkConfig) -> sa.Engine:
    return sa.create_engine(cfg.url, poolclass=sa.pool.NullPool,
                            creator=lambda: connect(cfg.open_url(), cfg.reconnect_timeout_s).raw)


def connect_error(cfg: JdbcSinkConfig, e: BaseException) -> ConnectorError:
    """A clear error naming the server and the fix, never the password."""
    orig = getattr(e, "orig", None) or e
    code = error_code(orig)
    text = str(orig.args[1]) if code is not None and len(orig.args) > 1 else str(orig)
    fix = ""
    if code == 1045:
        fix = "; check the user and the password (url, password, passwordFile or passwordEnv)"
    elif code == 1049:
        fix = "; create the database or name an existing one in the URL"
    elif code in (2003, 2002) and not isinstance(orig, TlsRefusedError):
        fix = "; is the server running, and is reconnectTimeoutMs long enough for its restart?"
    return ConnectorError(f"cannot use MariaDB at {cfg.safe_url}: {text}{fix}")


def _check_names(cfg: JdbcSinkConfig, schema: StructType) -> None:
    """PyMySQL fills statement arguments with ``%``: a name holding one cannot be quoted."""
    bad = [n for n in (cfg.schema or "", cfg.table, *schema.fieldNames()) if "%" in n]
    if bad:
        raise InvalidOptionError(f"name {bad[0]!r} holds a '%', which the MariaDB / MySQL dialect cannot "
                                 "quote; rename the table or column (or alias the column)")


def prepare_tables(cfg: JdbcSinkConfig, schema: StructType, need_2pc: bool) -> SqlPlan:
    """Check the server and the target, create what is missing, build the SQL. Driver."""
    _check_names(cfg, schema)
    eng = engine(cfg)
    try:
        with eng.connect() as conn:
            raw = MyConn(conn.connection.dbapi_connection)
            _check_server(cfg, raw, need_2pc)
            insp = sa.inspect(conn)
            if not insp.has_table(cfg.table, schema=cfg.schema):
                if not cfg.create_table:
                    raise InvalidOptionError(
                        f"table {cfg.qualified} does not exist in {cfg.safe_url}; create it, or set "
                        ".option('createTable', 'true') to create it from the DataFrame's schema")
                create_target(conn, cfg, schema, "MariaDB", _create_type, mysql_engine="InnoDB")
            _check_engine(cfg, raw)
            cols = {c["name"]: c for c in insp.get_columns(cfg.table, schema=cfg.schema)}
            check_columns(cfg, schema, cols, _accepts_my)
            if cfg.upsert_keys:
                _check_keys(cfg, insp)
            _create_bookkeeping(raw, cfg)
            conn.commit()
    except (sa.exc.DBAPIError, pymysql.Error) as e:
        raise connect_error(cfg, e) from None
    finally:
        eng.dispose()
    return statements(cfg, schema)


def _check_server(cfg: JdbcSinkConfig, conn: MyConn, need_2pc: bool) -> None:
    """A server whose prepared transactions outlive their session, XA listing allowed to
    this user; no exactly_once leftovers when a weaker guarantee starts."""
    version = str(conn.execute("SELECT VERSION()")[0][0])
    number = tuple(int(p) for p in re.findall(r"\d+", version)[:2])
    if "mariadb" in version.lower():
        if need_2pc and number < (10, 5):
            raise ConnectorError(
                f"MariaDB {version} at {cfg.safe_url} rolls a prepared XA transaction back when its session "
                "ends, so exactly_once cannot hold across a task's end: upgrade to MariaDB 10.5 or later, "
                "or use guarantee at_least_once")
    elif number < (8, 0):
        raise ConnectorError(f"MySQL {version} at {cfg.safe_url}: the sink needs MySQL 8.0 or later "
                             "(window functions for upserts, XA that survives a restart)")
    elif need_2pc and cfg.upsert_keys and conn.execute("SELECT @@global.xa_detach_on_prepare")[0][0]:
        raise ConnectorError(
            f"MySQL at {cfg.safe_url} has xa_detach_on_prepare on, which refuses the temporary staging "
            "table an exactly_once upsert merges from: SET GLOBAL xa_detach_on_prepare = OFF, or use "
            "guarantee at_least_once with upsertKeys (idempotent)")
    try:
        left = prepared_gids(conn, cfg.sink_id, sink_format(cfg))
    except pymysql.Error as e:
        if error_code(e) == ACCESS_DENIED:
            raise ConnectorError(
                f"user {cfg.url.username!r} may not list XA transactions at {cfg.safe_url} (XA RECOVER: "
                f"{e.args[1] if len(e.args) > 1 else e}); the sink finds its in-doubt transactions this "
                f"way. On MySQL 8: GRANT XA_RECOVER_ADMIN ON *.* TO {cfg.url.username!r}") from None
        raise
    if not need_2pc and left:
        raise left_in_doubt(cfg, left)


def _check_engine(cfg: JdbcSinkConfig, conn: MyConn) -> None:
    rows = conn.execute("SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = "
                        "COALESCE(%s, DATABASE()) AND TABLE_NAME = %s", (cfg.schema, cfg.table))
    engine_name = str(rows[0][0]) if rows and rows[0][0] else "a view"
    if cfg.guarantee.value != "none" and engine_name.lower() not in _TRANSACTIONAL:
        raise InvalidOptionError(
            f"table {cfg.qualified} uses storage engine {engine_name}, which cannot roll back or take part "
            f"in XA transactions, so guarantee {cfg.guarantee.value} cannot hold: ALTER TABLE "
            f"{cfg.qualified} ENGINE=InnoDB, or use guarantee none")


def _check_keys(cfg: JdbcSinkConfig, insp: sa.Inspector) -> None:
    keys = set(cfg.upsert_keys)
    pk = insp.get_pk_constraint(cfg.table, schema=cfg.schema).get("constrained_columns") or []
    uniques = [{c for c in i["column_names"] if c} for i in insp.get_indexes(cfg.table, schema=cfg.schema)
               if i.get("unique")]
    if set(pk) != keys and keys not in uniques:
        raise InvalidOptionError(
            f"upsertKeys ({', '.join(cfg.upsert_keys)}) need a primary key or unique index on exactly those "
            f"columns of {cfg.qualified}; create one, e.g. CREATE UNIQUE INDEX sx_keys ON {cfg.qualified} "
            f"({', '.join(cfg.upsert_keys)})")


# Ids compare byte for byte, whatever the database's default collation (a case-insensitive
# one would let two sink ids that differ in case share rows).
_ID = "varchar(64) CHARACTER SET ascii COLLATE ascii_bin"


def _create_bookkeeping(conn: MyConn, cfg: JdbcSinkConfig) -> None:
    """The same three tables as PostgreSQL's (``jdbc.tables._create_bookkeeping``), in InnoDB."""
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {_qualify(cfg, SINKS_TABLE)} (sink_id {_ID} PRIMARY KEY, "
        "target varchar(512) NOT NULL, epoch bigint NOT NULL, "
        "updated_at timestamp(6) NOT NULL DEFAULT current_timestamp(6)) ENGINE=InnoDB")
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {_qualify(cfg, BATCHES_TABLE)} (sink_id {_ID} NOT NULL, "
        f"query_id {_ID} NOT NULL, batch_id bigint NOT NULL, partition_id int NOT NULL, "
        "attempt int NOT NULL, epoch bigint NOT NULL, `rows` bigint, winners longtext, "
        "at timestamp(6) NOT NULL DEFAULT current_timestamp(6), "
        "PRIMARY KEY (sink_id, query_id, batch_id, partition_id, attempt)) ENGINE=InnoDB")
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {_qualify(cfg, LANDED_TABLE)} (sink_id {_ID} NOT NULL, "
        f"query_id {_ID} NOT NULL, batch_id bigint NOT NULL, partition_id int NOT NULL, "
        f"digest {_ID} NOT NULL, `rows` bigint, at timestamp(6) NOT NULL DEFAULT current_timestamp(6), "
        "PRIMARY KEY (sink_id, query_id, batch_id, partition_id, digest)) ENGINE=InnoDB")


def _load(cfg: JdbcSinkConfig, table: str, schema: StructType) -> str:
    """``LOAD DATA LOCAL INFILE %s`` into ``table``; binary columns through ``UNHEX``."""
    cols, sets = [], []
    for i, f in enumerate(schema.fields):
        if isinstance(f.dataType, BinaryType):
            cols.append(f"@b{i}")
            sets.append(f"{_quote(f.name)} = UNHEX(@b{i})")
        else:
            cols.append(_quote(f.name))
    return (f"LOAD DATA LOCAL INFILE %s INTO TABLE {table} CHARACTER SET utf8mb4 FIELDS TERMINATED BY '\\t' "
            f"ESCAPED BY '\\\\' LINES TERMINATED BY '\\n' ({', '.join(cols)})"
            + (f" SET {', '.join(sets)}" if sets else ""))


# Each upsert task's own staging table: a temporary one, seen by its session alone, so tasks
# never scan or lock each other's rows (on one shared table, InnoDB's deletes of a task's
# rows locked the other task's and deadlocked), and gone with the session.
STAGE = "sx_stage"


def statements(cfg: JdbcSinkConfig, schema: StructType) -> SqlPlan:
    """Every statement the dialect's writers run, quoted. Pure: no database access."""
    names = tuple(schema.fieldNames())
    cols = ", ".join(_quote(c) for c in names)
    target, stg = _qualify(cfg, cfg.table), STAGE
    keys = ", ".join(_quote(k) for k in cfg.upsert_keys)
    rest = [c for c in names if c not in cfg.upsert_keys]
    order = "_sx_seq DESC"  # without upsertOrderBy: the last row per key (load order) wins

    def t(c: str) -> str:  # the target's column: the merge's SELECT has one of the same name
        return f"{target}.{_quote(c)}"

    if cfg.upsert_order_by is not None and rest:
        o = cfg.upsert_order_by
        order = f"{_quote(o)} DESC, _sx_seq DESC"  # the greatest version wins in the batch (NULLs last) ...
        newer = f"{t(o)} IS NULL OR VALUES({_quote(o)}) >= {t(o)}"  # ... and against the table
        # Assignments run left to right and later ones see the version already set: the
        # test still holds then (the new version equals itself), so the order is free.
        update = ", ".join(f"{t(c)} = IF({newer}, VALUES({_quote(c)}), {t(c)})" for c in rest)
    elif rest:
        update = ", ".join(f"{t(c)} = VALUES({_quote(c)})" for c in rest)
    else:
        first = t(cfg.upsert_keys[0]) if cfg.upsert_keys else ""
        update = f"{first} = {first}"
    upsert = (f"INSERT INTO {target} ({cols}) SELECT {cols} FROM (SELECT {cols}, ROW_NUMBER() OVER "
              f"(PARTITION BY {keys} ORDER BY {order}) AS _sx_rn FROM {stg}) AS s "
              f"WHERE _sx_rn = 1 ON DUPLICATE KEY UPDATE {update}") if keys else ""
    binary = tuple(f.name for f in schema.fields if isinstance(f.dataType, BinaryType))
    return SqlPlan(
        columns=names,
        binary_columns=binary,
        copy_target=_load(cfg, target, schema),
        copy_staging=_load(cfg, stg, schema) if keys else "",
        upsert_from_staging=upsert,
        clear_staging="",  # the temporary table goes with the task's session
        sinks_table=_qualify(cfg, SINKS_TABLE),
        batches_table=_qualify(cfg, BATCHES_TABLE),
        landed_table=_qualify(cfg, LANDED_TABLE),
        # the target's columns and exact types (a narrower decimal would round), in load order
        stage_setup=(f"DROP TEMPORARY TABLE IF EXISTS {stg}",
                     f"CREATE TEMPORARY TABLE {stg} (_sx_seq bigint NOT NULL AUTO_INCREMENT PRIMARY KEY) "
                     f"ENGINE=InnoDB AS SELECT {cols} FROM {target} LIMIT 0") if keys else (),
    )
