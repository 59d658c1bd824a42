"""Helpers for tests against the real local PostgreSQL."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import sqlalchemy as sa


def table_name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def engine(url: str) -> sa.Engine:
    return sa.create_engine(url, poolclass=sa.pool.NullPool)


def execute(url: str, sql: str, **params: Any) -> None:
    eng = engine(url)
    try:
        with eng.begin() as c:
            c.execute(sa.text(sql), params)
    finally:
        eng.dispose()


def query(url: str, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    eng = engine(url)
    try:
        with eng.connect() as c:
            return [tuple(r) for r in c.execute(sa.text(sql), params)]
    finally:
        eng.dispose()


def prepared(url: str, sink_id: str | None = None) -> list[str]:
    """In-doubt transactions of one sink (all spark-ext sinks when ``sink_id`` is None)."""
    like = f"sx:{sink_id}:%" if sink_id else "sx:%"
    return [r[0] for r in query(url, "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE :p", p=like)]


def write_json_files(src: Path, sizes: list[int], start: int = 0) -> int:
    """One JSON file per future micro-batch: ``{"id": n, "v": "v<n>"}``; returns the next id."""
    src.mkdir(parents=True, exist_ok=True)
    n = start
    base = time.time() - 1000 + start
    for i, size in enumerate(sizes):
        rows = [json.dumps({"id": n + k, "v": f"v{n + k}"}) for k in range(size)]
        f = src / f"f{start}_{i:03d}.json"
        f.write_text("\n".join(rows) + "\n")
        # Spark's file source orders files by modification time (ms): make the order certain.
        os.utime(f, (base + i, base + i))
        n += size
    return n
