"""PostgreSQL, MariaDB and MySQL sink: ``hzsink`` connector ``jdbc`` (2PC exactly-once,
upsert, bulk load). The URL picks the dialect; the ``mariadb`` package is MariaDB's / MySQL's.

- ``config``: options -> ``JdbcSinkConfig``;
- ``tables``: the target and bookkeeping tables, the SQL (``JdbcSinkSetup``);
- ``transactions``: transaction names, connections, in-doubt queries (shared);
- ``writer``: executor side, one prepared transaction per task (step 3);
- ``committer``: driver side, take-over, decision, commit, abort (steps 1, 4, 5);
- ``doctor``: operator tool, ``spark-ext doctor jdbc list|resolve``.

The protocol's steps are those of ``spark_ext.commit``.
"""

from __future__ import annotations

from pyspark.sql.types import StructType

from spark_ext.commit import Claim, SinkWriter
from spark_ext.connector import SinkConnector
from spark_ext.connectors.jdbc.committer import JdbcCommitter
from spark_ext.connectors.jdbc.config import SINK_OPTIONS, JdbcSinkConfig
from spark_ext.connectors.jdbc.routing_log import PgDecisionLog
from spark_ext.connectors.jdbc.tables import JdbcSinkSetup, prepare_tables, staging_name, statements
from spark_ext.connectors.jdbc.transactions import JdbcCommittable
from spark_ext.connectors.jdbc.writer import (
    MarkedJdbcWriter,
    PlainJdbcWriter,
    PreparingJdbcWriter,
)
from spark_ext.guarantees import Guarantee
from spark_ext.options import Options

__all__ = ["JdbcSink"]


class JdbcSink(SinkConnector[JdbcSinkSetup]):
    """``df.writeStream.format("hzsink").option("connector", "jdbc")``."""

    name = "jdbc"
    option_spec = SINK_OPTIONS

    def configure(self, options: Options, schema: StructType, guarantee: Guarantee) -> JdbcSinkSetup:
        cfg = JdbcSinkConfig.parse(options, guarantee)
        # the commit runner's plan: its committer needs no staging table
        if cfg.dialect == "mysql":
            from spark_ext.connectors.jdbc.mariadb import tables as mysql_tables

            return JdbcSinkSetup(cfg, mysql_tables.statements(cfg, schema))
        return JdbcSinkSetup(cfg, statements(cfg, schema, staging_name(cfg, "")))

    def validate(self, config: JdbcSinkSetup, schema: StructType) -> JdbcSinkSetup:
        """Step 1: the database can prepare transactions, the table fits the DataFrame;
        creates the target (``createTable``), bookkeeping and staging tables."""
        cfg = config.cfg
        if cfg.dialect == "mysql":
            from spark_ext.connectors.jdbc.mariadb import tables as mysql_tables

            return JdbcSinkSetup(cfg, mysql_tables.prepare_tables(cfg, schema, cfg.guarantee.transactional))
        sql = prepare_tables(cfg, schema, need_2pc=cfg.guarantee.transactional)
        return JdbcSinkSetup(cfg, sql)

    def new_writer(self, config: JdbcSinkSetup, claim: Claim[int] | None) -> SinkWriter[JdbcCommittable]:
        """A writer per guarantee: prepared transactions, marked commits, or plain commits."""
        if config.cfg.dialect == "mysql":
            from spark_ext.connectors.jdbc.mariadb import writer as my

            if config.cfg.guarantee is Guarantee.EXACTLY_ONCE:
                assert claim is not None, "exactly_once plans take the sink over first"
                return my.MyPreparingWriter(config, claim.fence)
            if config.cfg.guarantee is Guarantee.AT_LEAST_ONCE:
                return my.MyMarkedWriter(config)
            return my.MyPlainWriter(config)
        if config.cfg.guarantee is Guarantee.EXACTLY_ONCE:
            assert claim is not None, "exactly_once plans take the sink over first"
            return PreparingJdbcWriter(config, claim.fence)
        if config.cfg.guarantee is Guarantee.AT_LEAST_ONCE:
            return MarkedJdbcWriter(config)
        return PlainJdbcWriter(config)

    def sets_aside(self, config: JdbcSinkSetup) -> str | None:
        if config.cfg.dialect == "mysql":
            return ("the jdbc sink does not yet set refused rows aside on MariaDB / MySQL (PostgreSQL only): "
                    "drop the dead-letter options, or write to PostgreSQL")
        if config.cfg.upsert_keys:
            return ("the jdbc sink sets refused rows aside when it appends; with upsertKeys its rows are "
                    "merged as a whole (not yet row by row): drop upsertKeys or the dead-letter options")
        return None

    def new_committer(self, config: JdbcSinkSetup) -> JdbcCommitter:
        if config.cfg.dialect == "mysql":
            from spark_ext.connectors.jdbc.mariadb.committer import MyJdbcCommitter

            return MyJdbcCommitter(config)
        return JdbcCommitter(config)

    def target(self, config: JdbcSinkSetup) -> str:
        url = config.cfg.url
        if config.cfg.dialect == "mysql":
            return f"mysql://{url.host}:{url.port or 3306}/{url.database} {config.cfg.qualified}"
        return f"postgresql://{url.host}:{url.port or 5432}/{url.database} {config.cfg.qualified}"

    def decision_log(self, config: JdbcSinkSetup, log_id: str) -> PgDecisionLog | None:
        if config.cfg.dialect == "mysql":
            return None  # a routing sink's decisions live in PostgreSQL (or Kafka), not yet MariaDB
        return PgDecisionLog(config, log_id)
