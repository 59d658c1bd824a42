"""The Kafka sink against the real local broker, in real Spark queries."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from spark_ext.connectors.kafka.client.transactions import KafkaTxnClient
from spark_ext.connectors.kafka.sink.committer import TransactionTimedOutError
from spark_ext.errors import FencedError
from tests.support.kafka_sink import (
    consume,
    end_offsets,
    open_transactions,
    prefix_of,
    prepare_batch,
    read_all,
    run,
    sink_plan,
)
from tests.support.kafka_util import create_topic
from tests.support.pg_util import write_json_files
from tests.support.processes import driver_report

pytestmark = [pytest.mark.spark, pytest.mark.services]


SECURED = pytest.mark.parametrize("listener", ["plaintext", "sasl_ssl"], indirect=True)


@SECURED
def test_exactly_once_every_record_once_in_kafkas_partition_layout(spark, services, tmp_path, listener):
    """On the plain and the SASL_SSL (SCRAM, TLS) listener alike; read back by kafka-python
    with the same credentials, read_committed."""
    topic = create_topic(services.kafka_bootstrap, 4, "sink")
    write_json_files(tmp_path / "src", [300, 500, 11])
    q = run(spark, tmp_path / "src", tmp_path / "ckpt", listener.bootstrap, topic,
            extra=listener.spark_options())
    assert q.awaitTermination(180), "still running after 180 s"
    assert q.exception() is None, q.exception()
    got = consume(listener, topic)
    assert sorted(int(v[1:]) for _, _, v in got) == list(range(811))  # each once
    # the partition Kafka's own default partitioner picks for each key
    for part, key, _ in got:
        assert key is not None
        assert part == (kafka_python_murmur2(key) & 0x7FFFFFFF) % 4
    assert open_transactions(listener, prefix_of(tmp_path / "ckpt")) == []


def test_headers_topic_and_partition_columns(spark, services, tmp_path):
    bootstrap = services.kafka_bootstrap
    a, b = create_topic(bootstrap, 2, "ta"), create_topic(bootstrap, 3, "tb")
    write_json_files(tmp_path / "src", [40])
    select = (
        f"IF(id % 2 = 0, '{a}', '{b}') AS topic", "CAST(v AS BINARY) AS value",
        "IF(id % 5 = 0, CAST(1 AS INT), CAST(NULL AS INT)) AS partition",
        "array(named_struct('key', 'h', 'value', CAST(id AS STRING) ::binary)) AS headers",
    )
    q = run(spark, tmp_path / "src", tmp_path / "ckpt", bootstrap, "", select, commitTopic=a)
    assert q.awaitTermination(180), "still running after 180 s"
    assert q.exception() is None, q.exception()
    ra, rb = consume(bootstrap, a), consume(bootstrap, b)
    assert sorted(int(v[1:]) for _, _, v in ra) == list(range(0, 40, 2))
    assert sorted(int(v[1:]) for _, _, v in rb) == list(range(1, 40, 2))
    assert all(p == 1 for p, _, v in ra + rb if int(v[1:]) % 5 == 0)
    msgs = read_all(bootstrap, a)
    assert len(msgs) == 20
    assert all(m.headers == [("h", m.value[1:])] for m in msgs)


@SECURED
def test_task_failure_commits_nothing_of_the_batch_then_restart_writes_it_once(spark, services, tmp_path,
                                                                               listener):
    """A task fails after producing some records (the broker refuses its last row, larger
    than message.max.bytes): read_committed sees none of the batch, read_uncommitted sees the aborted
    records; the restart (row fixed) writes the batch once."""
    bootstrap = listener.bootstrap
    topic = create_topic(services.kafka_bootstrap, 3, "tf")
    write_json_files(tmp_path / "src", [50, 3000])
    flag = tmp_path / "fail"
    flag.write_text("1")
    from pyspark.sql import functions as F

    @F.udf("string")
    def value(i: int, v: str) -> str:
        return "x" * 2_000_000 if i == 3049 and os.path.exists(str(flag)) else v

    def start():
        df = spark.readStream.schema("id long, v string").option("maxFilesPerTrigger", 1).json(
            str(tmp_path / "src"))
        out = df.repartition(1).select(F.col("id").cast("string").alias("key"),
                                       value("id", "v").alias("value"))
        w = (out.writeStream.format("hzsink").option("connector", "kafka")
             .option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
             .option("kafka.batch.size", "4096")  # many small batches: some reach the broker first
             .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True))
        for k, v in listener.spark_options().items():
            w = w.option(k, v)
        return w.start()

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "500")  # records flow before the failure
    try:
        q = start()
        with pytest.raises(Exception, match=r"Kafka refused a record batch of 2,000,\d+ bytes \(1 record"):
            assert q.awaitTermination(180), "still running after 180 s"
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert sorted(int(v[1:]) for _, _, v in consume(listener, topic)) == list(range(50))
    uncommitted = consume(listener, topic, committed=False)
    assert len(uncommitted) > 50, "the failed task's records reached the broker, in an aborted transaction"
    assert open_transactions(listener, prefix_of(tmp_path / "ckpt")) == []
    flag.unlink()
    q = start()
    assert q.awaitTermination(180), "still running after 180 s"
    assert q.exception() is None
    assert sorted(int(v[1:]) for _, _, v in consume(listener, topic)) == list(range(3050))
    assert open_transactions(listener, prefix_of(tmp_path / "ckpt")) == []


@pytest.mark.campaign  # make faults; make test's conformance suite crashes every point on plain text
@pytest.mark.parametrize("point,listener", [("kafka.after_decision", "sasl_ssl")], indirect=["listener"])
def test_kill_9_of_the_driver_then_restart_is_exactly_once_over_sasl_ssl(services, tmp_path, point, listener):
    """The conformance suite crashes every point on plain text; this one crashes over
    SASL_SSL, where the committer and the recovery authenticate. The driver dies in batch
    1, after batch 0 committed, so a rewrite of a committed batch would show as duplicates."""
    bootstrap = listener.bootstrap
    topic = create_topic(services.kafka_bootstrap, 3, "k9")
    write_json_files(tmp_path / "src", [40, 40, 40])
    argv = [sys.executable, "-m", "tests.drivers.files_to_kafka", str(tmp_path / "src"),
            str(tmp_path / "ckpt"), bootstrap, topic]
    options = [f"{k}={v}" for k, v in listener.spark_options().items()]
    crashed = subprocess.run([*argv, f"{point}@1", *options], start_new_session=True, capture_output=True,
                             text=True, timeout=300)
    assert crashed.returncode == -9, driver_report(crashed)  # killed at the failpoint
    prefix = prefix_of(tmp_path / "ckpt")
    assert open_transactions(listener, prefix), "the crash should leave transactions open"
    visible = sorted(int(v) for _, _, v in consume(listener, topic))
    if point == "kafka.mid_commit":
        # batch 0, and whatever of batch 1's first winner lies below the last stable offsets
        # (the still-open winners hold them back): never more than batch 1, never twice
        assert visible[:40] == list(range(40)) and len(visible) < 80, visible
        assert len(set(visible)) == len(visible) and max(visible) < 80
    else:
        assert visible == list(range(40))  # batch 0 only
    done = subprocess.run([*argv, "-", *options], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, driver_report(done)
    values = sorted(int(v) for _, _, v in consume(listener, topic))
    assert values == list(range(120))  # nothing lost, nothing twice
    assert open_transactions(listener, prefix) == []  # recovery resolved every open transaction


@pytest.mark.campaign  # make faults, whose pipelines reset checkpoints under crashes too: budget
def test_checkpoint_reset_at_the_same_path_then_a_crash_after_the_decision_loses_nothing(services, tmp_path):
    """Query 1 writes and stops; its checkpoint is deleted and query 2 starts at the same
    path (same derived prefix) on new input; its driver dies right after batch 0's
    decision. The restart must finish that batch: its "done" marker is query 2's, not
    the one query 1 left at a higher batch id."""
    import shutil

    bootstrap = services.kafka_bootstrap
    topic = create_topic(bootstrap, 3, "reset")
    ckpt = tmp_path / "ckpt"
    write_json_files(tmp_path / "src1", [300, 300, 300])
    first = [sys.executable, "-m", "tests.drivers.files_to_kafka", str(tmp_path / "src1"), str(ckpt),
             bootstrap, topic]
    done = subprocess.run(first, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, driver_report(done)
    assert sorted(int(v) for _, _, v in consume(bootstrap, topic)) == list(range(900))
    shutil.rmtree(ckpt)
    write_json_files(tmp_path / "src2", [200, 200, 200], start=900)
    second = [sys.executable, "-m", "tests.drivers.files_to_kafka", str(tmp_path / "src2"), str(ckpt),
              bootstrap, topic]
    crashed = subprocess.run([*second, "kafka.after_decision@0"], start_new_session=True,
                             capture_output=True, text=True, timeout=300)
    assert crashed.returncode == -9, driver_report(crashed)
    # decided, not yet committed: only query 1's rows are visible
    assert sorted(int(v) for _, _, v in consume(bootstrap, topic)) == list(range(900))
    done = subprocess.run(second, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, driver_report(done)
    assert sorted(int(v) for _, _, v in consume(bootstrap, topic)) == list(range(1500))
    assert open_transactions(bootstrap, prefix_of(ckpt)) == []


@pytest.mark.campaign  # waits out a transaction timeout, about 60 s: make faults runs it (make test's budget)
def test_winners_the_broker_aborted_after_the_decision_stop_the_query_until_the_doctor_resolves(
        services, tmp_path, capsys):
    """The driver dies right after deciding batch 1 and stays down longer than
    kafka.transaction.timeout.ms: the broker aborts the decided transactions. Kafka cannot
    bring them back, so a restart must stop, naming the batch and the way out; the
    operator's `spark-ext doctor kafka resolve` reports what was lost and lets the query go on."""
    from spark_ext import cli

    bootstrap = services.kafka_bootstrap
    topic = create_topic(bootstrap, 3, "lost")
    write_json_files(tmp_path / "src", [40, 40, 40])
    argv = [sys.executable, "-m", "tests.drivers.files_to_kafka", str(tmp_path / "src"),
            str(tmp_path / "ckpt"), bootstrap, topic]
    timeout = "kafka.transaction.timeout.ms=15000"
    crashed = subprocess.run([*argv, "kafka.after_decision@1", timeout], start_new_session=True,
                             capture_output=True, text=True, timeout=300)
    assert crashed.returncode == -9, driver_report(crashed)
    prefix = prefix_of(tmp_path / "ckpt")
    deadline = time.monotonic() + 60
    while open_transactions(bootstrap, prefix):  # the broker aborts them after 15 s
        assert time.monotonic() < deadline, "the broker never aborted the timed-out transactions"
        time.sleep(0.5)
    stuck = subprocess.run([*argv, "-", timeout], capture_output=True, text=True, timeout=300)
    assert stuck.returncode != 0
    assert "batch 1 was decided" in stuck.stderr and "spark-ext doctor kafka resolve" in stuck.stderr

    doctor = ["--bootstrap", bootstrap, "--prefix", prefix, "--topic", topic]
    assert cli.main(["doctor", "kafka", "list", *doctor]) == 0
    assert "decision batch=1" in capsys.readouterr().out
    assert cli.main(["doctor", "kafka", "resolve", *doctor, "--watch", "1"]) == 0
    report = capsys.readouterr().out
    assert report.count("lost ") >= 1 and "of batch 1" in report
    done = subprocess.run([*argv, "-", timeout], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, driver_report(done)
    values = sorted(int(v) for _, _, v in consume(bootstrap, topic))
    assert values[:40] == list(range(40)) and values[-40:] == list(range(80, 120))
    assert len(values) == len(set(values)) < 120  # batch 1's aborted part is lost, as reported
    assert open_transactions(bootstrap, prefix) == []


@SECURED
def test_zombie_run_is_fenced(services, listener):
    """Run A prepares batch 0; run B of the same sink starts; A can no longer commit or
    produce, its open transaction is aborted, and nothing of A appears."""
    bootstrap = listener.bootstrap
    topic = create_topic(services.kafka_bootstrap, 2, "zb")
    prefix = f"zombie-{topic}"
    plan_a = sink_plan(bootstrap, topic, prefix, listener=listener)
    msg_a = prepare_batch(plan_a, 0, ["a1", "a2"])
    # B takes over: fences A's commit id, aborts A's transaction
    plan_b = sink_plan(bootstrap, topic, prefix, listener=listener)
    with pytest.raises(FencedError):
        plan_a.new_committer().commit([msg_a], 0, plan_a.claim)
    msg_b = prepare_batch(plan_b, 0, ["b1"])
    plan_b.new_committer().commit([msg_b], 0, plan_b.claim)
    # a stale attempt of B's own task id (same transactional id, older epoch) cannot commit either
    stale = prepare_batch(plan_b, 1, ["s1"])
    fresh = prepare_batch(plan_b, 1, ["s2"])
    with pytest.raises(FencedError):
        KafkaTxnClient(bootstrap, security=listener.security()).end_txn(stale.producer, commit=True)
    plan_b.new_committer().commit([fresh], 1, plan_b.claim)
    assert sorted(v for _, _, v in consume(listener, topic)) == [b"b1", b"s2"]
    assert open_transactions(listener, prefix) == []


def test_abort_also_ends_the_transactions_of_attempts_whose_message_never_arrived(services):
    """Spark aborts a batch with the messages of the tasks that succeeded; a task that was
    killed or still runs left an open transaction that would hold back every
    read_committed consumer of its partitions. The abort ends the batch's whole pool."""
    bootstrap = services.kafka_bootstrap
    topic = create_topic(bootstrap, 2, "ab")
    prefix = f"abort-{topic}"
    plan = sink_plan(bootstrap, topic, prefix)
    reported = prepare_batch(plan, 0, ["a"], partition=0)
    prepare_batch(plan, 0, ["b"], partition=1)  # its message never reaches the driver
    assert len(open_transactions(bootstrap, prefix)) == 2
    plan.new_committer().abort([reported], 0, plan.claim)
    assert open_transactions(bootstrap, prefix) == []
    assert consume(bootstrap, topic) == []


def test_a_transaction_aborted_by_its_timeout_fails_the_commit_loudly(services):
    bootstrap = services.kafka_bootstrap
    topic = create_topic(bootstrap, 1, "to")
    prefix = f"timeout-{topic}"
    plan = sink_plan(bootstrap, topic, prefix, opts={"kafka.transaction.timeout.ms": "1000"})
    msg = prepare_batch(plan, 0, ["x"])
    client = KafkaTxnClient(bootstrap)
    deadline = time.monotonic() + 30
    tid = msg.producer.transactional_id
    while client.describe([tid])[tid].state == "Ongoing":
        assert time.monotonic() < deadline, "the broker never aborted the timed-out transaction"
        time.sleep(0.2)
    with pytest.raises(TransactionTimedOutError, match="aborted by that timeout") as info:
        plan.new_committer().commit([msg], 0, plan.claim)
    assert "kafka.transaction.timeout.ms is 1000" in str(info.value)
    assert consume(bootstrap, topic) == []
    assert [v for _, _, v in consume(bootstrap, topic, committed=False)] == [b"x"]  # written, then aborted
    # nothing was decided, so the batch is not skipped when it is written again
    replan = sink_plan(bootstrap, topic, prefix)
    again = prepare_batch(replan, 0, ["x"])
    assert again.prepared
    replan.new_committer().abort([again], 0, replan.claim)  # nothing left open on the broker
    assert open_transactions(bootstrap, prefix) == []


def test_timeout_above_the_brokers_limit_is_refused_at_start(spark, services, tmp_path):
    bootstrap = services.kafka_bootstrap
    topic = create_topic(bootstrap, 1, "tl")
    write_json_files(tmp_path / "src", [5])
    q = run(spark, tmp_path / "src", tmp_path / "ckpt", bootstrap, topic,
            extra={"kafka.transaction.timeout.ms": "3600000"})
    with pytest.raises(Exception) as info:
        assert q.awaitTermination(120), "still running after 120 s"
    assert "kafka.transaction.timeout.ms is 3600000 but the broker's transaction.max.timeout.ms is 900000" \
        in str(info.value)
    assert end_offsets(bootstrap, topic) == 0


@pytest.mark.parametrize("select,opts,expected", [
    (("CAST(id AS STRING) AS key",), {}, "needs a 'value' column"),
    (("id AS value",), {}, "column 'value' has type bigint"),
    (("v AS value", "id AS partition"), {}, "column 'partition' has type bigint"),
    (("v AS value",), {"topic": "no-such-topic-here"}, "topic 'no-such-topic-here' does not exist"),
    (("v AS value",), {"kafka.acks.typo": "1"}, "kafka.acks.typo is not a producer setting"),
])
def test_bad_input_fails_at_start_and_writes_nothing(spark, services, tmp_path, select, opts, expected):
    bootstrap = services.kafka_bootstrap
    topic = create_topic(bootstrap, 1, "bad")
    write_json_files(tmp_path / "src", [5])
    o = {"topic": topic, **opts}
    q = run(spark, tmp_path / "src", tmp_path / "ckpt", bootstrap, o.pop("topic"), select, extra=o)
    with pytest.raises(Exception) as info:
        assert q.awaitTermination(120), "still running after 120 s"
    assert expected in str(info.value)
    assert end_offsets(bootstrap, topic) == 0


def test_prefix_shared_by_two_queries_is_refused(spark, services, tmp_path):
    bootstrap = services.kafka_bootstrap
    topic = create_topic(bootstrap, 1, "sh")
    write_json_files(tmp_path / "src", [5])
    prefix = f"shared-{topic}"
    q = run(spark, tmp_path / "src", tmp_path / "ck1", bootstrap, topic, transactionalIdPrefix=prefix)
    assert q.awaitTermination(120), "still running after 120 s"
    assert q.exception() is None
    q = run(spark, tmp_path / "src", tmp_path / "ck2", bootstrap, topic, transactionalIdPrefix=prefix)
    with pytest.raises(Exception, match="is already used by another query"):
        assert q.awaitTermination(120), "still running after 120 s"
    assert len(consume(bootstrap, topic)) == 5




def test_an_executor_clock_minutes_behind_does_not_make_a_batch_look_old(services, monkeypatch):
    """The committer's timeout margin must measure a transaction's age on one clock. An
    executor whose clock is 14 minutes behind the driver's made every batch look 14
    minutes old (with the 15-minute default timeout: refused, every time); one ahead made
    an old batch look young (decided, then aborted by the broker)."""
    bootstrap = services.kafka_bootstrap
    topic = create_topic(bootstrap, 1, "skew")
    plan = sink_plan(bootstrap, topic, f"sk-{topic}")
    rows = [str(i) for i in range(100)]
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() - 14 * 60)  # the executor's clock, while it writes
    msg = prepare_batch(plan, 0, rows)
    monkeypatch.undo()  # the driver's clock
    plan.new_committer().commit([msg], 0, plan.claim)
    assert sorted(v.decode() for _, _, v in consume(bootstrap, topic)) == sorted(rows)


def test_an_executor_clock_ahead_does_not_make_an_old_batch_look_young(services, monkeypatch):
    """An executor clock a minute ahead of the driver's made a batch look a minute younger:
    one within the margin of its transaction timeout was decided, and the broker could
    abort its winners before they committed. The age is read on the broker's clock, the
    one that enforces the timeout."""
    import pyarrow as pa

    from spark_ext.commit import TaskInfo
    from tests.support.sinks import new_query_id

    bootstrap = services.kafka_bootstrap
    topic = create_topic(bootstrap, 1, "ahead")
    # 10 s timeout, 2.5 s margin: a batch older than 7.5 s is refused
    plan = sink_plan(bootstrap, topic, f"ah-{topic}", opts={"kafka.transaction.timeout.ms": "10000"})
    rows = [str(i) for i in range(100)]
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 60)  # the executor's clock, while it writes
    data = pa.record_batch([pa.array(rows), pa.array(rows)], names=["key", "value"])
    msg = plan.new_writer().write(iter([data]), TaskInfo(new_query_id(), 0, 0, 0, 0))
    monkeypatch.undo()  # the driver's clock
    time.sleep(8)  # the scenario itself: the batch's transaction grows 8 s old
    with pytest.raises(TransactionTimedOutError, match="old, within"):
        plan.new_committer().commit([msg], 0, plan.claim)
    assert consume(bootstrap, topic) == []


def test_a_batch_whose_tasks_started_late_is_judged_by_its_transactions_age(services):
    """The time since planning overstates a batch's age when its tasks start late (Python
    workers starting, a busy cluster): transactions 1 s old were refused because the plan
    was 8 s old. The brokers' start times give the age itself."""
    import pyarrow as pa

    from spark_ext.commit import TaskInfo
    from tests.support.sinks import new_query_id

    bootstrap = services.kafka_bootstrap
    topic = create_topic(bootstrap, 1, "late")
    plan = sink_plan(bootstrap, topic, f"lt-{topic}", opts={"kafka.transaction.timeout.ms": "10000"})
    time.sleep(8)  # the scenario itself: the tasks start 8 s after planning, past the 7.5 s limit
    rows = [str(i) for i in range(100)]
    data = pa.record_batch([pa.array(rows), pa.array(rows)], names=["key", "value"])
    msg = plan.new_writer().write(iter([data]), TaskInfo(new_query_id(), 0, 0, 0, 0))
    plan.new_committer().commit([msg], 0, plan.claim)
    assert sorted(v.decode() for _, _, v in consume(bootstrap, topic)) == sorted(rows)


def test_a_weaker_guarantee_is_refused_while_an_exactly_once_run_left_transactions_open(services):
    """An exactly_once run died with a batch's transaction open; the operator restarts
    with at_least_once, which takes nothing over: the open transaction would stall every
    read_committed consumer until the broker's timeout (15 minutes by default). Refused at
    start, naming the ways out; exactly_once once, then the change."""
    from spark_ext.errors import ConnectorError
    from spark_ext.guarantees import Guarantee

    bootstrap = services.kafka_bootstrap
    topic = create_topic(bootstrap, 1, "gch")
    prefix = f"gc-{topic}"
    prepare_batch(sink_plan(bootstrap, topic, prefix), 0, ["1", "2"])
    for weaker in (Guarantee.AT_LEAST_ONCE, Guarantee.NONE):
        with pytest.raises(ConnectorError, match=r"exactly_once to finish them.*doctor kafka resolve"):
            sink_plan(bootstrap, topic, prefix, guarantee=weaker)
    sink_plan(bootstrap, topic, prefix)  # its take-over aborts the open transaction
    sink_plan(bootstrap, topic, prefix, guarantee=Guarantee.AT_LEAST_ONCE)
    assert consume(bootstrap, topic) == []


def test_a_zombie_task_of_the_previous_batch_cannot_abort_a_decided_winner(services):
    """Batch 1's winner is open and checked (step 4a) when a zombie attempt of batch 0
    (its executor froze, Spark moved on) wakes up and initialises its transactional id.
    With one id per partition and attempt for every batch, that fenced and aborted batch
    1's winner after the decision: the commit failed with the batch incomplete. Batches
    now alternate between two sets of ids, so the zombie holds another id."""
    from typing import Any

    bootstrap = services.kafka_bootstrap
    topic = create_topic(bootstrap, 1, "zmb")
    prefix = f"zb-{topic}"

    def rows(lo: int) -> list[str]:
        return [str(i) for i in range(lo, lo + 50)]

    plan0 = sink_plan(bootstrap, topic, prefix)
    plan0.new_committer().commit([prepare_batch(plan0, 0, rows(0))], 0, plan0.claim)
    plan1 = sink_plan(bootstrap, topic, prefix)
    winner = prepare_batch(plan1, 1, rows(50))
    committer: Any = plan1.new_committer()
    checked = committer.check

    def check_then_zombie(batch) -> None:
        checked(batch)
        prepare_batch(plan0, 0, rows(1000))  # batch 0's stale attempt

    committer.check = check_then_zombie
    committer.commit([winner], 1, plan1.claim)
    sink_plan(bootstrap, topic, prefix)  # the next take-over aborts the zombie's transaction
    assert open_transactions(bootstrap, prefix) == []
    assert sorted(int(v) for _, _, v in consume(bootstrap, topic)) == list(range(100))


# (800, 1) in make faults (22 s), to keep make test within its 20 minutes
@pytest.mark.parametrize(("tasks", "partitions"),
                         [(800, 3), pytest.param(800, 1, marks=pytest.mark.campaign)])
def test_a_decision_naming_more_winners_than_one_offset_metadata_holds(services, tasks, partitions):
    """A batch of 800 tasks under a 200-character transactionalIdPrefix: its decision no
    longer fits the 3,900 characters of one partition's offset metadata (about 500 tasks
    did, compressed), so it is split over
    the commit topic's partitions, all committed in the decision's transaction. Batch 0
    commits; batch 1 is decided, then its driver dies; the next take-over reads the split
    decision back and finishes it: every record once. A commit topic with too few partitions
    refuses the batch at its decision, naming the count and the fixes, with nothing
    committed."""
    import pyarrow as pa

    from spark_ext.commit import Batch, TaskInfo
    from spark_ext.connectors.kafka.sink.committer import KafkaCommitter
    from tests.support.sinks import new_query_id

    bootstrap = services.kafka_bootstrap
    topic = create_topic(bootstrap, partitions, "wide")
    prefix = (f"wide-{topic}-" + "x" * 200)[:200]
    qid = new_query_id()

    def write(plan, batch: int) -> tuple:
        def rows(p: int) -> pa.RecordBatch:
            return pa.record_batch([pa.array([f"{batch}.{p}"])] * 2, names=["key", "value"])
        return tuple(plan.new_writer().write(iter([rows(p)]), TaskInfo(qid, batch, p, 0, batch * 1000 + p))
                     for p in range(tasks))

    plan = sink_plan(bootstrap, topic, prefix)
    done = write(plan, 0)
    if partitions < 2:
        with pytest.raises(Exception, match=r"takes 2 partitions of the commit topic .*has 1.*coalesce"):
            plan.new_committer().commit(list(done), 0, plan.claim)
        assert consume(bootstrap, topic) == []
        sink_plan(bootstrap, topic, prefix)  # the take-over rolls the batch back
        assert open_transactions(bootstrap, prefix) == []
        return
    plan.new_committer().commit(list(done), 0, plan.claim)
    plan = sink_plan(bootstrap, topic, prefix)
    committer = plan.new_committer()
    assert isinstance(committer, KafkaCommitter)
    batch = Batch(1, write(plan, 1), plan.claim)
    with committer.connected():
        committer.check(batch)
        committer.record(batch)  # decided; the driver dies here
    sink_plan(bootstrap, topic, prefix)  # the restart's take-over finishes batch 1
    values = sorted(v.decode() for _, _, v in consume(bootstrap, topic))
    assert values == sorted(f"{b}.{p}" for b in (0, 1) for p in range(tasks))
    assert open_transactions(bootstrap, prefix) == []


def test_a_topic_whose_max_message_bytes_is_below_the_sinks_batches_is_written_and_an_oversize_record_named(
        services):
    """A topic someone else configured with max.message.bytes=100000 (the sink's record
    batches are up to 1 MB by default): 5,000 records of 100 bytes are written in batches
    the topic takes, exactly once. A single record larger than the limit fails its task
    naming the record's size, the topic's limit and the fixes, with nothing committed."""
    import pyarrow as pa
    from confluent_kafka.admin import AdminClient, NewTopic

    from spark_ext.commit import TaskInfo
    from spark_ext.errors import ConnectorError
    from tests.support.kafka_util import unique_topic
    from tests.support.sinks import new_query_id

    bootstrap = services.kafka_bootstrap
    topic = unique_topic("small")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"max.message.bytes": "100000"})])[topic].result(30)
    rows = [f"{i:06d}".ljust(100, "x") for i in range(5000)]
    plan = sink_plan(bootstrap, topic, f"small-{topic}")
    data = pa.record_batch([pa.array(rows), pa.array(rows)], names=["key", "value"])
    msg = plan.new_writer().write(iter([data]), TaskInfo(new_query_id(), 0, 0, 0, 0))
    plan.new_committer().commit([msg], 0, plan.claim)
    assert sorted(v.decode() for _, _, v in consume(bootstrap, topic)) == rows
    plan = sink_plan(bootstrap, topic, f"small-{topic}")
    big = pa.record_batch([pa.array(["k"]), pa.array(["y" * 150_000])], names=["key", "value"])
    with pytest.raises(ConnectorError, match=r"150,0\d\d bytes.*max.message.bytes = 100000"):
        plan.new_writer().write(iter([big]), TaskInfo(new_query_id(), 1, 0, 0, 1))
    sink_plan(bootstrap, topic, f"small-{topic}")  # the take-over aborts the failed task's transaction
    assert len(consume(bootstrap, topic)) == 5000
