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
from spark_ext.monitoring.cards import ENV as CARDS_ENV
from tests.support import pg_util
from tests.support.processes import driver_report
from tests.support.routing import Targets
from tests.support.sinks import ROUTING_POINTS, carded_rows

pytestmark = [pytest.mark.spark, pytest.mark.services]

BATCH = 30
_SELECT = ("CASE id % 3 WHEN 0 THEN 'ledger' WHEN 1 THEN 'alerts' ELSE 'notes' END AS sink", "id", "v",
           "CAST(id AS STRING) AS key", "CAST(id AS STRING) AS value", "CAST(id AS STRING) AS body")


def _expected(ids: range | list[int]) -> dict[str, list[int]]:
    return {"ledger": [i for i in ids if i % 3 == 0], "alerts": [i for i in ids if i % 3 == 1],
            "notes": [i for i in ids if i % 3 == 2]}


def _run(tmp: Path, options: dict[str, str], failpoint: str = "-", tasks: int = 4,
         ) -> subprocess.CompletedProcess[str]:
    """The query as its own driver process (killed at ``failpoint``), as the conformance
    suite runs it: files of ``tmp / "src"``, one a batch, ``tasks`` tasks a batch."""
    argv = [sys.executable, "-m", "tests.drivers.files_to_sink", str(tmp / "src"), str(tmp / "ckpt"),
            "|".join(_SELECT), failpoint, *(f"{k}={v}" for k, v in options.items())]
    (tmp / "cards").mkdir(exist_ok=True)  # the sinks' metrics cards, as an exporter reads them
    env = {**os.environ, failpoints.LOG_ENV: str(tmp / "struck.log"), "SPARK_EXT_TEST_TASKS": str(tasks),
           CARDS_ENV: str(tmp / "cards")}
    return subprocess.run(argv, start_new_session=True, capture_output=True, text=True, timeout=600,
                          env=env)


_FIRST = ("routing.after_decision",)  # make test: the crash only a take-over's hand-over repairs
_OTHERS = ("routing.before_decision", "kafka.mid_decision", "routing.between_sinks", "routing.mid_commit",
           "routing.after_done")


def test_the_routing_points_the_suite_claims_are_the_ones_struck_here():
    assert set(_FIRST) | set(_OTHERS) >= set(ROUTING_POINTS)


@pytest.mark.parametrize("points", [
    pytest.param(_FIRST, id="after-the-decision"),
    pytest.param(_OTHERS, id="every-other-step", marks=pytest.mark.campaign),
])
def test_kill_9_at_the_routing_steps_leaves_every_system_exactly_once(services, tmp_path, points):
    """Point k strikes in batch k, after batches 0..k-1 committed; after each crash every
    system holds exactly the earlier batches plus, at most, the struck batch's part (a
    decided batch may be carried out in some systems before the crash), none twice; after
    the last run every id is in its system once and nothing is in doubt anywhere, and the
    routing sink's metrics card counts each once."""
    targets = Targets(services)
    pg_util.write_json_files(tmp_path / "src", [BATCH] * (len(points) + 2))
    routing_id = f"rt-{uuid.uuid4().hex[:12]}"
    options = targets.options(sinkId=routing_id)
    for batch, point in enumerate(points, start=1):
        crashed = _run(tmp_path, options, f"{point}@{batch}")
        assert crashed.returncode == -9, f"{point}: {driver_report(crashed)}"
        got = targets.committed()
        before = _expected(range(batch * BATCH))
        this = _expected(range(batch * BATCH, (batch + 1) * BATCH))
        for name, ids in got.items():
            assert ids[:len(before[name])] == before[name], f"{point}: {name} lost or doubled earlier: {ids}"
            rest = ids[len(before[name]):]
            assert len(set(rest)) == len(rest) and set(rest) <= set(this[name]), f"{point}: {name}: {rest}"
    done = _run(tmp_path, options)
    assert done.returncode == 0, driver_report(done)
    assert targets.committed() == _expected(range((len(points) + 2) * BATCH))
    assert targets.in_doubt(routing_id) == []
    assert carded_rows(tmp_path) == (len(points) + 2) * BATCH  # each row in the metrics once
    struck = (tmp_path / "struck.log").read_text().split()
    assert [s.split("@")[0] for s in struck] == list(points)
