"""The queue source's figures for a running exporter: messages in flight and queue depth.

Driver, in the source's planning process (no query id is known there, so the card is
the queue's, under ``cards.SOURCES``). ``in_flight`` is counted at each plan from what
the source holds: received and not yet in a batch, plus planned and not yet
acknowledged. ``depth`` is the broker's ``MessageCount`` of the queue (in flight
included), asked through the management address on a thread of its own at most every
``EVERY_S``: never a round trip on the batch's path. A user without the ``manage``
permission gets no depth (said once) and everything else as before. Nothing at all is
done unless an exporter made the spool directory on this host.
"""

from __future__ import annotations

import logging
import threading
import time

from spark_ext.connectors.jms.config import JmsSourceConfig
from spark_ext.connectors.jms.session import BrokerSession, ManagementError
from spark_ext.monitoring import cards

log = logging.getLogger(__name__)

EVERY_S = 5.0


class QueueGauges:
    """One per stream reader; ``planned`` after each plan. Never raises into the query."""

    def __init__(self, cfg: JmsSourceConfig) -> None:
        self.cfg = cfg
        dest = cfg.destination
        self.queue = dest.removeprefix("/queue/") if dest.startswith("/queue/") else None  # topics: no depth
        self._depth: int | None = None
        self._asked = 0.0
        self._asking: threading.Thread | None = None
        self._refused = False
        self._in_flight = 0

    def planned(self, in_flight: int) -> None:
        if not cards.root().is_dir():
            return
        now = time.monotonic()
        if (self.queue is not None and not self._refused and now - self._asked >= EVERY_S
                and (self._asking is None or not self._asking.is_alive())):
            self._asked = now
            self._asking = threading.Thread(target=self._ask_depth, name="spark-ext-queue-depth", daemon=True)
            self._asking.start()
        self._write(in_flight)

    def _write(self, in_flight: int) -> None:
        self._in_flight = in_flight
        cards.write_source(f"{self.cfg.host}:{self.cfg.port}{self.cfg.destination}",
                           {"broker": f"{self.cfg.host}:{self.cfg.port}", "queue": self.cfg.destination,
                            "in_flight": in_flight, "depth": self._depth})

    def _ask_depth(self) -> None:
        cfg = self.cfg
        try:
            with BrokerSession(cfg.host, cfg.port, cfg.user, cfg.password, cfg.connect_timeout_s) as s:
                self._depth = int(s.attribute(f"queue.{self.queue}", "MessageCount"))
        except ManagementError as e:
            self._refused = True
            log.info("the queue source reports no queue depth: %s", e)
            return
        except Exception as e:  # noqa: BLE001 - a broker away: the next plan asks again
            log.debug("asking %s for the queue depth failed: %s", cfg.where, e)
            return
        self._write(self._in_flight)
