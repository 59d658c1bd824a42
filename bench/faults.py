"""``make faults``: crash-and-restart runs per pipeline, one ``FAULTS`` line each.

Each pipeline runs a real streaming job as its own driver process (the ones the tests
use, ``tests/drivers/``), crashes it with ``kill -9`` at every named failpoint in turn
(``spark_ext/failpoints.py``), each time restarting from the same checkpoint, then lets
a last run finish, and compares what the sink committed with what went in:

``FAULTS pipeline=<name> guarantee=<g> crashes=<n> expected=<n> committed=<n> lost=<n>
duplicated=<n> in_doubt=<n>``
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from bench.common import ROOT, run_sql, services_env
from connectors.jdbc.config import checkpoint_sink_id


def _run(argv: list[str], crash: bool) -> None:
    p = subprocess.run(argv, cwd=ROOT, start_new_session=True, capture_output=True, text=True, timeout=600)
    if crash and p.returncode != -9:
        raise SystemExit(f"expected a kill -9 at the failpoint, got exit {p.returncode}:\n{p.stderr[-2000:]}")
    if not crash and p.returncode != 0:
        raise SystemExit(f"the final run failed ({p.returncode}):\n{p.stderr[-2000:]}")


@dataclass(frozen=True)
class Outcome:
    """What the sink committed against what went in, for one pipeline."""

    name: str
    crashes: int
    expected: int
    committed: int
    lost: int
    duplicated: int
    in_doubt: int

    @property
    def held(self) -> bool:
        """Exactly once held: nothing lost, nothing twice, nothing left in doubt."""
        return self.lost == 0 and self.duplicated == 0 and self.in_doubt == 0

    def line(self) -> str:
        return (f"FAULTS pipeline={self.name} guarantee=exactly_once crashes={self.crashes} "
                f"expected={self.expected} committed={self.committed} lost={self.lost} "
                f"duplicated={self.duplicated} in_doubt={self.in_doubt}")


def _outcome(name: str, crashes: int, url: str, table: str, key: str, expected: set[str],
             sink: str) -> Outcome:
    rows = [str(r[0]) for r in run_sql(url, f"SELECT {key} FROM {table}")]
    present = set(rows) & expected
    in_doubt = run_sql(url, f"SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'sx:{sink}:%'")[0][0]
    return Outcome(name, crashes, len(expected), len(rows), len(expected - present),
                   len(rows) - len(set(rows)), int(in_doubt))


def files_to_jdbc(tmp: Path) -> Outcome:
    """Replayable file source -> PostgreSQL 2PC sink, crashed before prepare, between
    prepare and commit, after the decision and half-way through the commits."""
    url = services_env()["POSTGRES_URL"]
    table = f"faults_files_{uuid.uuid4().hex[:8]}"
    run_sql(url, f"CREATE TABLE {table} (id bigint, v text)")
    src, ckpt = tmp / "src", tmp / "ckpt"
    src.mkdir()
    points = ["jdbc.before_prepare", "jdbc.before_decision", "jdbc.after_decision", "jdbc.mid_commit"]
    n = 0
    base = time.time() - 10_000
    for i in range(len(points) + 2):  # one file (one batch) more than there are crashes
        f = src / f"f{i:03d}.json"
        f.write_text("".join(json.dumps({"id": n + k, "v": f"v{n + k}"}) + "\n" for k in range(100)))
        os.utime(f, (base + i, base + i))  # the file source orders by modification time
        n += 100
    argv = [sys.executable, "-m", "tests.drivers.files_to_jdbc", str(src), str(ckpt), url, table]
    for batch, point in enumerate(points):  # crash i lands in batch i, after i batches committed
        _run([*argv, f"{point}@{batch}"], crash=True)
    _run(argv, crash=False)
    outcome = _outcome("files_to_jdbc", len(points), url, table, "id", {str(i) for i in range(n)},
                       checkpoint_sink_id(str(ckpt)))
    run_sql(url, f"DROP TABLE {table}")
    return outcome


def jms_to_jdbc(tmp: Path) -> Outcome:
    """Acknowledging queue -> PostgreSQL 2PC sink, crashed before the batch commit, after
    the commit but before the ack, and during the ack."""
    import stomp

    env = services_env()
    url = env["POSTGRES_URL"]
    table = f"faults_jms_{uuid.uuid4().hex[:8]}"
    run_sql(url, f"CREATE TABLE {table} (message_id text, body text)")
    dest = f"/queue/faults-{uuid.uuid4().hex[:8]}"
    conn = stomp.Connection12([(env["STOMP_HOST"], int(env["STOMP_PORT"]))], heartbeats=(0, 0))
    conn.connect(env["STOMP_USER"], env["STOMP_PASSWORD"], wait=True)
    bodies = [f"m{i}" for i in range(300)]
    for b in bodies:
        conn.send(dest, b, headers={"persistent": "true"})
    conn.disconnect()  # the DISCONNECT receipt: the broker has every message
    ckpt = tmp / "ckpt"
    argv = [sys.executable, "-m", "tests.drivers.jms_to_jdbc", env["STOMP_HOST"], env["STOMP_PORT"],
            env["STOMP_USER"], env["STOMP_PASSWORD"], dest, str(ckpt), url, table, str(len(bodies))]
    points = ["jdbc.before_decision", "jms.before_ack", "jms.mid_ack"]
    for point in points:
        _run([*argv, point], crash=True)
    _run(argv, crash=False)
    outcome = _outcome("jms_to_jdbc", len(points), url, table, "body", set(bodies),
                       checkpoint_sink_id(str(ckpt)))
    run_sql(url, f"DROP TABLE {table}")
    return outcome


PIPELINES = {"files_to_jdbc": files_to_jdbc, "jms_to_jdbc": jms_to_jdbc}


def main(argv: list[str]) -> int:
    names = argv or list(PIPELINES)
    for name in names:
        if name not in PIPELINES:
            print(f"unknown pipeline {name!r}; available: {', '.join(PIPELINES)}", file=sys.stderr)
            return 2
    broken = []
    for name in names:
        with tempfile.TemporaryDirectory() as tmp:
            outcome = PIPELINES[name](Path(tmp))
        print(outcome.line(), flush=True)
        if not outcome.held:
            broken.append(name)
    if broken:
        print(f"exactly-once broken in: {', '.join(broken)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
