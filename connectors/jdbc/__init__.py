"""PostgreSQL sink: ``hzsink`` connector ``jdbc`` (2PC exactly-once, upsert, COPY)."""

from __future__ import annotations

from functools import partial

from pyspark.sql.types import StructType

from connectors.jdbc.committer import JdbcCommitter
from connectors.jdbc.config import SINK_OPTIONS, JdbcSinkConfig
from connectors.jdbc.tables import prepare_tables, statements
from connectors.jdbc.writer import JdbcWriter, WriterConfig
from spark_ext.commit import NoOpCommitter, SinkPlan
from spark_ext.connector import SinkConnector
from spark_ext.guarantees import Guarantee
from spark_ext.options import Options

__all__ = ["JdbcSink"]


class JdbcSink(SinkConnector):
    """``df.writeStream.format("hzsink").option("connector", "jdbc")``."""

    name = "jdbc"
    option_spec = SINK_OPTIONS

    def plan(self, options: Options, schema: StructType, guarantee: Guarantee, *,
             prepare: bool = True) -> SinkPlan:
        """Driver. ``prepare`` (before each batch): check the table, resolve in-doubt
        transactions, claim the sink (new epoch). Otherwise (commit/abort): options only."""
        cfg = JdbcSinkConfig.parse(options, guarantee)
        exactly = guarantee is Guarantee.EXACTLY_ONCE
        if not prepare:
            # The committer takes the epoch from the transactions it commits.
            wc = WriterConfig(cfg, statements(cfg, schema), guarantee, epoch=0)
            return SinkPlan(guarantee, partial(JdbcWriter, wc),
                            partial(JdbcCommitter, wc) if exactly else NoOpCommitter)
        sql = prepare_tables(cfg, schema, need_2pc=exactly)
        epoch = JdbcCommitter(WriterConfig(cfg, sql, guarantee, 0)).take_over() if exactly else 0
        wc = WriterConfig(cfg, sql, guarantee, epoch)
        return SinkPlan(
            guarantee=guarantee,
            new_writer=partial(JdbcWriter, wc),
            new_committer=partial(JdbcCommitter, wc) if exactly else NoOpCommitter,
        )
