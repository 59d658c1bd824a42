"""Dead letters of a queue target, against the real Artemis and PostgreSQL: rows that
cannot be STOMP messages (a NUL in a text body, which ends a frame; a priority outside
0-9; a header the sink or the broker sets) land in a dead-letter table with the rule they
broke, every other row on the queue, under one decision a batch, each once."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException

from tests.support import pg_util
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
    src.mkdir(parents=True, exist_ok=True)
    base = time.time() - 1000
    for b in range(batches):
        f = src / f"f{b:03d}.json"
        f.write_text("".join(json.dumps({"id": i, "v": _kind(i) or f"v{i}"}) + "\n"
                             for i in range(b * ROWS, (b + 1) * ROWS)))
        os.utime(f, (base + b, base + b))


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
    try:
        q.awaitTermination(300)
    except StreamingQueryException:
        pass  # read below
    assert q.exception() is None, q.exception()
    kept = sorted(int(b.split(":")[0]) for b in drain(services, dest, timeout=120))
    rows = pg_util.query(url, f"SELECT row, error_class, error_code, error_message, sink_id FROM {dlq}")
    dead = sorted((int(json.loads(r)["body"].split(":")[0]), code) for r, _, code, _, _ in rows)
    assert (len(kept), len(dead)) == (9991, 9)
    assert kept == [i for i in range(4 * ROWS) if not _kind(i)]
    assert dead == sorted((i, KINDS[k]) for i in range(4 * ROWS) if (k := _kind(i)))
    assert {c for _, c, _, _, _ in rows} == {"BadMessageError"} and {s for *_, s in rows} == {sink_id}
    assert any("priority 12 is outside 0-9" in m for _, _, _, m, _ in rows)
    assert pg_util.prepared(url, sink_id) == []
