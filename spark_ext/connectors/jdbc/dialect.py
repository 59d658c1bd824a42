"""What differs between the databases the jdbc sink writes: a ``Dialect`` per database,
asked by the connector for the statements, the tables, the writers, the committer and
the rest (the connector's ``dialect_of(cfg)`` picks it, the one place that reads the
config's dialect name).

PostgreSQL's dialect is here; MariaDB's / MySQL's is ``mariadb.MariaDb``, imported the
first time a sink needs it, with PyMySQL (the ``mysql`` extra).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar, NamedTuple

from pyspark.sql.types import StructType

from spark_ext.connectors.jdbc.committer import JdbcCommitter
from spark_ext.connectors.jdbc.config import JdbcSinkConfig
from spark_ext.connectors.jdbc.routing_log import PgDecisionLog
from spark_ext.connectors.jdbc.tables import JdbcSinkSetup, SqlPlan, prepare_tables, staging_name, statements
from spark_ext.connectors.jdbc.writer import (
    MarkedJdbcWriter,
    MarkedWriter,
    PlainJdbcWriter,
    PlainWriter,
    PreparingJdbcWriter,
    PreparingWriter,
)


class Writers(NamedTuple):
    """A dialect's writer class per guarantee."""

    plain: type[PlainWriter]  # none
    marked: type[MarkedWriter]  # at_least_once
    preparing: type[PreparingWriter]  # exactly_once


class Dialect(ABC):
    """One database's way of doing what the jdbc sink does; stateless, one instance each."""

    name: ClassVar[str]  # ``JdbcSinkConfig.dialect``
    scheme: ClassVar[str]  # the target's description: ``<scheme>://host:port/db table``
    default_port: ClassVar[int]

    @abstractmethod
    def statements(self, cfg: JdbcSinkConfig, schema: StructType) -> SqlPlan:
        """Every statement writers and the committer run, quoted; no database access."""

    @abstractmethod
    def prepare_tables(self, cfg: JdbcSinkConfig, schema: StructType) -> SqlPlan:
        """Check the server and the target, create what is missing (``createTable``, the
        bookkeeping tables), build the statements. Driver, at query start."""

    @abstractmethod
    def writers(self) -> Writers: ...

    @abstractmethod
    def committer(self) -> type[JdbcCommitter]: ...

    def target(self, cfg: JdbcSinkConfig) -> str:
        """The sink's target as the query's progress shows it (no credentials)."""
        url = cfg.url
        return f"{self.scheme}://{url.host}:{url.port or self.default_port}/{url.database} {cfg.qualified}"

    @abstractmethod
    def sets_aside(self, cfg: JdbcSinkConfig) -> str | None:
        """Why this sink cannot set refused rows aside as dead letters (None: it can)."""

    def decision_log(self, setup: JdbcSinkSetup, log_id: str) -> PgDecisionLog | None:
        """Where a routing sink holding this sink keeps its decisions (None: it cannot)."""
        return None


class PostgreSql(Dialect):
    name = "postgresql"
    scheme = "postgresql"
    default_port = 5432

    def statements(self, cfg: JdbcSinkConfig, schema: StructType) -> SqlPlan:
        # the commit runner's plan: its committer needs no staging table
        return statements(cfg, schema, staging_name(cfg, ""))

    def prepare_tables(self, cfg: JdbcSinkConfig, schema: StructType) -> SqlPlan:
        return prepare_tables(cfg, schema, need_2pc=cfg.guarantee.transactional)

    def writers(self) -> Writers:
        return Writers(PlainJdbcWriter, MarkedJdbcWriter, PreparingJdbcWriter)

    def committer(self) -> type[JdbcCommitter]:
        return JdbcCommitter

    def sets_aside(self, cfg: JdbcSinkConfig) -> str | None:
        if cfg.upsert_keys:
            return ("the jdbc sink sets refused rows aside when it appends; with upsertKeys its rows are "
                    "merged as a whole (not yet row by row): drop upsertKeys or the dead-letter options")
        return None

    def decision_log(self, setup: JdbcSinkSetup, log_id: str) -> PgDecisionLog | None:
        return PgDecisionLog(setup, log_id)


POSTGRESQL = PostgreSql()

