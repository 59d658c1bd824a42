"""``spark-ext status`` against the real PostgreSQL, Kafka and Artemis: a running query's
sink. (A sink left in doubt by a ``kill -9`` right after a decision, then finished by
the restart, is checked in the conformance suite's kill sequence.) Every sink of
``tests/support/sinks.py``, through the console script's entry point (``cli.main``)."""

from __future__ import annotations

import pytest

from tests.support.pg_util import write_json_files
from tests.support.sinks import SINKS
from tests.support.status import status, targets
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.spark, pytest.mark.services]

BATCH = 40  # ids a file, one file a batch


@pytest.fixture
def make_case(services):
    return lambda name: SINKS[name](services)


# The routing sink's status and its dead letters': tests/test_routing_plan.py, tests/test_dead_letters.py
@pytest.mark.parametrize("sink", [s for s in SINKS if s not in ("routing", "dead_letters")])
def test_status_shows_a_running_querys_sink(spark, make_case, tmp_path, sink, capsys, monkeypatch):
    """While the query runs (idle between triggers): its last batch, its query id, finished."""
    case = make_case(sink)
    target = case.new_target()
    ckpt = tmp_path / "ckpt"
    write_json_files(tmp_path / "src", [BATCH, BATCH])
    src = str(tmp_path / "src")
    df = spark.readStream.schema("id long, v string").option("maxFilesPerTrigger", 1).json(src)
    w = (df.repartition(3, "id").selectExpr(*case.select).writeStream.format("hzsink")
         .option("checkpointLocation", str(ckpt)).trigger(processingTime="500 milliseconds"))
    for k, v in case.options(target).items():
        w = w.option(k, v)
    q = w.start()
    try:
        wait_for(lambda: len([p for p in q.recentProgress if p["numInputRows"]]) >= 2 or not q.isActive,
                 "two batches with rows")
        assert q.isActive, q.exception()
        running = status(case, target, ckpt, capsys, monkeypatch)
        assert q.isActive, q.exception()
    finally:
        q.stop()
    assert running["query"] == str(q.id) and running["batch"] == 1, running
    assert running["finished"] is True and running["in_doubt"] == 0, running
    assert running["target"] in targets(case, target) and isinstance(running["epoch"], int), running
