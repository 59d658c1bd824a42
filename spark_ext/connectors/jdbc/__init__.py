"""PostgreSQL, MariaDB and MySQL sink: ``hzsink`` connector ``jdbc`` (2PC exactly-once,
upsert, bulk load). The URL picks the dialect (``dialect``); the ``mariadb`` package is
MariaDB's / MySQL's, the modules here PostgreSQL's and what both share.

- ``config``: options -> ``JdbcSinkConfig``;
- ``dialect``: ``Dialect``, what differs between the databases, and PostgreSQL's;
- ``tables``: the target and bookkeeping tables, the SQL (``JdbcSinkSetup``);
- ``transactions``: transaction names, reconnecting (shared); connections, in-doubt queries;
- ``writer``: executor side, a protocol per guarantee, one transaction per task (step 3);
- ``committer``: driver side, take-over, decision, commit, abort (steps 1, 4, 5);
- ``routing_log``: a routing sink's decisions, kept in PostgreSQL;
- ``doctor`` (``mariadb.doctor``): operator tool, ``spark-ext doctor jdbc list|resolve``.

The protocol's steps are those of ``spark_ext.commit``.
"""

from __future__ import annotations

from pyspark.sql.types import StructType

from spark_ext.commit import Claim, SinkWriter
from spark_ext.connector import SinkConnector
from spark_ext.connectors.jdbc.committer import JdbcCommitter
from spark_ext.connectors.jdbc.config import SINK_OPTIONS, JdbcSinkConfig
from spark_ext.connectors.jdbc.dialect import POSTGRESQL, Dialect
from spark_ext.connectors.jdbc.routing_log import PgDecisionLog
from spark_ext.connectors.jdbc.tables import JdbcSinkSetup
from spark_ext.connectors.jdbc.transactions import JdbcCommittable
from spark_ext.decisions import KeepsDecisions
from spark_ext.guarantees import Guarantee
from spark_ext.options import Options

__all__ = ["JdbcSink", "dialect_of"]


def dialect_of(cfg: JdbcSinkConfig) -> Dialect:
    """The dialect of the sink's URL."""
    if cfg.dialect == POSTGRESQL.name:
        return POSTGRESQL
    from spark_ext.connectors.jdbc.mariadb import MARIADB  # PyMySQL: the mysql extra

    assert cfg.dialect == MARIADB.name, cfg.dialect
    return MARIADB


class JdbcSink(SinkConnector[JdbcSinkSetup], KeepsDecisions):
    """``df.writeStream.format("hzsink").option("connector", "jdbc")``."""

    name = "jdbc"
    option_spec = SINK_OPTIONS

    def configure(self, options: Options, schema: StructType, guarantee: Guarantee) -> JdbcSinkSetup:
        cfg = JdbcSinkConfig.parse(options, guarantee)
        # the commit runner's plan: its committer needs no staging table
        return JdbcSinkSetup(cfg, dialect_of(cfg).statements(cfg, schema))

    def validate(self, config: JdbcSinkSetup, schema: StructType) -> JdbcSinkSetup:
        """Step 1: the database can prepare transactions, the table fits the DataFrame;
        creates the target (``createTable``), bookkeeping and staging tables."""
        cfg = config.cfg
        return JdbcSinkSetup(cfg, dialect_of(cfg).prepare_tables(cfg, schema))

    def new_writer(self, config: JdbcSinkSetup, claim: Claim[int] | None) -> SinkWriter[JdbcCommittable]:
        """A writer per guarantee: prepared transactions, marked commits, or plain commits."""
        writers = dialect_of(config.cfg).writers()
        if config.cfg.guarantee is Guarantee.EXACTLY_ONCE:
            assert claim is not None, "exactly_once plans take the sink over first"
            return writers.preparing(config, claim.fence)
        if config.cfg.guarantee is Guarantee.AT_LEAST_ONCE:
            return writers.marked(config)
        return writers.plain(config)

    def sets_aside(self, config: JdbcSinkSetup) -> str | None:
        return dialect_of(config.cfg).sets_aside(config.cfg)

    def new_committer(self, config: JdbcSinkSetup) -> JdbcCommitter:
        return dialect_of(config.cfg).committer()(config)

    def target(self, config: JdbcSinkSetup) -> str:
        return dialect_of(config.cfg).target(config.cfg)

    def decision_log(self, config: JdbcSinkSetup, log_id: str) -> PgDecisionLog | None:
        """The sink's PostgreSQL database; None on MariaDB / MySQL, which cannot hold a routing
        sink's decisions yet."""
        return dialect_of(config.cfg).decision_log(config, log_id)
