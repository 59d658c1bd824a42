"""``spark-ext status`` against the real PostgreSQL, Kafka and Artemis: a running query's
sink, and a sink left in doubt by a ``kill -9`` right after a decision, then finished by
the restart. Every sink of ``tests/support/sinks.py``, through the console script's
entry point (``cli.main``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from spark_ext import cli
from spark_ext.connectors.jms.doctor import PASSWORD_ENV
from spark_ext.options import checkpoint_sink_id
from tests.support import kafka_sink
from tests.support.pg_util import write_json_files
from tests.support.sinks import SINKS, SinkCase
from tests.support.sinks import run_driver as _run
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.spark, pytest.mark.services]

BATCH = 40  # ids a file, one file a batch


@pytest.fixture
def make_case(services):
    return lambda name: SINKS[name](services)


def _where(case: SinkCase, target: str, ckpt: Path) -> list[str]:
    """The connection arguments the doctor takes, for the sink of this checkpoint."""
    s = case.services
    if case.name == "jdbc":
        return ["--url", s.postgres_url, "--sink", checkpoint_sink_id(str(ckpt))]
    if case.name == "kafka":
        return ["--bootstrap", s.kafka_bootstrap, "--prefix", kafka_sink.prefix_of(ckpt), "--topic", target]
    return ["--broker", f"stomp://{s.stomp_host}:{s.stomp_port}", "--user", s.stomp_user,
            "--checkpoint", str(ckpt), "--destination", target]


def _secrets(case: SinkCase) -> list[str]:
    s = case.services
    return [p for p in (make_url(s.postgres_url).password, s.stomp_password) if p]


def _status(case: SinkCase, target: str, ckpt: Path, capsys, monkeypatch) -> dict[str, Any]:
    """``spark-ext status <sink> ... --json``: the one sink's entry; the table names it too."""
    monkeypatch.setenv(PASSWORD_ENV, case.services.stomp_password)
    assert cli.main(["status", case.name, *_where(case, target, ckpt), "--json"]) == 0
    out = capsys.readouterr().out
    doc = json.loads(out)
    assert doc["connector"] == case.name and len(doc["sinks"]) == 1, doc
    assert cli.main(["status", case.name, *_where(case, target, ckpt)]) == 0
    table = capsys.readouterr().out
    assert f"spark-ext status {case.name}" in table and doc["sinks"][0]["batch"] is not None
    for secret in _secrets(case):
        assert secret not in out and secret not in table
    return dict(doc["sinks"][0])


def _targets(case: SinkCase, target: str) -> set[str]:
    return {target, f"public.{target}"} if case.name == "jdbc" else {target}


@pytest.mark.parametrize("sink", list(SINKS))
def test_status_after_a_kill_9_past_the_decision_shows_the_batch_in_doubt_then_finished(
        make_case, tmp_path, sink, capsys, monkeypatch):
    """The driver dies right after deciding batch 1 (batch 0 committed): status shows
    batch 1 decided, not finished, with exactly the transactions the sink left in doubt.
    The restart finishes it and writes batch 2: status shows batch 2 finished, nothing in
    doubt, the same query, and a higher epoch (the restart fenced the dead run)."""
    case = make_case(sink)
    target = case.new_target()
    ckpt = tmp_path / "ckpt"
    write_json_files(tmp_path / "src", [BATCH, BATCH, BATCH])
    crashed = _run(case, tmp_path, target, f"{sink}.after_decision@1")
    assert crashed.returncode == -9, crashed.stderr[-2000:]
    left = set(case.in_doubt(ckpt, target))
    assert left, "batch 1 was decided: its transactions are in doubt"

    stuck = _status(case, target, ckpt, capsys, monkeypatch)
    assert stuck["batch"] == 1 and stuck["finished"] is False, stuck
    assert stuck["in_doubt"] == len(stuck["in_doubt_ids"]) and set(stuck["in_doubt_ids"]) == left, stuck
    assert stuck["query"] and isinstance(stuck["epoch"], int), stuck
    assert stuck["target"] in _targets(case, target), stuck

    done = _run(case, tmp_path, target)
    assert done.returncode == 0, done.stderr[-3000:]
    after = _status(case, target, ckpt, capsys, monkeypatch)
    assert (after["batch"], after["finished"], after["in_doubt"], after["in_doubt_ids"]) == (2, True, 0, [])
    assert after["query"] == stuck["query"] and after["epoch"] > stuck["epoch"], (stuck, after)
    assert after["sink"] == stuck["sink"] and after["target"] == stuck["target"]


@pytest.mark.parametrize("sink", list(SINKS))
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
        running = _status(case, target, ckpt, capsys, monkeypatch)
        assert q.isActive, q.exception()
    finally:
        q.stop()
    assert running["query"] == str(q.id) and running["batch"] == 1, running
    assert running["finished"] is True and running["in_doubt"] == 0, running
    assert running["target"] in _targets(case, target) and isinstance(running["epoch"], int), running
