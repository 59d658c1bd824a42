"""The routing sink's plans, against the real PostgreSQL, Kafka and Artemis, driven by
hand as Spark's planner and tasks would: bad input refused at start naming the sub-sink,
a zombie run fenced in every system, a row naming no sub-sink failing its batch."""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from spark_ext.commit import TaskInfo
from spark_ext.errors import ConfigurationError, ConnectorError, FencedError, UnknownOptionError
from spark_ext.guarantees import Guarantee
from spark_ext.options import Options
from spark_ext.routing import RoutingSink
from tests.support.routing import Targets

pytestmark = [pytest.mark.services]

SCHEMA = StructType([StructField("sink", StringType()), StructField("id", LongType()),
                     StructField("v", StringType()), StructField("key", StringType()),
                     StructField("value", StringType()), StructField("body", StringType())])


def _rows(ids: list[int], route=lambda i: ("ledger", "alerts", "notes")[i % 3]) -> pa.RecordBatch:
    s = [str(i) for i in ids]
    return pa.record_batch({"sink": pa.array([route(i) for i in ids]), "id": pa.array(ids, pa.int64()),
                            "v": pa.array([f"v{i}" for i in ids]), "key": pa.array(s), "value": pa.array(s),
                            "body": pa.array(s)})


def _plan(options: dict[str, str], ckpt: Path, guarantee: Guarantee = Guarantee.EXACTLY_ONCE):
    opts = Options({**options, "checkpointlocation": str(ckpt)}, "hzsink")
    return RoutingSink().plan(opts, SCHEMA, guarantee)


def test_a_zombie_run_is_fenced_in_every_system_and_the_newer_run_writes_the_batch_once(services, tmp_path):
    """Run A prepares batch 0 in all three systems; run B takes over; A's commit is refused
    and A decides nothing; B writes batch 0 and commits it; only B's rows are anywhere,
    and after B's next take-over nothing is in doubt."""
    t = Targets(services)
    routing_id = f"rt-{uuid.uuid4().hex[:12]}"
    opts = t.options(sinkId=routing_id)
    qid = str(uuid.uuid4())
    plan_a = _plan(opts, tmp_path / "ck")
    by_a = plan_a.new_writer().write(iter([_rows([0, 1, 2])]), TaskInfo(qid, 0, 0, 0, 1))
    assert [n for n, _ in by_a.parts] == ["alerts", "ledger", "notes"]
    plan_b = _plan(opts, tmp_path / "ck")
    with pytest.raises(FencedError):
        plan_a.new_committer().commit([by_a], 0, plan_a.claim)
    by_b = plan_b.new_writer().write(iter([_rows([3, 4, 5, 6])]), TaskInfo(qid, 0, 0, 0, 2))
    plan_b.new_committer().commit([by_b], 0, plan_b.claim)
    assert t.committed() == {"ledger": [3, 6], "alerts": [4], "notes": [5]}
    _plan(opts, tmp_path / "ck")
    assert t.in_doubt(routing_id) == []


def test_a_row_naming_no_sub_sink_fails_its_task_naming_the_value_and_nothing_is_committed(services,
                                                                                           tmp_path):
    t = Targets(services)
    routing_id = f"rt-{uuid.uuid4().hex[:12]}"
    opts = t.options(sinkId=routing_id)
    qid = str(uuid.uuid4())
    plan = _plan(opts, tmp_path / "ck")
    good = plan.new_writer().write(iter([_rows([0, 1, 2])]), TaskInfo(qid, 0, 0, 0, 1))
    with pytest.raises(ConnectorError, match="'sink' is 'ledgr', which names no sub-sink"):
        plan.new_writer().write(iter([_rows([3, 4], lambda i: "ledgr" if i == 4 else "ledger")]),
                                TaskInfo(qid, 0, 1, 0, 2))
    plan.new_committer().abort([good], 0, plan.claim)  # Spark: a task failed for good
    assert t.committed() == {"ledger": [], "alerts": [], "notes": []}
    assert t.in_doubt(routing_id) == []


@pytest.mark.parametrize(("change", "error", "named"), [
    ({"sinks.ledger.dbtabel": "x"}, UnknownOptionError, "sub-sink 'ledger': unknown option 'dbtabel'"),
    ({"sinks.ledger.guarantee": "none"}, ConfigurationError, "'sinks.ledger.guarantee': set it on the"),
    ({"sinks.alerts.connector": "kafak"}, ConfigurationError, "sub-sink 'alerts': unknown connector 'kafak'"),
    ({"sinks.notes.columns": "body,nope"}, ConfigurationError, "'sinks.notes.columns' names nope"),
    ({"routeColumn": "target"}, ConfigurationError, "routeColumn 'target' is not a column"),
    ({"decider": "alerts"}, ConfigurationError, "'decider' names sub-sink 'alerts'"),
])
def test_bad_options_are_refused_at_start_naming_the_sub_sink(services, tmp_path, change, error, named):
    opts = Targets(services).options(**change)
    with pytest.raises(error, match=named):
        _plan(opts, tmp_path / "ck")


def test_two_sub_sinks_writing_one_table_are_refused(services, tmp_path):
    t = Targets(services)
    opts = t.options(**{"sinks.copy.connector": "jdbc", "sinks.copy.url": services.postgres_url,
                        "sinks.copy.dbtable": t.table, "sinks.copy.columns": "id,v"})
    with pytest.raises(ConfigurationError, match=f"sub-sinks 'copy' and 'ledger' both write .*{t.table}"):
        _plan(opts, tmp_path / "ck")


def test_exactly_once_without_a_jdbc_sub_sink_is_refused_and_at_least_once_runs(services, tmp_path):
    t = Targets(services)
    opts = {k: v for k, v in t.options().items() if not k.startswith("sinks.ledger.")}
    with pytest.raises(ConfigurationError, match="add a jdbc sub-sink"):
        _plan(opts, tmp_path / "ck")
    plan = _plan(opts, tmp_path / "ck", Guarantee.AT_LEAST_ONCE)
    done = plan.new_writer().write(iter([_rows([1, 2, 4])]), TaskInfo(str(uuid.uuid4()), 0, 0, 0, 1))
    plan.new_committer().commit([done], 0, plan.claim)
    assert t.committed() == {"ledger": [], "alerts": [1, 4], "notes": [2]}


def test_the_decision_log_refuses_a_decision_under_an_epoch_a_take_over_replaced(services, tmp_path):
    """A run that passed its checks before a newer run took over must not record its
    decision afterwards: the next take-over would hand its (rolled back) winners on."""
    from spark_ext.decisions import RoutingDecision

    opts = Targets(services).options(sinkId=f"rt-{uuid.uuid4().hex[:12]}")
    old = _plan(opts, tmp_path / "ck")
    _plan(opts, tmp_path / "ck")  # a newer run's take-over
    log = old.new_committer().log
    with log.connected():
        with pytest.raises(FencedError, match="taken over by a newer run"):
            log.record(RoutingDecision(0, str(uuid.uuid4()), ()), old.claim.fence.epoch)
        assert log.recorded(str(uuid.uuid4()), 0) is None


def test_two_tables_of_one_database_are_two_sub_sinks_of_one_query(services, tmp_path):
    """Sub-sinks of one query share its id, and each sees the other's prepared
    transactions and decisions: neither may take the other for a predecessor of itself
    (a copied checkpoint), which would refuse every batch."""
    from tests.support import pg_util

    t = Targets(services)
    audit = pg_util.table_name("audit")
    pg_util.execute(services.postgres_url, f"CREATE TABLE {audit} (id bigint, v text)")
    opts = t.options(**{"sinks.audit.connector": "jdbc", "sinks.audit.url": services.postgres_url,
                        "sinks.audit.dbtable": audit, "sinks.audit.columns": "id,v"})
    qid = str(uuid.uuid4())
    for batch in range(2):
        plan = _plan(opts, tmp_path / "ck")
        ids = [batch * 10 + i for i in range(6)]
        done = plan.new_writer().write(iter([_rows(ids, lambda i: ("ledger", "audit", "alerts")[i % 3])]),
                                       TaskInfo(qid, batch, 0, 0, batch))
        plan.new_committer().commit([done], batch, plan.claim)
    assert t.committed()["ledger"] == [0, 3, 12, 15]
    audited = pg_util.query(services.postgres_url, f"SELECT id FROM {audit}")
    assert sorted(r[0] for r in audited) == [1, 4, 10, 13]


def test_a_copied_checkpoint_is_refused_naming_the_routing_sink_the_query_ran_as(services, tmp_path):
    """Batch 0 was decided under the checkpoint at ``ck`` and the driver died before carrying
    it out; the checkpoint copied to ``copy`` is a new routing sink (new sub-sink ids) whose
    replay of batch 0 would write it again in every system. Refused, naming the old routing
    sink, nothing committed; the way out the message names (the old location) finishes the
    batch once, and the copy left nothing in doubt."""
    from spark_ext.commit import Batch
    from spark_ext.errors import PredecessorSinkError
    from spark_ext.options import checkpoint_sink_id

    t = Targets(services)
    opts, qid = t.options(), str(uuid.uuid4())
    old = _plan(opts, tmp_path / "ck")
    wrote = old.new_writer().write(iter([_rows([0, 1, 2])]), TaskInfo(qid, 0, 0, 0, 1))
    committer, batch = old.new_committer(), Batch(0, (wrote,), old.claim)
    with committer.connected():  # steps 4a and 4b, then the driver dies
        assert committer.recorded(batch) is None
        committer.check(batch)
        committer.record(batch)
    old_id = "rt-" + checkpoint_sink_id(str(tmp_path / "ck")).removeprefix("ck-")
    assert _status(services, old_id) == (0, False)  # decided, not carried out
    copy = _plan(opts, tmp_path / "copy")
    again = copy.new_writer().write(iter([_rows([0, 1, 2])]), TaskInfo(qid, 0, 0, 0, 2))
    with pytest.raises(PredecessorSinkError, match=f"ran before as routing sink '{old_id}', which decided "
                                                   "batch 0 without finishing it"):
        copy.new_committer().commit([again], 0, copy.claim)
    assert t.committed() == {"ledger": [], "alerts": [], "notes": []}
    _plan(opts, tmp_path / "ck")  # the old location: its take-over finishes batch 0
    assert t.committed() == {"ledger": [0], "alerts": [1], "notes": [2]}
    assert _status(services, old_id) == (0, True)
    copy_id = "rt-" + checkpoint_sink_id(str(tmp_path / "copy")).removeprefix("ck-")
    assert t.in_doubt(copy_id) == [] and t.in_doubt(old_id) == []


def _status(services, routing_id: str) -> tuple[int | None, bool | None]:
    """The routing sink's last decision and whether it was carried out, as ``spark-ext
    status jdbc`` shows it (the decisions live in the decider's database)."""
    from spark_ext.connectors.jdbc.doctor import sink_status

    [row] = sink_status(services.postgres_url, "public", routing_id)
    assert row.target == "routing"
    return row.batch, row.finished


def test_a_kafka_share_too_old_for_its_transaction_timeout_is_refused_before_the_decision(services, tmp_path):
    """The Kafka sink alone refuses to decide transactions the broker may abort before they
    commit (within a margin of kafka.transaction.timeout.ms). Under a routing sink the
    decision is the routing sink's, so the same check runs before it: a batch 50 s past its
    plan under a 60 s timeout commits nowhere, and the next take-over leaves nothing in doubt."""
    from dataclasses import replace

    from spark_ext.connectors.kafka.sink.committer import TransactionTimedOutError
    from spark_ext.routing.writer import RoutingFence

    t = Targets(services)
    routing_id = f"rt-{uuid.uuid4().hex[:12]}"
    opts = t.options(sinkId=routing_id, **{"sinks.alerts.kafka.transaction.timeout.ms": "60000"})
    plan = _plan(opts, tmp_path / "ck")
    wrote = plan.new_writer().write(iter([_rows([0, 1, 2])]), TaskInfo(str(uuid.uuid4()), 0, 0, 0, 1))
    fence = plan.claim.fence
    # As if planned 50 s ago (the driver's clock is what bounds the age here): within the
    # margin (15 s) of the 60 s timeout.
    aged = RoutingFence(fence.epoch, tuple((n, replace(c, planned_ms=c.planned_ms - 50_000))
                                           for n, c in fence.claims))
    with pytest.raises(TransactionTimedOutError, match=r"kafka\.transaction\.timeout\.ms"):
        plan.new_committer().commit([wrote], 0, replace(plan.claim, fence=aged))
    assert t.committed() == {"ledger": [], "alerts": [], "notes": []}
    _plan(opts, tmp_path / "ck")
    assert t.in_doubt(routing_id) == []
