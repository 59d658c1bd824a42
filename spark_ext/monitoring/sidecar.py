"""``spark-ext status <connector> ... --serve PORT``: the sinks' own state as Prometheus
metrics, from a process of its own.

The driver's exporter (``serve``) dies with the driver, which is when its sinks' state
matters most: a batch decided and not finished, transactions in doubt. This one reads
what ``spark-ext status`` reads (the sink's decision records, the system's prepared or
open transactions, the fencing epoch) from the external system at every scrape, so it
sees a crashed query's sinks, and the restart that finishes them; with ``--checkpoint``
(Kafka) also the query's source lag, which grows while the query is down. It holds no
connection between scrapes; a read that fails is ``spark_ext_status_up 0``, not an HTTP
error, so an alert can tell "the database is away" from "the exporter is away".
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from spark_ext.monitoring.metrics import BY_NAME
from spark_ext.status import SinkStatus, SourceLag


class StatusFamilies:
    """One read of the sinks per scrape."""

    def __init__(self, connector: str, read: Callable[[], list[SinkStatus]],
                 lag: Callable[[], list[SourceLag] | None] | None = None) -> None:
        self.connector, self.read, self.lag = connector, read, lag
        self._failing = False

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        fam = {n: GaugeMetricFamily(n, BY_NAME[n].help, labels=list(BY_NAME[n].labels))
               for n in BY_NAME if n.startswith("spark_ext_status_")}
        # Read apart: a broker that cannot answer the lag leaves the sinks' rows served.
        rows = self._read("sinks", self.read)
        lags = self._read("source lag", self.lag) if self.lag is not None else []
        ok = rows is not None and lags is not None
        if ok and self._failing:
            print(f"reading the {self.connector} sinks works again", file=sys.stderr, flush=True)
        self._failing = not ok
        fam["spark_ext_status_up"].add_metric([self.connector], 1 if ok else 0)
        for r in rows or []:
            labels = [self.connector, r.sink, r.target or ""]
            fam["spark_ext_status_in_doubt"].add_metric(labels, r.in_doubt)
            for name, value in (("last_batch", r.batch), ("epoch", r.epoch), ("dead_letters", r.dead_letters),
                                ("finished", None if r.finished is None else int(r.finished))):
                if value is not None:
                    fam[f"spark_ext_status_{name}"].add_metric(labels, value)
        for g in lags or []:
            fam["spark_ext_status_lag_records"].add_metric(
                [self.connector, str(g.source), g.topic, str(g.partition)], g.lag)
        yield from fam.values()

    def _read(self, what: str, read: Callable[[], Any]) -> Any:
        """``read()``, or None when it failed (said once per outage: a wrong password and a
        system that is down read differently here)."""
        try:
            return read() or []
        except Exception as e:  # noqa: BLE001 - reported as a sample; the next scrape tries again
            if not self._failing:
                first = (str(e).strip().splitlines() or [""])[0]
                print(f"error: reading the {self.connector} {what} failed: {type(e).__name__}: {first}",
                      file=sys.stderr, flush=True)
            return None


def serve_status(connector: str, read: Callable[[], list[SinkStatus]], port: int, addr: str,
                 lag: Callable[[], list[SourceLag] | None] | None = None) -> int:
    """Serve until SIGINT or SIGTERM; prints the URL first (``port=0``: any free port)."""
    try:
        from prometheus_client import CollectorRegistry, start_http_server
    except ImportError:
        print("error: --serve needs prometheus_client: pip install 'spark-ext[monitoring]'", file=sys.stderr)
        return 1

    registry = CollectorRegistry(auto_describe=False)
    registry.register(StatusFamilies(connector, read, lag))
    try:
        server, thread = start_http_server(port, addr=addr, registry=registry)
    except OSError as e:
        print(f"error: cannot serve metrics on {addr}:{port} ({e.strerror or e}); pass another --serve port",
              file=sys.stderr)
        return 1
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    bound = server.server_address[1]
    print(f"serving {connector} sinks' status on http://{addr}:{bound}/metrics", flush=True)
    stop.wait()
    server.shutdown()
    thread.join(5)
    return 0
