"""What a query's checkpoint records as committed, read from its files: for the source
lag of ``spark-ext status kafka --checkpoint`` (and its ``--serve`` sidecar), which works
with the query stopped or crashed, and for the exporter's offsets.

Here, not under the Kafka connector: the exporter uses ``kafka_offsets`` without the
Kafka extra.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spark_ext.errors import SparkExtError


def kafka_offsets(doc: Any) -> dict[tuple[str, int], int] | None:
    """A source's offsets as ``{(topic, partition): offset}`` if they have the shape Spark's
    Kafka source and ours write (``{"topic": {"0": 42}}``), None for any other source's."""
    if not isinstance(doc, dict) or not doc:
        return None
    out = {}
    for topic, parts in doc.items():
        if not isinstance(parts, dict) or not all(str(p).isdigit() and type(o) is int
                                                  for p, o in parts.items()):
            return None
        out.update({(str(topic), int(p)): o for p, o in parts.items()})
    return out


def committed_offsets(checkpoint: str) -> tuple[int, list[Any]] | None:
    """The last batch a query's checkpoint records as committed (``commits/<n>``) and each
    source's end offsets of it (``offsets/<n>``: parsed JSON, None for a source without);
    None before the first committed batch, and for a directory not there (yet: a sidecar
    may start before its query). A local directory (or ``file:`` URI)."""
    root = Path(checkpoint.removeprefix("file://").removeprefix("file:"))
    if not root.exists():
        return None
    if not root.is_dir():
        raise SparkExtError(f"checkpoint {checkpoint} is not a directory: give the query's "
                            "checkpointLocation (a local path; copy a remote one here first)")
    done = sorted(int(p.name) for p in (root / "commits").glob("*") if p.name.isdigit())
    if not done:
        return None
    lines = (root / "offsets" / str(done[-1])).read_text().splitlines()
    sources = []
    for line in lines[2:]:  # "v1", the batch's metadata, then one line per source
        try:
            sources.append(json.loads(line))
        except ValueError:
            sources.append(None)  # "-": a source with no offset yet
    return done[-1], sources
