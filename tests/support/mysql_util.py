"""Helpers for tests against the real local MariaDB (``make services``)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import make_url

from spark_ext.connectors.jdbc.mariadb.transactions import MyConn, connect, format_id, prepared_gids


def conn(url: str) -> MyConn:
    return connect(make_url(url))


def query(url: str, sql: str, args: Any = None) -> list[tuple[Any, ...]]:
    c = conn(url)
    try:
        return [tuple(r) for r in c.execute(sql, args)]
    finally:
        c.close()


def execute(url: str, *statements: str) -> None:
    c = conn(url)
    try:
        for sql in statements:
            c.execute(sql)
    finally:
        c.close()


def prepared(url: str, sink_id: str) -> list[str]:
    """The sink's prepared XA transactions (``XA RECOVER``), as global ids."""
    c = conn(url)
    try:
        return prepared_gids(c, sink_id, format_id(make_url(url).database or ""))
    finally:
        c.close()
