"""The routing sink against the real PostgreSQL, Kafka and Artemis: one query, three
sub-sinks, one decision a batch. Each id goes to one system (id % 3); the driver is
killed at the routing sink's steps after earlier batches committed, so a batch written
twice in any system shows as a duplicate there, and a part of a batch lost in one system
while the others committed it shows as a gap."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from spark_ext import failpoints
from tests.support import kafka_sink, kafka_util, pg_util, stomp_util
from tests.support.jms_sink import staged_tokens
from tests.support.sinks import ROUTING_POINTS

pytestmark = [pytest.mark.spark, pytest.mark.services]

BATCH = 30
_SELECT = ("CASE id % 3 WHEN 0 THEN 'ledger' WHEN 1 THEN 'alerts' ELSE 'notes' END AS sink", "id", "v",
           "CAST(id AS STRING) AS key", "CAST(id AS STRING) AS value", "CAST(id AS STRING) AS body")


class Targets:
    """A table, a topic and a queue, and what each holds (the queue's reads are kept:
    reading a queue consumes it)."""

    def __init__(self, services) -> None:
        self.s = services
        self.table = pg_util.table_name("routed")
        pg_util.execute(services.postgres_url, f"CREATE TABLE {self.table} (id bigint, v text)")
        self.topic = kafka_util.create_topic(services.kafka_bootstrap, 3, "routed")
        self.queue = stomp_util.queue_name("routed")
        self._read: list[int] = []

    def options(self, **more: str) -> dict[str, str]:
        s = self.s
        return {"connector": "routing",
                "sinks.ledger.connector": "jdbc", "sinks.ledger.url": s.postgres_url,
                "sinks.ledger.dbtable": self.table, "sinks.ledger.columns": "id,v",
                "sinks.alerts.connector": "kafka", "sinks.alerts.kafka.bootstrap.servers": s.kafka_bootstrap,
                "sinks.alerts.topic": self.topic, "sinks.alerts.columns": "key,value",
                "sinks.notes.connector": "jms", "sinks.notes.host": s.stomp_host,
                "sinks.notes.port": str(s.stomp_port), "sinks.notes.user": s.stomp_user,
                "sinks.notes.password": s.stomp_password, "sinks.notes.destination": self.queue,
                "sinks.notes.columns": "body", **more}

    def committed(self) -> dict[str, list[int]]:
        self._read.extend(int(b) for b in stomp_util.drain(self.s, self.queue))
        return {
            "ledger": sorted(r[0] for r in pg_util.query(self.s.postgres_url,
                                                         f"SELECT id FROM {self.table}")),
            "alerts": sorted(int(v) for _, _, v in kafka_sink.consume(self.s.kafka_bootstrap, self.topic)),
            "notes": sorted(self._read),
        }

    def in_doubt(self, routing_id: str) -> list[str]:
        sub = f"{routing_id}--"
        return (pg_util.prepared(self.s.postgres_url, sub + "ledger")
                + [t for t, _, _ in kafka_sink.open_transactions(self.s.kafka_bootstrap, sub + "alerts")]
                + staged_tokens(self.s, sub + "notes"))


def _expected(ids: range | list[int]) -> dict[str, list[int]]:
    return {"ledger": [i for i in ids if i % 3 == 0], "alerts": [i for i in ids if i % 3 == 1],
            "notes": [i for i in ids if i % 3 == 2]}


def _run(tmp: Path, options: dict[str, str], failpoint: str = "-", tasks: int = 4,
         ) -> subprocess.CompletedProcess[str]:
    """The query as its own driver process (killed at ``failpoint``), as the conformance
    suite runs it: files of ``tmp / "src"``, one a batch, ``tasks`` tasks a batch."""
    argv = [sys.executable, "-m", "tests.drivers.files_to_sink", str(tmp / "src"), str(tmp / "ckpt"),
            "|".join(_SELECT), failpoint, *(f"{k}={v}" for k, v in options.items())]
    env = {**os.environ, failpoints.LOG_ENV: str(tmp / "struck.log"), "SPARK_EXT_TEST_TASKS": str(tasks)}
    return subprocess.run(argv, start_new_session=True, capture_output=True, text=True, timeout=600,
                          env=env)


_FIRST = ("routing.after_decision", "routing.between_sinks")  # make test
_OTHERS = ("routing.before_decision", "kafka.mid_decision", "routing.mid_commit", "routing.after_done")


def test_the_routing_points_the_suite_claims_are_the_ones_struck_here():
    assert set(_FIRST) | set(_OTHERS) >= set(ROUTING_POINTS)


@pytest.mark.parametrize("points", [
    pytest.param(_FIRST, id="decided-and-between-sinks"),
    pytest.param(_OTHERS, id="every-other-step", marks=pytest.mark.campaign),
])
def test_kill_9_at_the_routing_steps_leaves_every_system_exactly_once(services, tmp_path, points):
    """Point k strikes in batch k, after batches 0..k-1 committed; after each crash every
    system holds exactly the earlier batches plus, at most, the struck batch's part (a
    decided batch may be carried out in some systems before the crash), none twice; after
    the last run every id is in its system once and nothing is in doubt anywhere."""
    targets = Targets(services)
    pg_util.write_json_files(tmp_path / "src", [BATCH] * (len(points) + 2))
    routing_id = f"rt-{uuid.uuid4().hex[:12]}"
    options = targets.options(sinkId=routing_id)
    for batch, point in enumerate(points, start=1):
        crashed = _run(tmp_path, options, f"{point}@{batch}")
        assert crashed.returncode == -9, f"{point}: {crashed.stderr[-3000:]}"
        got = targets.committed()
        before = _expected(range(batch * BATCH))
        this = _expected(range(batch * BATCH, (batch + 1) * BATCH))
        for name, ids in got.items():
            assert ids[:len(before[name])] == before[name], f"{point}: {name} lost or doubled earlier: {ids}"
            rest = ids[len(before[name]):]
            assert len(set(rest)) == len(rest) and set(rest) <= set(this[name]), f"{point}: {name}: {rest}"
    done = _run(tmp_path, options)
    assert done.returncode == 0, done.stderr[-3000:]
    assert targets.committed() == _expected(range((len(points) + 2) * BATCH))
    assert targets.in_doubt(routing_id) == []
    struck = (tmp_path / "struck.log").read_text().split()
    assert [s.split("@")[0] for s in struck] == list(points)
