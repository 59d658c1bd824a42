"""A queue -> PostgreSQL job run as its own driver process, so a test can crash it.

Usage: python -m tests.drivers.jms_to_jdbc STOMP_HOST STOMP_PORT USER PASSWORD DEST CHECKPOINT
       POSTGRES_URL TABLE EXPECTED [FAILPOINT] [OPTION=VALUE ...]
Reads 50 messages per batch with ``exactly_once`` and writes (message_id, body) through
the ``jdbc`` sink with ``exactly_once``. With FAILPOINT the driver kills itself there;
without, it stops cleanly once TABLE holds EXPECTED rows.
"""

from __future__ import annotations

import sys
import time

from tests.drivers.session import driver_session


def main(host: str, port: str, user: str, password: str, dest: str, ckpt: str, url: str, table: str,
         expected: str, failpoint: str = "", *extra: str) -> int:
    import sqlalchemy as sa

    spark = driver_session("jms-driver", failpoint)
    r = (spark.readStream.format("hzsource").option("connector", "jms").option("host", host)
         .option("port", port).option("user", user).option("password", password)
         .option("destination", dest).option("maxMessagesPerTrigger", "50"))
    for kv in extra:
        k, v = kv.split("=", 1)
        r = r.option(k, v)
    q = (r.load().selectExpr("message_id", "body_text AS body").writeStream.format("hzsink")
         .option("connector", "jdbc").option("url", url).option("dbtable", table)
         .option("checkpointLocation", ckpt).trigger(processingTime="200 milliseconds").start())
    eng = sa.create_engine(url, poolclass=sa.pool.NullPool)
    deadline = time.monotonic() + 240
    while q.isActive and time.monotonic() < deadline:
        q.awaitTermination(1)
        with eng.connect() as c:
            if c.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one() >= int(expected):
                break
    # The last batch is acknowledged by the next trigger's planning: wait for an idle one.
    seen = len(q.recentProgress)
    while q.isActive and time.monotonic() < deadline:
        q.awaitTermination(1)
        if any(p["numInputRows"] == 0 for p in q.recentProgress[seen:]):
            break
    failed = q.exception() is not None
    if failed:
        print(f"query failed: {q.exception()}", file=sys.stderr)
    q.stop()
    return 1 if failed or time.monotonic() >= deadline else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
