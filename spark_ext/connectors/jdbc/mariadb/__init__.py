"""The jdbc sink's MariaDB / MySQL dialect (a ``mysql+pymysql`` or ``jdbc:mariadb:`` /
``jdbc:mysql:`` URL), over PyMySQL (the ``mysql`` extra): ``MariaDb``, the connector's
``Dialect`` for these servers, and its modules, each imported when first used:

- ``transactions``: connections, XA transaction ids, the queries that find and finish
  in-doubt transactions;
- ``tables``: the server and the target checked, the bookkeeping tables, the SQL;
- ``writer``: executor side, one XA transaction per task;
- ``committer``: driver side, the jdbc committer's protocol over XA.

What both dialects share (transaction names, the commit message, the protocols of the
writers and the committer) is in ``jdbc.transactions``, ``jdbc.writer`` and
``jdbc.committer``; the doctor is ``doctor`` (``spark-ext doctor jdbc`` with a MariaDB URL).
"""

from __future__ import annotations

from pyspark.sql.types import StructType

from spark_ext.connectors.jdbc.committer import JdbcCommitter
from spark_ext.connectors.jdbc.config import JdbcSinkConfig
from spark_ext.connectors.jdbc.dialect import Dialect, Writers
from spark_ext.connectors.jdbc.tables import SqlPlan

__all__ = ["MARIADB", "MariaDb"]


class MariaDb(Dialect):
    """MariaDB (10.5 or later for exactly_once) and MySQL 8.0 or later."""

    name = "mysql"
    scheme = "mysql"
    default_port = 3306

    def statements(self, cfg: JdbcSinkConfig, schema: StructType) -> SqlPlan:
        from spark_ext.connectors.jdbc.mariadb import tables

        return tables.statements(cfg, schema)

    def prepare_tables(self, cfg: JdbcSinkConfig, schema: StructType) -> SqlPlan:
        from spark_ext.connectors.jdbc.mariadb import tables

        return tables.prepare_tables(cfg, schema, cfg.guarantee.transactional)

    def writers(self) -> Writers:
        from spark_ext.connectors.jdbc.mariadb import writer

        return Writers(writer.MyPlainWriter, writer.MyMarkedWriter, writer.MyPreparingWriter)

    def committer(self) -> type[JdbcCommitter]:
        from spark_ext.connectors.jdbc.mariadb.committer import MyJdbcCommitter

        return MyJdbcCommitter

    def sets_aside(self, cfg: JdbcSinkConfig) -> str | None:
        return ("the jdbc sink does not yet set refused rows aside on MariaDB / MySQL (PostgreSQL only): "
                "drop the dead-letter options, or write to PostgreSQL")

    # decision_log: none; a routing sink's decisions live in PostgreSQL only, not yet in MariaDB


MARIADB = MariaDb()
