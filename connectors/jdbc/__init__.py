"""PostgreSQL sinks: 2PC exactly-once and idempotent MERGE (placeholder for now)."""

from spark_ext.connector import NotBuiltSink


class JdbcSink(NotBuiltSink):
    name = "jdbc"
