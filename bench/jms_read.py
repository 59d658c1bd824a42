"""Bench case ``jms_read``: our queue source vs a bare stomp.py client, same messages, same run.

``BENCH_JMS_READ_MESSAGES`` persistent messages (default 60k, ~100-byte bodies) are sent to
a fresh queue, then consumed by the baseline: one stomp.py connection subscribing with
client-individual acknowledgement that acks every message as it arrives, timed from
subscribe to the last message's arrival. The same messages are sent again to a second
queue and read by ours: ``hzsource`` connector ``jms``, ``exactly_once``, into the
``noop`` sink, timed from ``start()`` until the progress has counted every message.
``equal``: both read every message once (ours: the input rows equal the messages sent
and, after the query stopped, nothing is left on its queue, acknowledged or not).
Both first run once, untimed, on ``BENCH_JMS_READ_WARMUP`` messages (default 20k) of their
own queue: the broker's delivery path, Spark's JVM and Python workers warm for both (the
baseline, run first on a cold broker, measured at half its speed before). Ours still
pays its query's start-up (about 0.75 s here before the first batch is planned).

``jms_read_tls``: the same source over the broker's TLS acceptor against itself in clear
text (the baseline), the same number of messages: the cost of TLS.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import uuid
from typing import Any

import stomp

from bench.common import BenchError, Result, services_env, spark_session


def _conn(env: dict[str, str]) -> stomp.Connection12:
    c = stomp.Connection12([(env["STOMP_HOST"], int(env["STOMP_PORT"]))], heartbeats=(0, 0))
    c.connect(env["STOMP_USER"], env["STOMP_PASSWORD"], wait=True)
    return c


def _fill(env: dict[str, str], dest: str, n: int) -> None:
    c = _conn(env)
    pad = "x" * 88
    try:
        for i in range(n):
            c.send(dest, f"{pad}{i:012d}", headers={"persistent": "true"})
    finally:
        c.disconnect(receipt="bye")  # waits for the receipt: the broker holds every message


def _baseline(env: dict[str, str], dest: str, n: int) -> tuple[float, bool]:
    seen: set[str] = set()
    done = threading.Event()
    c = _conn(env)

    class Acker(stomp.ConnectionListener):
        def on_message(self, frame: stomp.utils.Frame) -> None:
            c.ack(frame.headers["ack"], "bench")
            seen.add(frame.body)
            if len(seen) == n:
                done.set()

    c.set_listener("bench", Acker())
    t0 = time.monotonic()
    c.subscribe(dest, id="bench", ack="client-individual")
    if not done.wait(600):
        raise BenchError(f"jms_read baseline received {len(seen)} of {n} messages in 600 s")
    dt = time.monotonic() - t0
    c.disconnect(receipt="bye")
    return n / dt, len(seen) == n


def _left(env: dict[str, str], dest: str) -> int:
    """Messages still on ``dest``: received up to a sentinel by an auto-ack consumer."""
    sentinel = f"sentinel-{uuid.uuid4().hex}"
    c = _conn(env)
    c.send(dest, sentinel)
    got: list[str] = []
    done = threading.Event()

    class L(stomp.ConnectionListener):
        def on_message(self, frame: stomp.utils.Frame) -> None:
            (done.set() if frame.body == sentinel else got.append(frame.body))

    c.set_listener("left", L())
    c.subscribe(dest, id="left", ack="auto")
    done.wait(60)
    c.disconnect(receipt="bye")
    return len(got)


def _ours(spark: Any, env: dict[str, str], dest: str, n: int, ckpt: str,
          tls: bool = False) -> tuple[float, bool]:
    r = (spark.readStream.format("hzsource").option("connector", "jms")
         .option("host", env["STOMP_HOST"]).option("port", env["STOMP_PORT"])
         .option("user", env["STOMP_USER"]).option("password", env["STOMP_PASSWORD"])
         .option("destination", dest).option("maxMessagesPerTrigger", "20000"))
    if tls:  # the broker's TLS acceptor, its certificate checked against the local CA
        r = r.option("brokerUrl", env["STOMP_TLS_URL"]).option("tlsCaFile", f"{env['PKI_DIR']}/ca.pem")
    df = r.load()
    t0 = time.monotonic()
    q = (df.writeStream.format("noop").option("checkpointLocation", ckpt)
         .trigger(processingTime="0 seconds").start())
    deadline = t0 + 600
    rows = 0
    while time.monotonic() < deadline and q.isActive:
        rows = sum(p["numInputRows"] for p in q.recentProgress)
        if rows >= n:
            break
        time.sleep(0.05)
    dt = time.monotonic() - t0
    # one more trigger acknowledges the last batch
    seen = len(q.recentProgress)
    while q.isActive and time.monotonic() < deadline and not any(
            p["numInputRows"] == 0 for p in q.recentProgress[seen:]):
        time.sleep(0.05)
    failed = q.exception()
    q.stop()
    if failed is not None:
        raise BenchError(f"jms_read query failed: {failed}")
    return n / dt, rows == n and _left(env, dest) == 0


def run() -> Result:
    n = int(os.environ.get("BENCH_JMS_READ_MESSAGES", "60000"))
    env = services_env()
    run_id = uuid.uuid4().hex[:8]
    base_q, ours_q = f"/queue/bench-jms-base-{run_id}", f"/queue/bench-jms-ours-{run_id}"
    t0 = time.monotonic()
    _fill(env, base_q, n)
    _fill(env, ours_q, n)
    print(f"[bench] jms_read: sent {n} messages to each of two queues in {time.monotonic() - t0:.1f} s",
          file=sys.stderr)
    warm = int(os.environ.get("BENCH_JMS_READ_WARMUP", "20000"))
    spark = spark_session()
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        if warm:
            for label in ("base", "ours"):
                _fill(env, f"/queue/bench-jms-warm-{label}-{run_id}", warm)
            _baseline(env, f"/queue/bench-jms-warm-base-{run_id}", warm)
            _ours(spark, env, f"/queue/bench-jms-warm-ours-{run_id}", warm, f"{tmp}/warm-ck")
        base_rate, base_ok = _baseline(env, base_q, n)
        print(f"[bench] jms_read baseline: {base_rate:.0f} msg/s", file=sys.stderr)
        ours_rate, ours_ok = _ours(spark, env, ours_q, n, f"{tmp}/ck")
    print(f"[bench] jms_read ours: {ours_rate:.0f} msg/s", file=sys.stderr)
    return Result("jms_read", ours_rate, base_rate, base_ok and ours_ok)


def run_tls() -> Result:
    """``jms_read_tls``: our source over the broker's TLS acceptor (ours) against the same
    source in clear text (baseline), the same messages, both warmed, in turn: what TLS costs."""
    n = int(os.environ.get("BENCH_JMS_READ_MESSAGES", "60000"))
    env = services_env()
    run_id = uuid.uuid4().hex[:8]
    kinds = ("clear", "tls", "warm-clear", "warm-tls")
    queues = {kind: f"/queue/bench-jms-{kind}-{run_id}" for kind in kinds}
    warm = int(os.environ.get("BENCH_JMS_READ_WARMUP", "20000"))
    for kind, q in queues.items():
        _fill(env, q, warm if kind.startswith("warm") else n)
    spark = spark_session()
    import tempfile

    rates: dict[str, tuple[float, bool]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("warm-clear", "warm-tls", "clear", "tls"):
            count = warm if kind.startswith("warm") else n
            rates[kind] = _ours(spark, env, queues[kind], count, f"{tmp}/{kind}", tls=kind.endswith("tls"))
    (tls_rate, tls_ok), (clear_rate, clear_ok) = rates["tls"], rates["clear"]
    print(f"[bench] jms_read over TLS: {tls_rate:.0f} msg/s, in clear text: {clear_rate:.0f} msg/s",
          file=sys.stderr)
    return Result("jms_read_tls", tls_rate, clear_rate, tls_ok and clear_ok)
