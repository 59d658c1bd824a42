"""The sink conformance suite: every sink, against its real service, keeps the guarantees.

Each test runs for every case of ``tests/support/sinks.py``. A query writes files of 40
ids, one batch each; crashes strike after at least one batch committed, so a restart
that wrote a committed batch again would show duplicates, not only a loss.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from spark_ext import formats
from spark_ext.commit import TaskInfo
from spark_ext.errors import ConnectorError, FencedError, NewerFormatError, PredecessorSinkError
from spark_ext.guarantees import Guarantee
from spark_ext.options import checkpoint_sink_id
from tests.support import mysql_util, pg_util
from tests.support.pg_util import write_json_files
from tests.support.processes import driver_report
from tests.support.sinks import (
    CAMPAIGN_ONLY,
    PROTOCOL_POINTS,
    SINKS,
    MariaDbCase,
    PostgresCase,
    SinkCase,
    carded_rows,
    new_query_id,
    plan,
)
from tests.support.sinks import run_driver as _run
from tests.support.status import status
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.spark, pytest.mark.services]

ALL = list(range(120))
BATCH = 40

# The routing sink runs the tests driven by hand in make test and those that run Spark
# queries in make faults (its own steps are killed in turn by tests/test_routing_sink.py).
def _cases(names: Iterable[str], campaign: frozenset[str] = CAMPAIGN_ONLY) -> list[Any]:
    return [pytest.param(s, marks=pytest.mark.campaign) if s in campaign else s for s in names]


ALL_SINKS = _cases(SINKS)
DRIVEN = _cases(SINKS, CAMPAIGN_ONLY | {"routing"})
CRASHED = _cases([s for s in SINKS if s not in ("routing", "dead_letters")])
# The queue sink's 16-task shape (48 s) runs in make faults, for make test's 20 minutes: the
# conformance suite kills it at its key steps in make test, and make faults also runs it at 200
# tasks and in the kafka_to_jms_16tasks pipeline.
SHAPED = _cases(SINKS, CAMPAIGN_ONLY | {"routing", "jms", "jdbc"})


@pytest.fixture
def make_case(services):
    return lambda name: SINKS[name](services)


def _struck(tmp: Path) -> list[str]:
    """The crash points that fired, in order (the failpoints' own log)."""
    log = tmp / "struck.log"
    return log.read_text().split() if log.exists() else []


def _query(spark, case: SinkCase, tmp: Path, options: dict[str, str]):
    """The same query in this test session's Spark: one batch a file, 3 tasks a batch."""
    df = spark.readStream.schema("id long, v string").option("maxFilesPerTrigger", 1).json(str(tmp / "src"))
    w = (df.repartition(3, "id").selectExpr(*case.select).writeStream.format("hzsink")
         .option("checkpointLocation", str(tmp / "ckpt")).trigger(availableNow=True))
    for k, v in options.items():
        w = w.option(k, v)
    return w


def _refusal(spark, case: SinkCase, tmp: Path, target: str, checkpoint: Path) -> str:
    """The error of the driver's query started from ``checkpoint`` in this session's Spark,
    which must refuse it as it starts (before its first batch writes anything)."""
    from pyspark.errors import StreamingQueryException

    w = _query(spark, case, tmp, case.options(target)).option("checkpointLocation", str(checkpoint))
    q = w.start()
    try:
        q.awaitTermination(180)
    except StreamingQueryException as e:
        return str(e)
    finally:
        q.stop()
    raise AssertionError(f"the copy ran on as a new sink (query ended without an error: {q.exception()})")


# The steps make test kills: after the decision (only the restart's take-over can finish the
# batch; a copy of the checkpoint is refused there) and after the batch was carried out
# (Spark replays a batch the sink already committed). make faults kills every step in turn.
KEY_STEPS = ("after_decision", "after_done")


@pytest.mark.parametrize("sink", CRASHED)
@pytest.mark.parametrize("every_step", [pytest.param(False, id="key-steps"),
                                        pytest.param(True, id="every-step", marks=pytest.mark.campaign)])
def test_kill_9_at_each_step_in_turn_and_a_retried_task_are_exactly_once(spark, make_case, tmp_path, sink,
                                                                       every_step, capsys, monkeypatch):
    """The driver is killed at every crash point of the sink in turn (at ``KEY_STEPS`` in
    make test), point k in batch k, each time after the batches before it committed (so a
    rewrite shows as a duplicate), and restarted from its checkpoint; after each crash the
    committed output is checked, after the last run every id is there once and nothing is
    in doubt. One restart serves
    as the recovery of one crash and the run that reaches the next point. The second run
    names the checkpoint ``file:<path>/``: Spark takes it for the same checkpoint, so the
    sink must too (else what the first run left in doubt would stay there). In the last
    run a task is killed after it prepared, and Spark retries it. ``spark-ext status`` shows
    the batch killed after its decision as decided, not finished, with exactly what the sink
    left in doubt, and at the end the last batch finished, nothing in doubt, the same query
    and a higher epoch (the restarts fenced the dead runs); the sink's metrics card counts
    every row once. A copy of the checkpoint started
    after the crash past the decision is refused, naming the sink the query ran as; the
    later runs take the way out the message names."""
    case = make_case(sink)
    target = case.new_target()
    steps = PROTOCOL_POINTS if every_step else KEY_STEPS
    points = [*(f"{case.name}.{p}" for p in steps), *(case.extra_points if every_step else ())]
    write_json_files(tmp_path / "src", [BATCH] * (len(points) + 2))
    ckpt, extra = tmp_path / "ckpt", dict[str, str]()  # the copy and its options, once carried on
    for batch, point in enumerate(points, start=1):
        # the checkpoint in use (the copy, once carried on to it), spelled another way
        spelled = f"file:{ckpt}/" if batch == 2 else str(ckpt)
        crashed = _run(case, tmp_path, target, f"{point}@{batch}", spelled, **extra)
        assert crashed.returncode == -9, f"{point}: {driver_report(crashed)}"  # killed at the point
        before, this = list(range(batch * BATCH)), range(batch * BATCH, (batch + 1) * BATCH)
        visible = case.committed(target)
        assert visible[:len(before)] == before, f"{point}: earlier batches lost or twice: {visible}"
        rest = visible[len(before):]
        assert len(set(rest)) == len(rest) and set(rest) <= set(this), f"{point}: {rest}"
        if point.endswith(".after_done"):
            assert rest == list(this), point  # committed; Spark's commit log not yet written
        elif point.endswith(".mid_commit"):
            assert len(rest) < BATCH, point  # part of the batch at most
        else:
            assert rest == [], point  # nothing of the batch before its decision was carried out
        if point.endswith((".before_decision", ".after_decision")):
            assert case.in_doubt(tmp_path / "ckpt", target), f"{point}: nothing left in doubt"
        if point.endswith(".after_decision"):
            stuck = status(case, target, tmp_path / "ckpt", capsys, monkeypatch)
            assert (stuck["batch"], stuck["finished"]) == (batch, False), stuck
            assert set(stuck["in_doubt_ids"]) == set(case.in_doubt(tmp_path / "ckpt", target)), stuck
            assert stuck["in_doubt"] == len(stuck["in_doubt_ids"]) and stuck["query"], stuck
            # The checkpoint copied elsewhere (same query id, another sink): refused, naming the
            # old sink, with nothing of the batch written; the runs after it take the way out
            # the message names.
            copy = tmp_path / "copy" / "ckpt"
            shutil.copytree(ckpt, copy)
            refused = _refusal(spark, case, tmp_path, target, copy)  # in this session: no driver to kill
            assert case.predecessor(ckpt) in refused, refused
            assert case.committed(target) == visible, "the refused copy wrote rows"
            assert case.in_doubt(copy, target) == [], "the refused copy left its batch in doubt"
            ckpt, extra = case.carry_on(ckpt, copy)
    # The last run also loses a task after it prepared, in its last batch: Spark retries it.
    last = len(points) + 1
    done = _run(case, tmp_path, target, f"task:{case.task_point}@{last}", str(ckpt), **extra)
    assert done.returncode == 0, driver_report(done)
    assert case.committed(target) == list(range((last + 1) * BATCH))  # nothing lost or twice
    assert case.in_doubt(tmp_path / "ckpt", target) == []  # the killed attempt's transaction too
    # The metrics count every committed row once: those of the batches a take-over finished
    # and of the batch killed after its commit, before its card, too.
    assert carded_rows(tmp_path) == (last + 1) * BATCH
    after = status(case, target, tmp_path / "ckpt", capsys, monkeypatch)
    assert (after["batch"], after["finished"], after["in_doubt"]) == (last, True, 0), after
    assert after["in_doubt_ids"] == [], after
    assert after["query"] == stuck["query"] and after["epoch"] > stuck["epoch"], (stuck, after)
    # every fault struck (tasks running side by side may both reach a point before the kill)
    assert list(dict.fromkeys(_struck(tmp_path))) == [*(f"{p}@{b}" for b, p in enumerate(points, start=1)),
                                                      f"task:{case.task_point}@{last}"]


# Tasks a batch, and whether the sink's ids are the longest it takes: 16 (a 12-to-32-partition
# topic's worth, most tasks with rows, some without) under the longest ids in make test; one
# task, and Spark's default 200 after a shuffle, in make faults (below). The jdbc sink's 16
# runs in make faults too, for make test's 20 minutes: its protocol is killed at its key steps
# in make test, and the Kafka sink's 16 stays there.
SHAPES = [(16, True)]


@pytest.mark.parametrize("sink", SHAPED)
@pytest.mark.parametrize(("tasks", "long_ids"), SHAPES, ids=[f"{t}tasks{'-longids' if lg else ''}"
                                                             for t, lg in SHAPES])
def test_exactly_once_at_production_shapes(make_case, tmp_path, sink, tasks, long_ids):
    """kill -9 after batch 1's decision, with batch 0 committed, at the shapes where the
    protocol's own data grows: a decision naming every winning task, ids of the longest
    length the connector takes (inside every transaction name, token and decision), and
    tasks that get no rows. The restart finishes batch 1 and writes the rest: every id once,
    nothing in doubt."""
    check_shape(make_case(sink), tmp_path, tasks, long_ids)


@pytest.mark.campaign  # 200 tasks: a few minutes a sink on 2 cores; make faults runs these
@pytest.mark.parametrize("sink", ALL_SINKS)
@pytest.mark.parametrize(("tasks", "long_ids"), [(1, False), (200, True)], ids=["1task", "200tasks-longids"])
def test_exactly_once_at_more_shapes(make_case, tmp_path, sink, tasks, long_ids):
    """The same at one task a batch, and at 200 under the longest ids: what any shuffle
    gives at Spark's default spark.sql.shuffle.partitions."""
    check_shape(make_case(sink), tmp_path, tasks, long_ids)


def check_shape(case, tmp_path: Path, tasks: int, long_ids: bool) -> None:
    target = case.new_target()
    per_batch = max(BATCH, 3 * tasks)  # hashed by id: most tasks get rows
    write_json_files(tmp_path / "src", [per_batch] * 3)
    everything = list(range(3 * per_batch))
    sink_id = case.long_id() if long_ids else None
    extra = {case.id_option: sink_id} if sink_id else {}

    def in_doubt() -> list[str]:
        return case.in_doubt_of(sink_id, target) if sink_id else case.in_doubt(tmp_path / "ckpt", target)

    crashed = _run(case, tmp_path, target, f"{case.name}.after_decision@1", tasks=str(tasks), **extra)
    assert crashed.returncode == -9, driver_report(crashed)
    assert case.committed(target) == everything[:per_batch]  # batch 0 only, so far
    assert in_doubt(), "batch 1 was decided: its transactions are in doubt"
    done = _run(case, tmp_path, target, tasks=str(tasks), **extra)
    assert done.returncode == 0, driver_report(done)
    assert case.committed(target) == everything  # nothing lost, nothing twice
    assert in_doubt() == []


@pytest.mark.compat
@pytest.mark.compat_only  # the test above strikes the same point on the newest release
@pytest.mark.parametrize("sink", ["kafka", "jdbc"])
def test_a_kill_9_after_a_decision_then_a_restart_is_exactly_once(make_case, tmp_path, sink):
    """The driver dies after batch 1's decision (batch 0 committed), before any of it was
    carried out; the restart carries it out and writes the rest, every id once."""
    case = make_case(sink)
    target = case.new_target()
    write_json_files(tmp_path / "src", [BATCH, BATCH, BATCH])
    crashed = _run(case, tmp_path, target, f"{case.name}.after_decision@1")
    assert crashed.returncode == -9, driver_report(crashed)
    assert case.committed(target) == list(range(BATCH))  # batch 0 only, so far
    assert case.in_doubt(tmp_path / "ckpt", target), "batch 1 was decided: its transactions are in doubt"
    done = _run(case, tmp_path, target)
    assert done.returncode == 0, driver_report(done)
    assert case.committed(target) == ALL  # nothing lost, nothing twice
    assert case.in_doubt(tmp_path / "ckpt", target) == []


@pytest.mark.parametrize("sink", ALL_SINKS)
def test_a_zombie_run_can_neither_prepare_nor_commit(make_case, tmp_path, sink):
    """Run A prepares batch 0; run B of the same sink takes over; A is fenced at the commit
    and at a later prepare; B writes batch 0 and commits it; only B's rows are visible."""
    qid = new_query_id()  # unique, as Spark's are: sinks look each other up by it
    case = make_case(sink)
    target = case.new_target()
    ckpt = tmp_path / "ckpt"
    plan_a = plan(case, target, ckpt)
    prepared_by_a = plan_a.new_writer().write(iter([case.rows([1, 2])]), TaskInfo(qid, 0, 0, 0, 1))
    plan_b = plan(case, target, ckpt)  # B's take-over
    with pytest.raises(FencedError):
        plan_a.new_committer().commit([prepared_by_a], 0, plan_a.claim)
    written_by_b = plan_b.new_writer().write(iter([case.rows([3])]), TaskInfo(qid, 0, 0, 0, 2))
    plan_b.new_committer().commit([written_by_b], 0, plan_b.claim)
    late_a = plan_a.new_writer()  # a stale task of A after B committed
    try:
        stale = late_a.write(iter([case.rows([4])]), TaskInfo(qid, 1, 0, 0, 3))
    except FencedError:
        pass
    else:
        with pytest.raises(FencedError):
            plan_a.new_committer().commit([stale], 1, plan_a.claim)
    assert case.committed(target) == [3]
    plan(case, target, ckpt)  # the next take-over resolves what A's stale task left
    assert case.in_doubt(ckpt, target) == []


@pytest.mark.parametrize("sink", ALL_SINKS)
def test_a_weaker_guarantee_is_refused_while_an_exactly_once_run_left_a_batch_in_doubt(make_case, tmp_path,
                                                                                       sink):
    """An exactly_once run prepared (staged) a batch and died; the operator restarts with a
    weaker guarantee, which takes nothing over, so what was left would stay in doubt (and a
    decided batch be written again now and finished a second time by a later exactly_once
    run). Refused at start, naming the ways out; after one exactly_once take-over the
    weaker guarantee starts."""
    case = make_case(sink)
    target = case.new_target()
    ckpt = tmp_path / "ckpt"
    exactly = plan(case, target, ckpt)
    exactly.new_writer().write(iter([case.rows([1, 2])]), TaskInfo(new_query_id(), 0, 0, 0, 1))
    for weaker in (Guarantee.AT_LEAST_ONCE, Guarantee.NONE):
        with pytest.raises(ConnectorError, match=r"exactly_once to finish them.*doctor"):
            plan(case, target, ckpt, weaker)
    plan(case, target, ckpt)  # the take-over rolls back what was left
    plan(case, target, ckpt, Guarantee.AT_LEAST_ONCE)
    assert case.committed(target) == [] and case.in_doubt(ckpt, target) == []


@pytest.mark.parametrize("sink", DRIVEN)
@pytest.mark.parametrize("guarantee", ["at_least_once", "none"])
def test_weaker_guarantees_write_every_record(spark, make_case, tmp_path, sink, guarantee):
    case = make_case(sink)
    target = case.new_target()
    write_json_files(tmp_path / "src", [40, 40, 40])
    q = _query(spark, case, tmp_path, {**case.options(target), "guarantee": guarantee}).start()
    assert q.awaitTermination(180), "still running after 180 s"
    assert q.exception() is None, q.exception()
    assert case.committed(target) == ALL  # none too: its writers flush before the task ends


def _commit_one(case: SinkCase, target: str, checkpoint: Path, query_id: str, batch_id: int,
                ids: list[int]) -> None:
    """One batch of one task, driven through the sink's steps as Spark calls them."""
    batch = plan(case, target, checkpoint)
    msg = batch.new_writer().write(iter([case.rows(ids)]), TaskInfo(query_id, batch_id, 0, 0, batch_id + 1))
    batch.new_committer().commit([msg], batch_id, batch.claim)


@pytest.mark.parametrize("sink", ALL_SINKS)
def test_exactly_once_writes_to_a_target_of_the_longest_name(make_case, tmp_path, sink):
    """A topic, table or queue named as long as the service allows (Kafka 249 characters,
    PostgreSQL 63 bytes, a 255-character queue): the names the sink derives from it stay
    apart and within the service's limits."""
    case = make_case(sink)
    target = case.new_target(longest=True)
    _commit_one(case, target, tmp_path / "ckpt", new_query_id(), 0, [1, 2])
    assert case.committed(target) == [1, 2]
    assert case.in_doubt(tmp_path / "ckpt", target) == []


@pytest.mark.parametrize("sink", ALL_SINKS)
def test_a_newer_releases_sink_stops_only_the_query_it_ran(make_case, tmp_path, monkeypatch, sink):
    """A system shared by queries on two releases: a sink of one query ran with a newer
    release, whose every format is a version ahead. A query of this release under another
    identity starts and commits its batch (its search for its own earlier identities passes
    over a record it cannot read, but whose query it can); the newer sink's own query,
    moved here under a new identity (a copied checkpoint) while its batch was not yet in
    Spark's commit log, is refused: naming the versions where the search cannot read the
    newer record, naming the old identity where it need not; nothing of the batch committed."""
    case = make_case(sink)
    target = case.new_target()
    theirs, ours = new_query_id(), new_query_id()
    with monkeypatch.context() as newer:
        for name in dir(formats):
            f = getattr(formats, name)
            if isinstance(f, formats.Format):
                newer.setattr(formats, name, dataclasses.replace(f, current=f.current + 1))
        _commit_one(case, target, tmp_path / "newer", theirs, 0, [1, 2])
    _commit_one(case, target, tmp_path / "ours", ours, 0, [3, 4])
    assert case.committed(target) == [1, 2, 3, 4]
    with pytest.raises((NewerFormatError, PredecessorSinkError),
                       match=r"written by a newer release|ran before"):
        _commit_one(case, target, tmp_path / "moved", theirs, 0, [5])
    assert case.committed(target) == [1, 2, 3, 4]
    assert case.in_doubt(tmp_path / "moved", target) == []


# A megabyte record: under the limits the targets have by default (Kafka's max.message.bytes
# is 1,048,588 bytes, a whole record batch included).
MEGABYTE = 1_000_000


@pytest.mark.parametrize("sink", DRIVEN)
@pytest.mark.parametrize("guarantee", list(Guarantee))
def test_every_guarantee_writes_empty_and_megabyte_records_from_16_tasks(make_case, tmp_path, sink,
                                                                        guarantee):
    """A batch of 16 tasks (the last three without rows) whose records carry payloads of 0
    bytes, 100 bytes and a megabyte: every record lands once, byte for byte, under every
    guarantee. (Through the sink's own steps, as Spark calls them, without a query: the
    payload is the sink's concern, and a megabyte a row is slow through a local query.)"""
    case = make_case(sink)
    target = case.new_target()
    batch = plan(case, target, tmp_path / "ckpt", guarantee, case.sized_schema())
    ids = list(range(26))
    sizes = [(0, MEGABYTE, 100)[i % 3] for i in ids]
    qid = new_query_id()
    msgs = []
    for p in range(16):
        mine = [i for i in ids if i % 13 == p]
        rows = case.sized_rows(mine, [sizes[i] for i in mine])
        msgs.append(batch.new_writer().write(iter([rows] if mine else []), TaskInfo(qid, 0, p, 0, p + 1)))
    batch.new_committer().commit(msgs, 0, batch.claim)
    if guarantee is Guarantee.NONE and sink.startswith("kafka"):  # acks=0: maybe not appended yet
        # (the queue case's read consumes, so it is read once, below)
        wait_for(lambda: len(case.committed_sizes(target)) >= len(ids), "every record to be appended", 60)
    assert case.committed_sizes(target) == list(zip(ids, sizes, strict=True))
    if guarantee is Guarantee.EXACTLY_ONCE:
        assert case.in_doubt(tmp_path / "ckpt", target) == []


# make test runs the jdbc sink's case; the others, the same path through their own writers, in make faults.
@pytest.mark.parametrize("sink", [s if s == "jdbc" else pytest.param(s, marks=pytest.mark.campaign)
                                  for s in SINKS])
def test_at_least_once_loses_nothing_when_the_driver_dies_after_the_rows_landed(make_case, tmp_path, sink):
    case = make_case(sink)
    target = case.new_target()
    write_json_files(tmp_path / "src", [40, 40, 40])
    crashed = _run(case, tmp_path, target, f"{case.written_point}@1", guarantee="at_least_once")
    assert crashed.returncode == -9, driver_report(crashed)
    landed = case.committed(target)
    assert landed[:40] == list(range(40)) and len(landed) > 40  # batch 0, and some of batch 1
    done = _run(case, tmp_path, target, guarantee="at_least_once")
    assert done.returncode == 0, driver_report(done)
    assert set(case.committed(target)) == set(ALL)  # nothing lost (duplicates are allowed)


@pytest.mark.parametrize("sink", ALL_SINKS)
@pytest.mark.parametrize(("option", "value", "named"), [
    ("guarantee", "twice", "exactly_once, at_least_once, none"),
    ("bogusOption", "1", "bogusoption"),
])
def test_bad_options_fail_at_start_and_write_nothing(spark, make_case, tmp_path, sink, option, value, named):
    case = make_case(sink)
    target = case.new_target()
    write_json_files(tmp_path / "src", [10])
    w = _query(spark, case, tmp_path, {**case.options(target), option: value})
    with pytest.raises(Exception, match=named):  # Spark wraps our error in its own
        w.start().awaitTermination(120)
    assert case.committed(target) == []


def _set_decision_version(case: PostgresCase, sink_id: str, old: int, new: int) -> None:
    """Rewrite the format version of the jdbc sink's decision rows, as a newer release would
    have written them (the tests' own SQL, one row at a time by its key: on MariaDB a range
    update waits on the locks of the prepared transactions' marker rows)."""
    db = mysql_util if isinstance(case, MariaDbCase) else pg_util
    rows = db.query(case.admin, "SELECT query_id, batch_id FROM spark_ext_commits WHERE sink_id = "
                                f"'{sink_id}' AND partition_id = -1")
    assert rows, f"sink {sink_id} decided nothing"
    for query_id, batch_id in rows:
        db.execute(case.admin, f"UPDATE spark_ext_commits SET winners = replace(winners, '{{\"v\": {old},', "
                               f"'{{\"v\": {new},') WHERE sink_id = '{sink_id}' AND query_id = '{query_id}' "
                               f"AND batch_id = {batch_id} AND partition_id = -1 AND attempt = -1")


def _set_kafka_decision_version(case: SinkCase, checkpoint: Path, target: str, old: int, new: int) -> None:
    """The same for the Kafka sink: its decision (and the kept copy) is offset metadata of the
    sink's commit groups, rewritten with a plain offset commit as the tests' own edit."""
    from spark_ext.connectors.kafka.sink.committer import KEEP_MS, KafkaCommitter
    from spark_ext.connectors.kafka.sink.config import KafkaSinkConfig

    cfg = KafkaSinkConfig.parse(case.plan_options(target, checkpoint), Guarantee.EXACTLY_ONCE)
    committer = KafkaCommitter(cfg)
    assert cfg.commit_topic
    with committer.connected():
        for group in (cfg.group, cfg.group + ".kept"):
            off, meta = committer.client.fetch_offsets(group, cfg.commit_topic, [0]).get(0, (-1, ""))
            assert off >= 0 and f'"v":{old},' in meta, (group, meta)  # one part: small batches
            committer.client.keep_offsets(group, {(cfg.commit_topic, 0): (off, meta.replace(
                f'"v":{old},', f'"v":{new},'))}, KEEP_MS)


# make faults: make test refuses every corpus state one version ahead (test_corpus.py, 13 s);
# this one also finishes the batch once the newer release has (its version put back).
@pytest.mark.campaign
@pytest.mark.parametrize("sink", ["jdbc", "kafka", "mariadb"])
def test_a_decision_of_a_newer_release_is_refused_at_start_leaving_the_batch_for_it(make_case, tmp_path,
                                                                                   sink):
    """A release meets its sink's newest decision written in a newer format (a downgrade, or
    one executor host left behind): killed after deciding batch 1, then restarted with the
    decision one version ahead, the query fails as it starts, naming the versions and the
    fix, before it touches the decided batch's transactions (still prepared: the newer
    release finishes them). Once that release has (here: the row's version put back),
    every batch is there once."""
    case = make_case(sink)
    target = case.new_target()
    write_json_files(tmp_path / "src", [BATCH] * 3)
    sink_id = checkpoint_sink_id(str(tmp_path / "ckpt"))

    def set_version(old: int, new: int) -> None:
        if isinstance(case, PostgresCase):
            _set_decision_version(case, sink_id, old, new)
        else:
            _set_kafka_decision_version(case, tmp_path / "ckpt", target, old, new)

    crashed = _run(case, tmp_path, target, f"{case.name}.after_decision@1")
    assert crashed.returncode == -9, driver_report(crashed)
    doubt = case.in_doubt(tmp_path / "ckpt", target)
    assert doubt and case.committed(target) == list(range(BATCH))
    set_version(1, 2)
    refused = _run(case, tmp_path, target)
    said = driver_report(refused)
    assert refused.returncode != 0 and "NewerFormatError" in said, said
    assert "in format version 2, written by a newer release" in said and "reads versions 1 to 1" in said, said
    assert case.committed(target) == list(range(BATCH)) and case.in_doubt(tmp_path / "ckpt", target) == doubt
    set_version(2, 1)
    done = _run(case, tmp_path, target)
    assert done.returncode == 0, driver_report(done)
    assert case.committed(target) == list(range(3 * BATCH)) and case.in_doubt(tmp_path / "ckpt", target) == []
