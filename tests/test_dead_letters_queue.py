"""Dead letters of a queue target, against the real Artemis and PostgreSQL: rows that
cannot be STOMP messages (a NUL in a text body, which ends a frame; a priority outside
0-9; a header the sink or the broker sets) land in a dead-letter table with the rule they
broke, every other row on the queue, under one decision a batch, each once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import pg_util
from tests.support.deadletters import ended, write_files
from tests.support.processes import driver_report
from tests.support.stomp_util import drain, queue_name

pytestmark = [pytest.mark.spark, pytest.mark.services]

ROWS = 2500  # a batch
KINDS = {"nul": "NUL_IN_TEXT_BODY", "prio": "PRIORITY_OUT_OF_RANGE", "hdr": "RESERVED_HEADER"}
SELECT = [
    "concat(CAST(id AS STRING), ':', CASE WHEN v = 'nul' THEN concat('x', char(0), 'y') ELSE v END) AS body",
    "CASE WHEN v = 'prio' THEN 12 ELSE 4 END AS priority",
    "CASE WHEN v = 'hdr' THEN map('destination', '/queue/elsewhere') ELSE map('app', 'payments') END "
    "AS headers",
]


def _kind(i: int) -> str | None:
    """Three rows of each kind in a 10,000-row stream."""
    return {5: "nul", 4321: "nul", 9998: "nul", 77: "prio", 2500: "prio", 8888: "prio",
            1: "hdr", 6000: "hdr", 7001: "hdr"}.get(i)


def _files(src: Path, batches: int) -> None:
    write_files(src, batches, ROWS, _kind)


def test_queue_target_sets_rows_that_cannot_be_messages_aside(spark, services, tmp_path):
    url, dest, dlq = services.postgres_url, queue_name("dl-target"), pg_util.table_name("dl_queue_dead")
    sink_id = f"dlq-{dest[-10:]}"
    _files(tmp_path / "src", 4)
    src = str(tmp_path / "src")
    df = spark.readStream.schema("id long, v string").option("maxFilesPerTrigger", 1).json(src)
    q = (df.repartition(4, "id").selectExpr(*SELECT).writeStream.format("hzsink")
         .option("connector", "jms").option("host", services.stomp_host)
         .option("port", str(services.stomp_port))
         .option("user", services.stomp_user).option("password", services.stomp_password)
         .option("destination", dest).option("sinkId", sink_id)
         .option("deadLetter.connector", "jdbc").option("deadLetter.url", url)
         .option("deadLetter.dbtable", dlq).option("deadLetter.createTable", "true")
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    error = ended(q)
    assert error is None, error
    kept = sorted(int(b.split(":")[0]) for b in drain(services, dest, timeout=120))
    rows = pg_util.query(url, f"SELECT row, error_class, error_code, error_message, sink_id FROM {dlq}")
    dead = sorted((int(json.loads(r)["body"].split(":")[0]), code) for r, _, code, _, _ in rows)
    assert (len(kept), len(dead)) == (9991, 9)
    assert kept == [i for i in range(4 * ROWS) if not _kind(i)]
    assert dead == sorted((i, KINDS[k]) for i in range(4 * ROWS) if (k := _kind(i)))
    assert {c for _, c, _, _, _ in rows} == {"BadMessageError"} and {s for *_, s in rows} == {sink_id}
    assert any("priority 12 is outside 0-9" in m for _, _, _, m, _ in rows)
    assert pg_util.prepared(url, sink_id) == []


@pytest.mark.campaign
def test_kill_9_with_a_queue_target_leaves_every_row_in_one_place_once(services, tmp_path):
    """Point k strikes in batch k, after batches 0..k-1 committed (their dead letters too);
    what a reader took off the queue after each crash counts as landed."""
    from tests.support.deadletters import FIRST, OTHERS, run

    url, dest, dlq = services.postgres_url, queue_name("dl-kill"), pg_util.table_name("dl_queue_kill")
    opts = {"connector": "jms", "host": services.stomp_host, "port": str(services.stomp_port),
            "user": services.stomp_user, "password": services.stomp_password, "destination": dest,
            "sinkId": f"dlk-{dest[-10:]}", "deadLetter.connector": "jdbc", "deadLetter.url": url,
            "deadLetter.dbtable": dlq, "deadLetter.createTable": "true"}
    points = FIRST + OTHERS
    n = len(points) + 1
    _files(tmp_path / "src", n)
    kept: list[int] = []

    def landed() -> tuple[list[int], list[tuple[int, str]]]:
        kept.extend(int(b.split(":")[0]) for b in drain(services, dest, timeout=120))
        try:
            rows = pg_util.query(url, f"SELECT row, error_code FROM {dlq}")
        except Exception:  # noqa: BLE001 - the table comes with the first dead letter
            rows = []
        return sorted(kept), sorted((int(json.loads(r)["body"].split(":")[0]), c) for r, c in rows)

    def expected(batches: int) -> tuple[list[int], list[tuple[int, str]]]:
        ids = range(batches * ROWS)
        return [i for i in ids if not _kind(i)], sorted((i, KINDS[k]) for i in ids if (k := _kind(i)))

    for batch, point in enumerate(points, start=1):
        crashed = run(tmp_path, opts, f"{point}@{batch}", "|".join(SELECT))
        assert crashed.returncode == -9, f"{point}: {driver_report(crashed)}"
        good, dead = landed()
        assert len(set(good)) == len(good) and len(set(dead)) == len(dead), point
        want_good, want_dead = expected(batch)
        assert set(want_good) <= set(good) and set(want_dead) <= set(dead), point
    done = run(tmp_path, opts, select="|".join(SELECT))
    assert done.returncode == 0, driver_report(done)
    assert landed() == expected(n)
    assert pg_util.prepared(url, opts["sinkId"]) == []
