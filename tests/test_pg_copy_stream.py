"""The PostgreSQL sink's COPY stream (``writer.CopyStream``) against the real server: a
task's batches go as one COPY per run of batches with the same statement (binary, or
CSV for a batch the binary plan does not cover), every row lands once, the bytes sent do
not depend on where the batches were cut, and an error of the batches themselves
surfaces as itself rather than as the COPY's failure."""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import psycopg2
import psycopg2.errors
import pyarrow as pa
import pytest
import sqlalchemy as sa
from pyspark.sql import types as T

from spark_ext.connectors.jdbc import binary_copy
from spark_ext.connectors.jdbc.writer import CopyStream
from spark_ext.errors import ConnectorError
from tests.support.pg_util import execute, table_name

pytestmark = pytest.mark.services


@pytest.fixture
def table(services: Any) -> Any:
    url = services.postgres_url
    name = table_name("cstream")
    execute(url, f"CREATE TABLE {name} (id bigint NOT NULL, note text)")
    conn = psycopg2.connect(sa.engine.make_url(url).render_as_string(hide_password=False)
                            .replace("postgresql+psycopg2", "postgresql"))
    yield conn, name
    conn.close()
    execute(url, f"DROP TABLE {name}")


def _plan(name: str) -> Any:
    schema = T.StructType([T.StructField("id", T.LongType()), T.StructField("note", T.StringType())])
    return SimpleNamespace(
        binary_kinds=binary_copy.kinds(schema, {"id": "int8", "note": "text"}), binary_columns=(),
        copy_target=f"COPY {name} (id, note) FROM STDIN (FORMAT csv)",
        copy_target_binary=f"COPY {name} (id, note) FROM STDIN (FORMAT binary)",
        copy_staging="-", copy_staging_binary="--")


def _batch(ids: range, large: bool = False) -> pa.RecordBatch:
    kind = pa.large_string() if large else pa.string()
    notes = pa.array([f"note {i}" if i % 7 else None for i in ids], kind)
    return pa.RecordBatch.from_arrays([pa.array(ids, pa.int64()), notes], ["id", "note"])


class _Recording:
    """A cursor that notes each COPY statement it runs."""

    def __init__(self, cur: Any) -> None:
        self.cur = cur
        self.statements: list[str] = []

    def copy_expert(self, stmt: str, f: Any, size: int) -> None:
        self.statements.append(stmt)
        self.cur.copy_expert(stmt, f, size)


def _send(conn: Any, name: str, batches: Iterator[pa.RecordBatch],
          digest: Any = None) -> tuple[int, list[str]]:
    cur = _Recording(conn.cursor())
    rows = CopyStream(batches, _plan(name), None, digest).send(cur)
    return rows, cur.statements


def _stored(conn: Any, name: str) -> list[tuple[int, str | None]]:
    with conn.cursor() as cur:
        cur.execute(f"SELECT id, note FROM {name} ORDER BY id")
        return cur.fetchall()


def test_batches_go_as_one_copy_per_statement_and_every_row_lands_once(table: Any) -> None:
    conn, name = table
    plan = _plan(name)
    batches = [_batch(range(0, 5000)), _batch(range(5000, 5000)), _batch(range(5000, 12000)),
               _batch(range(12000, 12500), large=True),  # Arrow types the binary plan lacks: CSV
               _batch(range(12500, 20000)), _batch(range(20000, 20001))]
    rows, statements = _send(conn, name, iter(batches))
    assert rows == 20001
    assert statements == [plan.copy_target_binary, plan.copy_target, plan.copy_target_binary]
    assert _stored(conn, name) == [(i, f"note {i}" if i % 7 else None) for i in range(20001)]
    conn.rollback()


def test_the_bytes_sent_do_not_depend_on_where_the_batches_were_cut(table: Any) -> None:
    # the at_least_once sink knows a landed partition by a digest of the bytes sent
    conn, name = table
    digests = []
    for cuts in ([0, 20000], [0, 1, 9999, 10000, 20000], [0, 3000, 6000, 20000]):
        digest = hashlib.blake2b(digest_size=16)
        _send(conn, name, (_batch(range(a, b)) for a, b in itertools.pairwise(cuts)), digest)
        conn.rollback()
        digests.append(digest.hexdigest())
    assert len(set(digests)) == 1


def test_an_error_of_the_batches_surfaces_as_itself(table: Any) -> None:
    conn, name = table

    def failing() -> Iterator[pa.RecordBatch]:
        yield _batch(range(0, 1000))
        raise ConnectorError("the upstream failed")

    with pytest.raises(ConnectorError, match="the upstream failed"):
        _send(conn, name, failing())
    conn.rollback()
    assert _stored(conn, name) == []


def test_a_row_the_server_refuses_fails_the_copy_with_its_sqlstate(table: Any) -> None:
    conn, name = table
    bad = pa.RecordBatch.from_arrays([pa.array([None], pa.int64()), pa.array(["x"])], ["id", "note"])
    with pytest.raises(psycopg2.errors.NotNullViolation):
        _send(conn, name, iter([_batch(range(0, 1000)), bad, _batch(range(1000, 2000))]))
    conn.rollback()
    assert _stored(conn, name) == []
