"""What the suite left in doubt on the shared servers: ``make test`` ends with this check.

A user's own checks count what is in doubt on a server (``pg_prepared_xacts``, ``XA
RECOVER``, Kafka's ``kafka-transactions.sh list``); ours must not be among what they
count. Every test resolves what it prepared (a restart's take-over, an abort, or its own
cleanup), so after the suite each of these lists is empty; this names what is not, and
exits 1.

Usage: python -m tests.leftovers
"""

from __future__ import annotations

import subprocess
import sys

# A Kafka transaction in these states is open: neither committed nor aborted yet.
_OPEN_KAFKA_STATES = {"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"}


def postgres(url: str) -> list[str]:
    from tests.support.pg_util import query

    return [f"PostgreSQL prepared transaction {gid!r} (database {db}, prepared {at})"
            for gid, db, at in query(url, "SELECT gid, database, prepared FROM pg_prepared_xacts "
                                          "ORDER BY gid")]


def mariadb(url: str) -> list[str]:
    import sqlalchemy as sa

    eng = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with eng.connect() as c:
            rows = c.execute(sa.text("XA RECOVER")).fetchall()
    finally:
        eng.dispose()
    return [f"MariaDB XA transaction {row[3]!r}" for row in rows]


def kafka(bootstrap: str) -> list[str]:
    """Open transactions, as Kafka's own ``kafka-transactions.sh list`` shows them."""
    from services.kafka import kafka_libs

    tool = "org.apache.kafka.tools.TransactionsCommand"
    done = subprocess.run(["java", "-cp", f"{kafka_libs()}/*", tool, "--bootstrap-server", bootstrap, "list"],
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        return [f"Kafka: kafka-transactions.sh list failed ({done.returncode}): {done.stderr.strip()[-500:]}"]
    out = []
    for line in done.stdout.splitlines()[1:]:  # after the header
        cols = line.split()
        if len(cols) >= 4 and cols[-1] in _OPEN_KAFKA_STATES:
            out.append(f"Kafka transaction {cols[0]!r} left {cols[-1]}")
    return out


def main() -> int:
    from services.env import load_env

    env = load_env()
    found = [*postgres(env["POSTGRES_URL"]), *postgres(env["POSTGRES_TLS_ADMIN_URL"]),
             *mariadb(env["MARIADB_URL"]), *kafka(env["KAFKA_BOOTSTRAP_SERVERS"])]
    if not found:
        print("leftovers: no prepared, XA or open Kafka transaction left by the suite")
        return 0
    print(f"leftovers: the suite left {len(found)} transaction(s) in doubt on the shared servers "
          "(a test that did not resolve what it prepared, or a product bug):", file=sys.stderr)
    for line in found:
        print(f"  {line}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
