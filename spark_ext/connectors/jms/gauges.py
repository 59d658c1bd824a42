"""The queue source's figures for a running exporter: messages in flight and queue depth.

Driver, in the source's planning process (no query id is known there, so the card is
the queue's, under ``cards.SOURCES``). ``in_flight`` is counted at each plan from what
the source holds: received and not yet in a batch, plus planned and not yet
acknowledged. ``depth`` is the broker's ``MessageCount`` of the queue (in flight
included), asked through the management address by a thread of its own every
``EVERY_S``, which also renews the card, so a batch or trigger longer than the
exporter's staleness limit keeps its series: never a round trip on the batch's path. A
user without the ``manage`` permission gets no depth (said once) and the rest as before.
Nothing at all is done unless an exporter made the spool directory on this host.
"""

from __future__ import annotations

import logging
import threading

from spark_ext.connectors.jms.config import JmsSourceConfig
from spark_ext.connectors.jms.session import BrokerSession, ManagementRefusedError
from spark_ext.monitoring import cards
from spark_ext.secrets import reveal

log = logging.getLogger(__name__)

EVERY_S = 5.0


class QueueGauges:
    """One per stream reader: ``planned`` after each plan, ``close`` at the reader's stop.
    Never raises into the query."""

    def __init__(self, cfg: JmsSourceConfig) -> None:
        self.cfg = cfg
        dest = cfg.destination
        self.queue = dest.removeprefix("/queue/") if dest.startswith("/queue/") else None  # topics: no depth
        self._lock = threading.Lock()  # the card's two figures, and its writes, from two threads
        self._in_flight: int | None = None
        self._depth: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def planned(self, in_flight: int) -> None:
        try:
            if not cards.root().is_dir():
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._renew, name="spark-ext-gauges", daemon=True)
                self._thread.start()
            with self._lock:
                if in_flight != self._in_flight:  # an idle queue plans often: write only what changed
                    self._in_flight = in_flight
                    self._write()
        except Exception as e:  # noqa: BLE001 - figures for a dashboard never fail a plan
            log.debug("the queue source's metrics card: %s", e)

    def close(self) -> None:
        self._stop.set()

    def _write(self) -> None:
        """Under ``_lock``: both threads write the latest of both figures, never a stale one."""
        cards.write_source(f"{self.cfg.host}:{self.cfg.port}{self.cfg.destination}",
                           {"broker": f"{self.cfg.host}:{self.cfg.port}", "queue": self.cfg.destination,
                            "in_flight": self._in_flight, "depth": self._depth})

    def _renew(self) -> None:
        asking = self.queue is not None
        while not self._stop.is_set():
            depth = self._ask_depth() if asking else None
            if depth is False:
                asking = False
            with self._lock:
                if isinstance(depth, int) and not isinstance(depth, bool):
                    self._depth = depth
                self._write()
            self._stop.wait(EVERY_S)

    def _ask_depth(self) -> int | bool | None:
        """The queue's message count; False when the broker refuses (never asked again);
        None when it could not be read this time."""
        cfg = self.cfg
        try:
            with BrokerSession(cfg.host, cfg.port, cfg.user, reveal(cfg.password), cfg.connect_timeout_s,
                               cfg.tls) as s:
                return int(s.attribute(f"queue.{self.queue}", "MessageCount"))
        except ManagementRefusedError as e:
            log.info("the queue source reports no queue depth: %s", e)
            return False
        except Exception as e:  # noqa: BLE001 - a broker away, a queue not there yet: ask again later
            log.debug("asking %s for the queue depth failed: %s", cfg.where, e)
            return None
