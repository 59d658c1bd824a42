"""Prometheus metrics of a driver's streaming queries: ``serve(spark)`` and scrape.

    from spark_ext import monitoring
    monitoring.serve(spark, port=9108)     # before or after the queries start

or, for a job that cannot be edited, from configuration alone: the companion jar's
``StreamingQueryListener`` (``LISTENER``), which Spark starts from its settings and which
serves the same metrics from the driver's JVM (a Spark Connect server's too)::

    spark-submit --packages dev.sparkext:spark-ext-native_2.13:VERSION \
      --conf spark.sql.streaming.streamingQueryListeners=dev.sparkext.monitoring.MetricsListener \
      --conf spark.sparkext.metrics.port=9108 job.py

Without the listener, ``spark.sparkext.metrics.port`` still starts this module's exporter
when the job calls ``spark_ext.register(spark)``; with it, the JVM serves that port and
``register`` starts nothing.

Driver only, in the driver's Python process: it registers a ``StreamingQueryListener``
(every query of the session: Spark's progress, watermark, state, each Kafka source's lag
per partition) and serves ``http://<addr>:<port>/metrics``, where each sink's own figures
(last committed batch, rows, decide and commit milliseconds, dead letters) join them from
the cards its commit worker writes (``cards``). The names, labels and meanings are in
``metrics.METRICS`` (and the docs' metrics page, generated from it). Credentials and
option values are never exported: labels are query names and ids, sink labels (the sink's
id), topics and partitions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spark_ext.errors import ConfigurationError


@dataclass
class Exporter:
    """A running exporter: its address, and ``stop`` to end it (the HTTP server and the listener)."""

    addr: str
    port: int
    _server: Any
    _thread: Any
    _spark: Any
    _watcher: Any

    @property
    def url(self) -> str:
        return f"http://{self.addr}:{self.port}/metrics"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
        self._spark.streams.removeListener(self._watcher)
        global _configured
        if _configured is self:
            for other in _watched.values():
                other.streams.removeListener(self._watcher)
            _configured = None
            _watched.clear()


CONF_PORT = "spark.sparkext.metrics.port"
CONF_ADDR = "spark.sparkext.metrics.addr"
CONF_LISTENERS = "spark.sql.streaming.streamingQueryListeners"
#: The companion jar's listener: named in ``CONF_LISTENERS``, it serves the metrics itself.
LISTENER = "dev.sparkext.monitoring.MetricsListener"
_configured: Exporter | None = None  # the one exporter the settings started in this process
_watched: dict[int, Any] = {}  # id() -> each other session whose queries it watches


def serve_configured(spark: Any) -> Exporter | None:
    """Start the exporter ``spark.sparkext.metrics.port`` asks for (None without the
    setting, or when the companion jar's ``LISTENER`` is configured and serves the port
    from the JVM). One per process: a later session (``spark.newSession()`` inherits the
    setting) joins the running exporter instead of binding the port again. Raises
    ``ConfigurationError`` naming the setting for a value that is not a port, or a port
    another process holds."""
    global _configured
    port = spark.conf.get(CONF_PORT, None)
    if port is None or not str(port).strip():
        return None
    if LISTENER in [c.strip() for c in (spark.conf.get(CONF_LISTENERS, None) or "").split(",")]:
        return None
    if _configured is not None:
        if spark is not _configured._spark and id(spark) not in _watched:
            spark.streams.addListener(_configured._watcher)
            _watched[id(spark)] = spark
        return _configured
    try:
        number = int(str(port).strip())
        if not 0 <= number <= 65535:
            raise ValueError
    except ValueError:
        raise ConfigurationError(f"{CONF_PORT}={port!r} is not a port: give 0-65535 (0: any free port), or "
                                 "unset it to serve no metrics") from None
    addr = spark.conf.get(CONF_ADDR, None) or "127.0.0.1"
    try:
        _configured = serve(spark, number, addr)
    except ConfigurationError as e:
        raise ConfigurationError(f"{e} (set by {CONF_PORT} / {CONF_ADDR}: each job on a host needs a port "
                                 "of its own)") from None
    return _configured


def serve(spark: Any, port: int = 9108, addr: str = "127.0.0.1") -> Exporter:
    """Serve the metrics of ``spark``'s streaming queries on ``addr:port`` (``port=0``:
    any free port, see ``Exporter.port``). Raises ``ConfigurationError`` naming the port
    when it is taken. Driver only."""
    try:
        from prometheus_client import CollectorRegistry, start_http_server
    except ImportError:
        raise ConfigurationError("spark_ext.monitoring needs prometheus_client: pip install "
                                 "'spark-ext[monitoring]'") from None
    from spark_ext.monitoring import cards
    from spark_ext.monitoring.exporter import Families, QueryWatcher

    watcher = QueryWatcher()
    registry = CollectorRegistry(auto_describe=True)
    registry.register(Families(watcher))
    cards.root().mkdir(mode=0o700, parents=True, exist_ok=True)  # sinks write cards from now on
    try:
        server, thread = start_http_server(port, addr=addr, registry=registry)
    except OSError as e:
        raise ConfigurationError(f"cannot serve metrics on {addr}:{port} ({e.strerror or e}): the port is "
                                 "taken or the address is not this host's; pass another port= (0: any free "
                                 "one) or addr=") from None
    spark.streams.addListener(watcher)
    for q in spark.streams.active:  # queries started before the exporter: known from their next progress
        watcher.queries.setdefault(str(q.id), _state(q.name))
    bound = int(server.server_address[1])
    return Exporter(addr, bound, server, thread, spark, watcher)


def _state(name: str | None) -> Any:
    from spark_ext.monitoring.exporter import QueryState

    return QueryState(name or "")


__all__ = ["CONF_ADDR", "CONF_LISTENERS", "CONF_PORT", "LISTENER", "Exporter", "serve", "serve_configured"]
