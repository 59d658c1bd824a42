"""The two Spark data sources, ``hzsource`` and ``hzsink``, and connector dispatch.

Spark builds these objects in a Python worker on the driver: ``schema`` runs at
``load()``, ``streamReader`` / ``streamWriter`` when the query starts. Every option
check and every connection to an external system's metadata happens there, so bad
input fails on the driver with a clear message instead of as an executor stack trace.
The readers and writers they return are pickled to executors.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from spark_ext import compat, registry
from spark_ext.connector import SinkConnector, SourceConnector
from spark_ext.errors import ConfigurationError, SparkExtError
from spark_ext.guarantees import Guarantee
from spark_ext.options import Options
from spark_ext.shipping import Shipped
from spark_ext.stream import ProtocolStreamWriter


class HzSource(Shipped, DataSource):
    """``spark.readStream.format("hzsource").option("connector", ...)``."""

    @classmethod
    def name(cls) -> str:
        return "hzsource"

    def _connector(self) -> tuple[SourceConnector, Options]:
        opts = Options(self.options, "hzsource")
        cls = registry.load(registry.SOURCES, opts.get_str("connector"), "hzsource")
        conn = cls()  # type: ignore[operator]
        assert isinstance(conn, SourceConnector)
        conn.check(opts)
        return conn, opts

    def schema(self) -> StructType:
        """Driver, at ``load()``: the connector's output schema."""
        conn, opts = self._connector()
        return conn.schema(opts)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """Driver, at query start: the connector's micro-batch reader."""
        conn, opts = self._connector()
        return conn.stream_reader(opts, schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        """Driver, at ``spark.read...load()``: a batch reader where the connector has one."""
        conn, opts = self._connector()
        return conn.reader(opts, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        raise ConfigurationError("'hzsource' is a source; to write a stream use format('hzsink')")

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        raise ConfigurationError("'hzsource' is a source; to write use format('hzsink')")


class HzSink(Shipped, DataSource):
    """``df.writeStream.format("hzsink").option("connector", ...)``."""

    @classmethod
    def name(cls) -> str:
        return "hzsink"

    def schema(self) -> StructType:
        raise ConfigurationError("'hzsink' is a sink; to read a stream use format('hzsource')")

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """Driver, twice per micro-batch: in the planning worker, then in the commit
        worker (each one Python process reused from batch to batch).

        Spark builds the writer before each batch's tasks (``prepare``: check options and
        the external system, resolve in-doubt transactions) and again to run that batch's
        ``commit`` / ``abort`` (only the committer is needed; no side effects allowed,
        since the batch's transactions are prepared and waiting).
        """
        conn, opts = _sink(Options(self.options, "hzsink"))
        with _users_words(opts):
            guarantee = Guarantee.parse(opts.get_str("guarantee"), conn.default_guarantee)
            conn.check(opts, guarantee)
            plan = conn.plan(opts, schema, guarantee, prepare=not compat.in_commit_runner())
        return ProtocolStreamWriter(plan)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """Driver, once per ``save()`` (in the planning worker): a batch write, meant for
        ``foreachBatch`` (``spark_ext.batch``). Exactly-once is per micro-batch, so it needs
        the sink's own id; the batch and query ids come from the tasks or the options."""
        from spark_ext import batch

        if overwrite:
            raise ConfigurationError("hzsink appends (or upserts) each micro-batch: use mode('append')")
        given = Options(self.options, "hzsink")
        identity = batch.BatchIdentity.parse(given)
        conn, opts = _sink(batch.without_batch_options(given))
        with _users_words(opts):
            guarantee = Guarantee.parse(opts.get_str("guarantee"), conn.default_guarantee)
            conn.check(opts, guarantee)
            sink_id = (batch.require_sink_id(opts, conn.id_option, conn.name) if guarantee.transactional
                       else None)
            plan = conn.plan(opts, schema, guarantee, prepare=True)
        return batch.ProtocolBatchWriter(plan, identity, sink_id)


@contextmanager
def _users_words(opts: Options) -> Iterator[None]:
    """Errors of a sink with dead letters name the options the user wrote, not the
    routing sink they were composed into (``deadletters.in_users_words``)."""
    from spark_ext import deadletters

    try:
        yield
    except SparkExtError as e:
        if opts.get_str("deadletters") != deadletters.COMPOSED:
            raise
        raise deadletters.in_users_words(e) from e.__cause__


def _sink(opts: Options) -> tuple[SinkConnector, Options]:
    """The sink's connector and options; with ``deadLetter.*`` options, the routing sink
    that writes the sink and its dead letters under one decision (``spark_ext.deadletters``)."""
    from spark_ext import deadletters

    conn = registry.load(registry.SINKS, opts.get_str("connector"), "hzsink")()  # type: ignore[operator]
    assert isinstance(conn, SinkConnector)
    if deadletters.has_dead_letters(opts):
        opts = deadletters.compose(opts, conn.id_option)
        conn = registry.load(registry.SINKS, "routing", "hzsink")()  # type: ignore[operator]
        assert isinstance(conn, SinkConnector)
    return conn, opts
