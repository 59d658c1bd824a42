"""Bench case ``jms_write``: our queue sink (``exactly_once``) vs a bare stomp.py producer.

``BENCH_JMS_ROWS`` messages (default 200,000, bodies of about 80 bytes) are staged once
as Parquet. Ours: one micro-batch (``Trigger.AvailableNow``, two tasks) through ``hzsink``
connector ``jms`` with ``exactly_once`` into an empty queue; rows/s from ``start()`` to
termination, so the batch's decision and the broker's move into the destination are
inside the figure. Baseline: the same bodies, read from the Parquet files beforehand,
sent by one stomp.py connection with ``persistent:true``, timed from the first send to
the DISCONNECT receipt. That receipt can come before every message is deliverable: a
drain started right after it missed up to 7,617 of 200,000 bodies, which later drains
found (2026-12-06; none lost), so the baseline's figure leans its way by that much and
its queue is drained until every body came (``_drain_all``); ours is drained once, after
the query ended. ``BENCH_ROUNDS``
rounds (default 6, at least 5), ours then the baseline in each; each side's queue is
drained before the other writes, so both write into an empty broker. Messages/s are the
messages over the median seconds of the warm rounds 1..n-1, round 0 printed apart as
``cold_ratio``, the warm rounds' paired ratios as ``spread`` (``bench.common.Rounds``;
the baseline's round 0 is only the first of a warm process). ``equal``: both queues,
drained by an independent consumer, hold the same bodies (the same multiset) and as many
as the input.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import stomp

from bench.common import (
    RESULTS_DIR,
    BenchError,
    Result,
    Rounds,
    drain_queue,
    round_count,
    services_env,
    spark_session,
    timed_parquet_stream,
)


def _stage(spark: Any, rows: int, path: str) -> None:
    from pyspark.sql import functions as F

    (spark.range(rows).select(F.concat(F.lit("payment "), F.col("id").cast("string"), F.lit(" "),
                                       F.sha2(F.col("id").cast("string"), 256)).alias("body"))
     .repartition(2).write.mode("overwrite").parquet(path))


def _connect(env: dict[str, str]) -> stomp.Connection12:
    conn = stomp.Connection12([(env["STOMP_HOST"], int(env["STOMP_PORT"]))], heartbeats=(0, 0))
    conn.connect(env["STOMP_USER"], env["STOMP_PASSWORD"], wait=True)
    return conn


def _bare(env: dict[str, str], queue: str, bodies: list[str]) -> float:
    """The baseline's seconds: every body sent persistently, then the DISCONNECT receipt."""
    conn = _connect(env)
    t0 = time.monotonic()
    for b in bodies:
        conn.send(queue, b, headers={"persistent": "true"})
    conn.disconnect(receipt="bye")  # waits for the receipt: the broker stored everything before it
    return time.monotonic() - t0


def _drain_all(env: dict[str, str], queue: str, want: int, timeout_s: float = 120) -> tuple[list[str], int]:
    """The bodies on ``queue``, drained again until ``want`` came or ``timeout_s`` passed,
    and how many came after the first drain."""
    deadline = time.monotonic() + timeout_s
    got = drain_queue(env, queue, timeout_s)
    first = len(got)
    while len(got) < want and time.monotonic() < deadline:
        got += drain_queue(env, queue, max(1.0, deadline - time.monotonic()))
    return got, len(got) - first


def run() -> Result:
    rows = int(os.environ.get("BENCH_JMS_ROWS", "200000"))
    timed = Rounds("jms_write", round_count())
    env = services_env()
    spark = spark_session()
    tag = uuid.uuid4().hex[:8]
    outputs: dict[str, Counter[str]] = {}
    late: dict[int, int] = {}  # the baseline's bodies that only a later drain found, by round
    with tempfile.TemporaryDirectory() as tmp:
        src = f"{tmp}/src"
        _stage(spark, rows, src)
        bodies = [r.body for r in spark.read.parquet(src).collect()]

        def ours(queue: str) -> Any:
            def sink(w: Any) -> Any:
                return (w.format("hzsink").option("connector", "jms").option("host", env["STOMP_HOST"])
                        .option("port", env["STOMP_PORT"]).option("user", env["STOMP_USER"])
                        .option("password", env["STOMP_PASSWORD"]).option("destination", queue))
            return sink

        for i in timed:
            q_ours, q_bare = f"/queue/bench-jms-eo-{tag}-{i}", f"/queue/bench-jms-bare-{tag}-{i}"
            n, dt = timed_parquet_stream(spark, "jms_write", src, f"{tmp}/ck-{i}", ours(q_ours))
            if n != rows:
                raise BenchError(f"jms_write: read {n} rows, expected {rows}")
            timed.add("ours", i, n, dt, "messages")
            outputs[f"ours{i}"] = Counter(drain_queue(env, q_ours, 600))  # each side into an empty broker
            bt = _bare(env, q_bare, bodies)
            timed.add("bare", i, rows, bt, "messages")
            bare_out, late[i] = _drain_all(env, q_bare, rows)
            outputs[f"bare{i}"] = Counter(bare_out)
    expected = Counter(bodies)
    equal = all(out == expected for out in outputs.values())
    RESULTS_DIR.mkdir(exist_ok=True)
    (Path(RESULTS_DIR) / "jms_write_extra.json").write_text(json.dumps(
        {"rows": rows, "ours_rows_per_s": timed.rate("ours"), "bare_rows_per_s": timed.rate("bare"),
         "bare_late_bodies_by_round": late},
        indent=2))
    return timed.result("ours", ["bare"], equal)
