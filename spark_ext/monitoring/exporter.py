"""The driver's exporter: Spark's query events and the sinks' cards as Prometheus families.

``QueryWatcher`` is a ``StreamingQueryListener``: Spark calls it on the driver (in the
driver's Python process, from Spark's listener bus) with every query's start, progress,
idle trigger and end; it keeps the last progress of each query and nothing else. A scrape
(``Families.collect``, on the HTTP server's thread) turns that and the sinks' cards into
metric families: nothing is measured on the batch's path.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from pyspark.sql.streaming import StreamingQueryListener

from spark_ext.monitoring import cards
from spark_ext.monitoring.metrics import BY_NAME
from spark_ext.status.checkpoint import kafka_offsets

SOURCE_CARD_AGE_S = 300.0  # a queue source's card is renewed every 5 s while its reader lives


@dataclass
class QueryState:
    """What the exporter knows of one query (by its id, stable across restarts)."""

    name: str
    progress: dict[str, Any] | None = None
    seen: float = field(default_factory=time.time)  # wall clock of the last event
    active: bool = True
    failed: bool = False


class QueryWatcher(StreamingQueryListener):
    """Keeps each query's last progress. Runs on Spark's listener thread: cheap, never raises."""

    def __init__(self) -> None:
        self.queries: dict[str, QueryState] = {}
        self.lock = threading.Lock()

    def onQueryStarted(self, event: Any) -> None:
        with self.lock:
            self.queries[str(event.id)] = QueryState(event.name or "")

    def onQueryProgress(self, event: Any) -> None:
        progress = json.loads(event.progress.json)
        with self.lock:
            state = self.queries.setdefault(str(progress["id"]), QueryState(progress.get("name") or ""))
            state.progress, state.seen, state.active = progress, time.time(), True

    def onQueryIdle(self, event: Any) -> None:
        with self.lock:
            state = self.queries.get(str(event.id))
            if state is not None:
                state.seen = time.time()

    def onQueryTerminated(self, event: Any) -> None:
        with self.lock:
            state = self.queries.get(str(event.id))
            if state is not None:
                state.active, state.failed = False, event.exception is not None


def _family(name: str) -> GaugeMetricFamily | CounterMetricFamily:
    m = BY_NAME[name]
    cls = CounterMetricFamily if m.kind == "counter" else GaugeMetricFamily
    # prometheus_client adds "_total" to a counter's samples itself
    return cls(name.removesuffix("_total"), m.help, labels=list(m.labels))


def _offsets(value: Any) -> Any:
    """A progress's offsets: JSON text in one place, already parsed in another."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def _lags(offsets_end: Any, offsets_latest: Any) -> dict[tuple[str, str], int]:
    """Per (topic, partition): latest minus end, for a Kafka source's offsets ({topic: {p: n}})."""
    end, latest = kafka_offsets(_offsets(offsets_end)), kafka_offsets(_offsets(offsets_latest))
    if end is None or latest is None:
        return {}
    return {(t, str(p)): max(n - end[(t, p)], 0) for (t, p), n in latest.items() if (t, p) in end}


class Families:
    """The registry's collector: one pass over the watched queries per scrape."""

    def __init__(self, watcher: QueryWatcher) -> None:
        self.watcher = watcher

    def collect(self) -> Iterator[Metric]:
        fam = {name: _family(name) for name in BY_NAME if not name.startswith("spark_ext_status_")}
        now = time.time()
        with self.watcher.lock:
            queries = [(qid, s.name, s.progress, s.seen, s.active, s.failed)
                       for qid, s in self.watcher.queries.items()]
        for qid, name, progress, seen, active, failed in queries:
            q = [name, qid]
            fam["spark_ext_query_active"].add_metric(q, 1 if active else 0)
            fam["spark_ext_query_failed"].add_metric(q, 1 if failed else 0)
            fam["spark_ext_query_seconds_since_progress"].add_metric(q, now - seen)
            if progress is not None:
                self._progress(fam, q, progress)
            for card in cards.read(qid):
                self._card(fam, q, card, now)
        for card in cards.read_sources(SOURCE_CARD_AGE_S):
            labels = [str(card.get("broker", "")), str(card.get("queue", ""))]
            for key in ("in_flight", "depth"):
                if card.get(key) is not None:
                    fam[f"spark_ext_queue_{key}"].add_metric(labels, card[key])
        yield from fam.values()

    @staticmethod
    def _progress(fam: dict[str, Any], q: list[str], p: dict[str, Any]) -> None:
        fam["spark_ext_query_batch_id"].add_metric(q, p.get("batchId", 0))
        fam["spark_ext_query_input_rows"].add_metric(q, p.get("numInputRows", 0))
        for key, metric in (("inputRowsPerSecond", "spark_ext_query_input_rows_per_second"),
                            ("processedRowsPerSecond", "spark_ext_query_processed_rows_per_second")):
            value = p.get(key)
            if isinstance(value, (int, float)) and not math.isnan(value):
                fam[metric].add_metric(q, value)
        for phase, ms in (p.get("durationMs") or {}).items():
            fam["spark_ext_query_duration_ms"].add_metric([*q, phase], ms)
        watermark = (p.get("eventTime") or {}).get("watermark")
        if watermark:
            at = datetime.fromisoformat(watermark.replace("Z", "+00:00"))
            fam["spark_ext_query_watermark_seconds"].add_metric(q, at.timestamp())
        ops = p.get("stateOperators") or []
        fam["spark_ext_query_state_rows"].add_metric(q, sum(o.get("numRowsTotal", 0) for o in ops))
        late = sum(o.get("numRowsDroppedByWatermark", 0) for o in ops)
        fam["spark_ext_query_late_rows"].add_metric(q, late)
        for i, source in enumerate(p.get("sources") or []):
            lags = _lags(source.get("endOffset"), source.get("latestOffset"))
            for (topic, part), lag in sorted(lags.items()):
                fam["spark_ext_source_lag_records"].add_metric([*q, str(i), topic, part], lag)
            if lags:
                fam["spark_ext_source_lag_records_max"].add_metric([*q, str(i)], max(lags.values()))

    @staticmethod
    def _card(fam: dict[str, Any], q: list[str], card: dict[str, Any], now: float) -> None:
        s = [*q, str(card.get("sink", ""))]
        fam["spark_ext_sink_last_batch"].add_metric(s, card.get("batch", -1))
        for key in ("rows", "retries", "recovered"):
            fam[f"spark_ext_sink_{key}_total"].add_metric(s, card.get(f"{key}_total", 0))
        rolled_back = card.get("rolled_back_total", 0)
        fam["spark_ext_sink_takeover_transactions_total"].add_metric(
            [*s, "committed"], card.get("recovered_total", 0) - rolled_back)
        fam["spark_ext_sink_takeover_transactions_total"].add_metric([*s, "rolled_back"], rolled_back)
        for key in ("transactions", "decide_ms", "commit_ms", "batch_ms", "epoch"):
            if card.get(key) is not None:
                fam[f"spark_ext_sink_{key}"].add_metric(s, card[key])
        if card.get("dead_letters") is not None:
            fam["spark_ext_sink_dead_letters"].add_metric(s, card["dead_letters"])
        if card.get("at") is not None:
            fam["spark_ext_sink_seconds_since_commit"].add_metric(s, now - float(card["at"]))
