"""Sink cards: how a sink's figures, measured in the driver's commit worker, reach the
exporter in the driver's own process. Both run on the driver's host.

After each committed batch the commit worker writes one small JSON file per sink (its
label, the batch, rows, timings), replacing the last one by a rename: a local write of a
few hundred bytes, off every system the batch waits on. The exporter reads the cards of
the queries it watches when it is scraped. Nothing is written unless an exporter made
the spool directory (``serve``), so a query on a host where no exporter ever ran pays one
``stat``. The directory stays when the exporter stops (another may serve the same host's
queries), and so do the cards: a later exporter shows the totals from where they were.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from spark_ext import formats

log = logging.getLogger(__name__)

ENV = "SPARK_EXT_METRICS_DIR"
# A card's per-batch figures also kept as running totals.
SUMMED = ("rows", "retries", "recovered", "rolled_back")
# The figure a batch's card written again (its replay after a crash) replaces rather than adds
# to: the batch's rows land once. Retries and recovered transactions are each commit's own.
REPLACED = "rows"


def root() -> Path:
    """The spool directory: ``$SPARK_EXT_METRICS_DIR``, else one per user in the temp dir."""
    given = os.environ.get(ENV)
    if given:
        return Path(given)
    return Path(tempfile.gettempdir()) / f"spark-ext-metrics-{os.getuid()}"


def _name(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label)[:150] + ".json"


def write(query_id: str | None, label: str, batch_id: int, fields: dict[str, Any]) -> None:
    """Replace the sink's card for ``query_id`` (``SUMMED`` figures add up across batches). Never
    raises: a card not written costs the dashboard one batch, never the query."""
    base = root()
    if not query_id or not base.is_dir():
        return
    try:
        where = base / query_id
        where.mkdir(mode=0o700, exist_ok=True)
        path = where / _name(label)
        try:
            old = json.loads(path.read_text())
        except (OSError, ValueError):
            old = {}
        again = old.get("batch") == batch_id  # the same batch's card again (its replay)
        if again and fields.get("rows") is None:
            fields = {**fields, "rows": old.get("rows")}  # its rows not known now: as counted before
        card = {formats.KEY: formats.METRICS_CARD.current, "sink": label, "batch": batch_id, **fields}
        for key in SUMMED:
            try:
                total = int(old[f"{key}_total"])
                if again and key == REPLACED:  # a batch's rows count once
                    total -= int(old[key])
            except (ValueError, TypeError, KeyError):
                total = 0
            card[f"{key}_total"] = total + int(fields.get(key) or 0)
        _replace(path, card)
    except Exception as e:  # noqa: BLE001 - after the commit: a card must never fail the batch
        log.debug("could not write the metrics card of %s: %s", label, e)


def _replace(path: Path, card: dict[str, Any]) -> None:
    """Write ``card`` beside ``path`` and rename it over: a reader sees the old card or the new."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(json.dumps(card))
    os.replace(tmp, path)


def read(query_id: str) -> list[dict[str, Any]]:
    """Every sink card of ``query_id`` (exporter, at scrape)."""
    where = root() / query_id
    out = []
    try:
        paths = sorted(where.glob("*.json"))
    except OSError:
        return []
    for path in paths:
        try:
            card = json.loads(path.read_text())
            if int(card.get(formats.KEY, 1)) > formats.METRICS_CARD.current:
                continue  # a newer release's, whose own exporter serves it
            out.append(card)
        except (OSError, ValueError, TypeError, AttributeError):
            continue  # replaced while read: the next scrape has it
    return out


SOURCES = "sources"  # the queue source's cards: by queue, no query id being known where they are written


def write_source(label: str, fields: dict[str, Any]) -> None:
    """Replace a source's card (``SOURCES``); never raises."""
    base = root()
    if not base.is_dir():
        return
    try:
        where = base / SOURCES
        where.mkdir(mode=0o700, exist_ok=True)
        path = where / _name(label)
        _replace(path, {**fields, "at": time.time()})
    except Exception as e:  # noqa: BLE001 - a card must never fail the query
        log.debug("could not write the metrics card of %s: %s", label, e)


def read_sources(max_age_s: float) -> list[dict[str, Any]]:
    """The source cards written within ``max_age_s`` (older ones: a query that stopped)."""
    now = time.time()
    return [c for c in read(SOURCES) if now - float(c.get("at", 0)) <= max_age_s]
