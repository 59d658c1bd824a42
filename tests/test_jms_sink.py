"""The queue sink against the real Artemis, beyond the conformance suite: the log's
compare-and-set, what a consumer receives, and bad input refused at start."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pyarrow as pa
import pytest
import stomp
from pyspark.sql.types import MapType, StringType, StructField, StructType

from spark_ext.commit import TaskInfo
from spark_ext.connectors.jms import JmsSink
from spark_ext.connectors.jms.sink.committer import JmsCommitter, JmsDecision, Winner
from spark_ext.connectors.jms.sink.config import JmsSinkConfig
from spark_ext.connectors.jms.sink.entries import SEQ_HEADER, SinkState
from spark_ext.errors import ConfigurationError
from spark_ext.guarantees import Guarantee
from spark_ext.options import Options
from tests.support import jms_sink, stomp_util
from tests.support.sinks import new_query_id

pytestmark = pytest.mark.services


def _options(services, dest: str, **more: str) -> dict[str, str]:
    return {"connector": "jms", "host": services.stomp_host, "port": str(services.stomp_port),
            "user": services.stomp_user, "password": services.stomp_password, "destination": dest, **more}


_BODY = StructType([StructField("body", StringType())])


def _config(services, dest: str) -> JmsSinkConfig:
    opts = Options(_options(services, dest, sinkid=f"t-{uuid.uuid4().hex[:12]}"), "hzsink")
    return JmsSinkConfig.parse(opts, Guarantee.EXACTLY_ONCE)


def _shown(committer: JmsCommitter, entry: SinkState) -> SinkState | None:
    """Wait until the log's listing shows ``entry`` (bounded). A listing right after a
    committed append may not show it yet (seen in CI under load): the sink's own appends
    read again and retry, but this test's steps must start from known states."""
    deadline = time.monotonic() + 10
    while (now := committer.state()) != entry:
        assert time.monotonic() < deadline, f"the log shows {now}, not the entry appended: {entry}"
        time.sleep(0.05)
    return now


def _recorded(committer: JmsCommitter, batch) -> None:
    """``record`` the batch's decision, then wait until the log's listing shows it (bounded,
    as ``_shown``): a doctor run right after must find it, as one run later in life does."""
    decision = committer.record(batch)
    deadline = time.monotonic() + 10
    while committer.recorded(batch) != decision:
        assert time.monotonic() < deadline, "the log's listing never showed the recorded decision"
        time.sleep(0.05)


def test_the_log_is_appended_by_compare_and_set(services):
    """Two drivers read the same state and both append the next entry: the broker's
    duplicate-id check (``_AMQ_DUPL_ID`` sent as a STOMP header, in a transaction) lets one
    commit, the other learns it lost, and the state is the winner's."""
    cfg = _config(services, stomp_util.queue_name("cas"))
    a, b = JmsCommitter(cfg), JmsCommitter(cfg)
    a.ensure_queues()
    start = a.state()
    assert start is None and b.state() is None
    first = a._append(start, 1, None, True)
    assert first is not None and first.seq == 0
    now = _shown(a, first)
    decision = JmsDecision(0, "q", (Winner("w", 1),))
    won = a._append(now, 1, decision, False)
    assert won is not None
    _shown(b, won)
    lost = b._append(now, 2, None, True)  # on the same, older state: must lose
    assert lost is None
    assert b.state() == won  # both see the winner's entry
    a.close()
    b.close()


def test_consumers_receive_body_headers_priority_correlation_and_reply_to(services):
    """One exactly-once batch through the plan, read by an independent stomp.py consumer."""
    qid = new_query_id()  # unique, as Spark's are: sinks look each other up by it
    dest = stomp_util.queue_name("fields")
    opts = Options(_options(services, dest, sinkid=f"t-{uuid.uuid4().hex[:12]}"), "hzsink")
    schema_rb = pa.record_batch({
        "body": pa.array([b"\x00\x01bin", b"two"], pa.binary()),
        "headers": pa.array([[("app", "payments"), ("paymentId", "p-1")], None],
                            pa.map_(pa.string(), pa.string())),
        "priority": pa.array([7, None], pa.int32()),
        "correlation_id": pa.array(["c-1", None]),
        "reply_to": pa.array(["/queue/replies", None]),
    })
    from pyspark.sql.pandas.types import from_arrow_schema

    sink = JmsSink()
    plan = sink.plan(opts, from_arrow_schema(schema_rb.schema), Guarantee.EXACTLY_ONCE)
    c = plan.new_writer().write(iter([schema_rb]), TaskInfo(qid, 0, 0, 0, 1))
    assert c.rows == 2 and c.token
    assert stomp_util.drain(services, dest, timeout=10) == []  # staged, not visible yet
    plan.new_committer().commit([c], 0, plan.claim)

    got: list[stomp.utils.Frame] = []
    done = threading.Event()

    class L(stomp.ConnectionListener):
        def on_message(self, frame: stomp.utils.Frame) -> None:
            got.append(frame)
            if len(got) == 2:
                done.set()

    conn = stomp.Connection12([(services.stomp_host, services.stomp_port)], heartbeats=(0, 0),
                              auto_decode=False)
    conn.set_listener("l", L())
    conn.connect(services.stomp_user, services.stomp_password, wait=True)
    conn.subscribe(dest, id="s", ack="auto")
    try:
        assert done.wait(10), f"received {len(got)} of 2"
    finally:
        conn.disconnect(receipt="bye")  # stomp.py waits for the receipt only when given one
    # more than the two rows would be duplicates in the destination: show what came
    assert len(got) == 2, [(f.body, f.headers.get("message-id"), f.headers.get("redelivered")) for f in got]
    first, second = got
    assert first.body == b"\x00\x01bin" and second.body == b"two"  # in order
    h = first.headers
    assert (h["app"], h["paymentId"], h["priority"], h["correlation-id"]) == ("payments", "p-1", "7", "c-1")
    assert h["reply-to"] == "/queue/replies" and h["persistent"] == "true"
    assert "paymentId" not in second.headers
    assert jms_sink.staged_tokens(services, opts.raw()["sinkid"]) == []


@pytest.mark.spark
@pytest.mark.parametrize(("change", "named"), [
    ({"destination": "/exchange/x"}, "/queue/<name>"),
    ({"password": "wrong"}, "user and password"),
    ({"destination": "/topic/t"}, "exactly_once writes to a queue"),
    ({"select": "CAST(value AS STRING) AS text"}, "needs a column 'body'"),
])
def test_bad_input_fails_at_start_naming_the_fix(spark, services, tmp_path, change, named):
    dest = stomp_util.queue_name("bad")
    change = dict(change)
    select = change.pop("select", "CAST(value AS STRING) AS body")
    df = spark.readStream.format("rate").option("rowsPerSecond", 10).load().selectExpr(select)
    w = df.writeStream.format("hzsink").option("checkpointLocation", str(tmp_path / "ckpt"))
    for k, v in {**_options(services, dest), **change}.items():
        w = w.option(k, v)
    with pytest.raises(Exception, match=named):  # Spark wraps our error in its own
        w.start().awaitTermination(60)
    assert stomp_util.drain(services, dest, timeout=10) == []


def test_doctor_finishes_a_decided_batch_and_clears_staging(services, capsys, monkeypatch):
    """A driver decided batch 0 and died before moving it; another attempt's messages are
    still staged. ``doctor jms list`` shows both; ``resolve`` moves the winner only."""
    qid = new_query_id()  # unique, as Spark's are: sinks look each other up by it
    from spark_ext import cli
    from spark_ext.commit import Batch
    from spark_ext.connectors.jms.doctor import PASSWORD_ENV

    dest = stomp_util.queue_name("doctor")
    sink_id = f"t-{uuid.uuid4().hex[:12]}"
    opts = Options(_options(services, dest, sinkid=sink_id), "hzsink")
    sink = JmsSink()
    plan = sink.plan(opts, _BODY, Guarantee.EXACTLY_ONCE)
    rows = pa.record_batch({"body": pa.array(["1", "2", "3"])})
    winner = plan.new_writer().write(iter([rows]), TaskInfo(qid, 0, 0, 0, 1))
    plan.new_writer().write(iter([rows]), TaskInfo(qid, 0, 0, 1, 2))  # a failed attempt's
    committer = plan.new_committer()
    assert isinstance(committer, JmsCommitter)
    batch = Batch(0, (winner,), plan.claim)
    committer.check(batch)
    _recorded(committer, batch)  # decided; the driver dies here
    committer.close()

    monkeypatch.setenv(PASSWORD_ENV, services.stomp_password)
    where = ["--broker", f"stomp://{services.stomp_host}:{services.stomp_port}",
             "--user", services.stomp_user, "--sink-id", sink_id]
    assert cli.main(["doctor", "jms", "list", *where]) == 0
    listed = capsys.readouterr().out
    assert f"decision batch=0 query={qid} done=False" in listed and "6 staged message(s)" in listed
    assert cli.main(["doctor", "jms", "resolve", *where, "--destination", dest, "--watch", "0.2"]) == 0
    assert sorted(stomp_util.drain(services, dest)) == ["1", "2", "3"]
    assert jms_sink.staged_tokens(services, sink_id) == []


def test_a_batch_larger_than_the_brokers_browse_page_commits_whole(services):
    """Two tasks of 700 messages each: more than the 200 messages the broker's filtered
    counts look at by default, so both attempts must still be found whole, and moved."""
    qid = new_query_id()  # unique, as Spark's are: sinks look each other up by it
    dest = stomp_util.queue_name("big")
    opts = Options(_options(services, dest, sinkid=f"t-{uuid.uuid4().hex[:12]}"), "hzsink")
    plan = JmsSink().plan(opts, _BODY, Guarantee.EXACTLY_ONCE)
    ids = [[str(p * 1000 + i) for i in range(700)] for p in (0, 1)]
    done = [plan.new_writer().write(iter([pa.record_batch({"body": pa.array(b)})]), TaskInfo(qid, 0, p, 0, p))
            for p, b in enumerate(ids)]
    plan.new_committer().commit(done, 0, plan.claim)
    assert stomp_util.drain(services, dest) == ids[0] + ids[1]  # every message, each task in order


def test_sessions_send_each_frame_at_once_without_nagles_delay(services):
    """A log append writes BEGIN, SEND and COMMIT back to back; under Nagle's algorithm the
    later writes waited for the broker's delayed ACK, and each append took about 50 ms
    (3 a batch) where it takes about 5 ms without. Checked on a real session's socket."""
    import socket

    from spark_ext.connectors.jms.sink.writer import open_session

    session = open_session(_config(services, stomp_util.queue_name("nodelay")))
    try:
        raw = session._sock._sock  # the option lives on the socket itself
        assert raw.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        session.close()


def test_winners_move_in_groups_of_at_most_200():
    from spark_ext.connectors.jms.sink import committer as jc

    ws = [Winner(f"t{i}", rows) for i, rows in enumerate([5] * 450 + [30_000, 5, 19_999, 2])]
    groups = jc.move_groups(ws)
    assert [len(g) for g in groups] == [200, 200, 54]  # a large winner's calls are bounded in _move
    assert [w for g in groups for w in g] == ws  # every winner once, in order


def _counted_moves(monkeypatch) -> list[int]:
    """Messages each moveMessages call moved, in call order."""
    from spark_ext.connectors.jms.session import BrokerSession

    moved: list[int] = []
    call = BrokerSession.call

    def counted(self, resource, operation, *args, **kw):
        result = call(self, resource, operation, *args, **kw)
        if operation == "moveMessages":
            moved.append(int(result))
        return result

    monkeypatch.setattr(BrokerSession, "call", counted)
    return moved


def _commit_each_once_in_order(services, name: str, ids: list[list[str]]) -> None:
    """One batch: task ``p`` stages ``ids[p]``, the driver commits; every message arrives
    once, each task's in its row order."""
    qid = new_query_id()
    dest = stomp_util.queue_name(name)
    opts = Options(_options(services, dest, sinkid=f"{name[0]}-{uuid.uuid4().hex[:12]}"), "hzsink")
    plan = JmsSink().plan(opts, _BODY, Guarantee.EXACTLY_ONCE)
    done = [plan.new_writer().write(iter([pa.record_batch({"body": pa.array(b)})]), TaskInfo(qid, 0, p, 0, p))
            for p, b in enumerate(ids)]
    plan.new_committer().commit(done, 0, plan.claim)
    got = stomp_util.drain(services, dest)
    assert sorted(got) == sorted(i for b in ids for i in b)
    for b in ids:
        assert [m for m in got if m in set(b)] == b


def test_a_batch_of_many_tasks_moves_in_two_management_calls(services, monkeypatch):
    """Each move walks the whole staging queue, so a move per winner made a batch's commit
    cost grow with the square of its tasks: the first winner moves alone (a crash between
    it and the rest is a crash point of its own), the others in one call."""
    moved = _counted_moves(monkeypatch)
    _commit_each_once_in_order(services, "grouped", [[f"{p}.{i}" for i in range(5)] for p in range(12)])
    assert len(moved) == 2, moved


def test_another_sinks_log_deleted_while_a_first_commit_searches_is_no_predecessor(services, monkeypatch):
    """A query's first commit lists every sink's log queue, then reads each for a decision
    of this query. Another sink's queues may be deleted in between (an operator cleaning
    up, or another tool on the same broker): that sink left nothing to carry on, so the
    commit goes on instead of failing on the missing queue."""
    from spark_ext.connectors.jms.session import BrokerSession

    other = JmsCommitter(_config(services, stomp_util.queue_name("gone")))
    other.ensure_queues()
    listed = BrokerSession.attribute
    deleted: list[str] = []

    def then_deleted(self, resource, name):
        names = listed(self, resource, name)
        if (resource, name) == ("broker", "queueNames") and other.cfg.log in names and not deleted:
            other.session.call("broker", "deleteAddress", other.cfg.log, True)
            deleted.append(other.cfg.log)
        return names

    monkeypatch.setattr(BrokerSession, "attribute", then_deleted)
    try:
        _commit_each_once_in_order(services, "searched", [[f"{p}.{i}" for i in range(3)] for p in range(2)])
        assert deleted == [other.cfg.log]  # the search listed the log, which was gone when it read it
    finally:
        for name in (other.cfg.queue, other.cfg.staging, other.cfg.lock):
            other.session.call("broker", "deleteAddress", name, True)
        other.close()


def test_a_winner_larger_than_a_move_call_moves_in_bounded_calls(services, monkeypatch):
    """The broker holds every message of a moveMessages call in its heap until the call
    returns: one call for a winner of 100,000 messages (a batch of 200,000 rows in 2 tasks)
    exhausted a 1 GiB Artemis. Here the bound is lowered to 1,000 and each task stages
    2,500: every call must move at most 1,000, and every message arrive once, in order."""
    from spark_ext.connectors.jms.sink import committer as jc

    monkeypatch.setattr(jc, "_MOVE_ROWS", 1000)
    moved = _counted_moves(monkeypatch)
    _commit_each_once_in_order(services, "bounded", [[f"{p}.{i}" for i in range(2500)] for p in range(2)])
    assert sum(moved) == 5000 and max(moved) <= 1000, moved


@pytest.mark.parametrize(("tasks", "id_len"), [
    (6, 12), (2, 64), pytest.param(200, 64, marks=pytest.mark.campaign)])  # 200: 30 s, in make faults
def test_a_decision_naming_many_winners_or_a_long_sink_id_is_read_back_whole(services, capsys, monkeypatch,
                                                                              tasks, id_len):
    """The log is read back through the broker's management listing, which cuts every string
    property to management-message-attribute-size-limit (256 characters by default). A
    decision naming 6 winners, or 2 under a 64-character sinkId, is longer than that: the
    batch must still commit, a restart must finish a decided batch, and the doctor must read
    it. 200 tasks is what Spark's default shuffle partitions give."""
    from spark_ext import cli
    from spark_ext.connectors.jms.doctor import PASSWORD_ENV

    qid = new_query_id()
    dest = stomp_util.queue_name("wide")
    sink_id = ("w-" + uuid.uuid4().hex * 3)[:id_len]
    opts = Options(_options(services, dest, sinkid=sink_id), "hzsink")

    def write_batch(plan, batch_id: int) -> list:
        rows = [pa.record_batch({"body": pa.array([f"{batch_id}.{p}"])}) for p in range(tasks)]
        return [plan.new_writer().write(iter([rows[p]]), TaskInfo(qid, batch_id, p, 0, batch_id * 1000 + p))
                for p in range(tasks)]

    plan = JmsSink().plan(opts, _BODY, Guarantee.EXACTLY_ONCE)
    plan.new_committer().commit(write_batch(plan, 0), 0, plan.claim)
    # Batch 1 is decided, then the driver dies before moving it.
    plan = JmsSink().plan(opts, _BODY, Guarantee.EXACTLY_ONCE)
    from spark_ext.commit import Batch
    committer = plan.new_committer()
    assert isinstance(committer, JmsCommitter)
    batch = Batch(1, tuple(write_batch(plan, 1)), plan.claim)
    committer.check(batch)
    _recorded(committer, batch)
    committer.close()

    monkeypatch.setenv(PASSWORD_ENV, services.stomp_password)
    where = ["--broker", f"stomp://{services.stomp_host}:{services.stomp_port}",
             "--user", services.stomp_user, "--sink-id", sink_id]
    assert cli.main(["doctor", "jms", "list", *where]) == 0
    assert f"decision batch=1 query={qid} done=False" in capsys.readouterr().out

    # The restart's take-over finishes batch 1, and batch 2 commits after it.
    plan = JmsSink().plan(opts, _BODY, Guarantee.EXACTLY_ONCE)
    assert plan.claim is not None and plan.claim.last_decided is not None
    assert plan.claim.last_decided.batch_id == 1
    plan.new_committer().commit(write_batch(plan, 2), 2, plan.claim)
    got = stomp_util.drain(services, dest)
    assert sorted(got) == sorted(f"{b}.{p}" for b in range(3) for p in range(tasks))
    assert jms_sink.staged_tokens(services, sink_id) == []


# A bounded address that drops what is routed to it once full.
_FULL_DROPS = {"maxSizeBytes": 20_000, "pageSizeBytes": 10_000, "addressFullMessagePolicy": "DROP"}


@pytest.mark.parametrize(("settings", "named"), [
    ({"expiryDelay": 60_000}, "expiry-delay=60000"),
    ({"maxExpiryDelay": 60_000}, "max-expiry-delay=60000"),
    ({"managementMessageAttributeSizeLimit": 100}, "management-message-attribute-size-limit=100"),
    (_FULL_DROPS, "address-full-policy=DROP"),
])
def test_broker_settings_on_the_sinks_addresses_that_would_lose_a_batch_are_refused_at_start(
        services, settings, named):
    """A user's broker.xml with an expiry on ``#`` reaches the sink's staging queue: a
    decided batch's staged messages would expire while the query is down and the
    take-over would move nothing. A management attribute limit under the log's part size
    would cut its entries. Refused at start, naming the setting; nothing is staged."""
    sink_id = f"t-{uuid.uuid4().hex[:12]}"
    opts = Options(_options(services, stomp_util.queue_name("expiry"), sinkid=sink_id), "hzsink")
    cfg = JmsSinkConfig.parse(opts, Guarantee.EXACTLY_ONCE)
    admin = JmsCommitter(cfg)
    match = f"spark_ext.{sink_id}.#"
    admin.session.call("broker", "addAddressSettings", match, json.dumps(settings))
    try:
        with pytest.raises(ConfigurationError, match=named):
            JmsSink().plan(opts, _BODY, Guarantee.EXACTLY_ONCE)
    finally:
        admin.session.call("broker", "removeAddressSettings", match)
        admin.close()
    JmsSink().plan(opts, _BODY, Guarantee.EXACTLY_ONCE)  # without the setting it starts
    assert jms_sink.staged_tokens(services, sink_id) == []


@pytest.mark.parametrize("policy", ["DROP", "FAIL"])
def test_a_destination_that_drops_when_full_is_refused_at_start(services, policy):
    """The broker moves a decided batch's messages into the destination; an address that
    drops what is routed to it once full would lose them without an error (seen: a batch of
    200 one-kilobyte messages committed, and 6 reached a destination of max-size-bytes
    20,000 under DROP). Refused at start, naming the setting and the address; nothing staged."""
    dest = stomp_util.queue_name("full")
    sink_id = f"t-{uuid.uuid4().hex[:12]}"
    opts = Options(_options(services, dest, sinkid=sink_id), "hzsink")
    admin = JmsCommitter(JmsSinkConfig.parse(opts, Guarantee.EXACTLY_ONCE))
    match = dest.removeprefix("/queue/")
    admin.session.call("broker", "addAddressSettings", match,
                       json.dumps({**_FULL_DROPS, "addressFullMessagePolicy": policy}))
    try:
        with pytest.raises(ConfigurationError, match=f"address {match} address-full-policy={policy}"):
            JmsSink().plan(opts, _BODY, Guarantee.EXACTLY_ONCE)
        JmsSink().plan(opts, _BODY, Guarantee.AT_LEAST_ONCE)  # the weaker guarantees are the user's call
    finally:
        admin.session.call("broker", "removeAddressSettings", match)
        admin.close()
    JmsSink().plan(opts, _BODY, Guarantee.EXACTLY_ONCE)  # without the setting it starts
    assert jms_sink.staged_tokens(services, sink_id) == []


@pytest.mark.parametrize("header", ["AMQ_SCHEDULED_DELAY", "AMQ_SCHEDULED_TIME"])
def test_a_header_that_schedules_the_message_is_refused(services, header):
    """Artemis turns a STOMP message with ``AMQ_SCHEDULED_DELAY`` / ``AMQ_SCHEDULED_TIME``
    into a scheduled one, invisible to the staging queue's counts until its time: the
    batch's check would find the attempt short and every replay would fail. The row is
    refused, naming the header; nothing is staged."""
    from spark_ext.connectors.jms.sink.records import BadMessageError

    sink_id = f"t-{uuid.uuid4().hex[:12]}"
    opts = Options(_options(services, stomp_util.queue_name("sched"), sinkid=sink_id), "hzsink")
    schema = StructType([StructField("body", StringType()),
                         StructField("headers", MapType(StringType(), StringType()))])
    plan = JmsSink().plan(opts, schema, Guarantee.EXACTLY_ONCE)
    rows = pa.record_batch({"body": pa.array(["a"]),
                            "headers": pa.array([[(header, "600000")]], pa.map_(pa.string(), pa.string()))})
    with pytest.raises(BadMessageError, match=header):
        plan.new_writer().write(iter([rows]), TaskInfo(new_query_id(), 0, 0, 0, 1))
    assert jms_sink.staged_tokens(services, sink_id) == []


def test_an_abort_while_the_decisions_commit_is_in_flight_never_removes_its_winners(services):
    """The driver sent the decision's COMMIT and the broker has not applied it yet (a
    stalled journal; here the deciding connection holds the sink's lock with the decision's
    transaction open), the commit's retries ran out and Spark calls abort on a fresh
    committer. The abort must not remove the winners' staged messages while the decision may
    still land, or the decision would name messages that are gone (seen before the lock: the
    decision landed and the batch's 10 messages were lost). Every message of the batch lands
    once or not at all."""
    from spark_ext.commit import Batch
    from spark_ext.connectors.jms.session import SessionError
    from spark_ext.connectors.jms.sink.entries import SinkState

    qid = new_query_id()
    dest = stomp_util.queue_name("inflight")
    sink_id = f"t-{uuid.uuid4().hex[:12]}"
    opts = Options(_options(services, dest, sinkid=sink_id), "hzsink")
    plan = JmsSink().plan(opts, _BODY, Guarantee.EXACTLY_ONCE)
    assert plan.claim is not None
    sent = [[f"{p}.{i}" for i in range(5)] for p in range(2)]
    done = tuple(plan.new_writer().write(iter([pa.record_batch({"body": pa.array(b)})]),
                                         TaskInfo(qid, 0, p, 0, p)) for p, b in enumerate(sent))
    batch = Batch(0, done, plan.claim)
    deciding = plan.new_committer()
    assert isinstance(deciding, JmsCommitter)
    deciding.check(batch)
    decision = JmsDecision(0, qid, tuple(Winner(str(c.token), c.rows) for c in done))
    aborted: list[BaseException | None] = []

    def abort() -> None:
        try:
            plan.new_committer().abort(list(done), 0, plan.claim)
            aborted.append(None)
        except Exception as e:  # noqa: BLE001 - an abort that gives up leaves the batch to the take-over
            aborted.append(e)

    worker = threading.Thread(target=abort)
    with deciding._locked():  # record() holds it from its read to its COMMIT's receipt
        now = deciding.state()
        assert now is not None
        pending = SinkState(now.seq + 1, int(plan.claim.fence), decision, False, uuid.uuid4().hex)
        cfg, session, tx = deciding.cfg, deciding.session, "log-" + pending.nonce
        session.begin(tx)
        session.send((f"SEND\ndestination:/queue/{cfg.log}\ntransaction:{tx}\npersistent:true\n"
                      f"_AMQ_DUPL_ID:{cfg.log}.{pending.seq}\n{pending.headers()}\n\n\x00").encode())
        worker.start()
        worker.join(timeout=5)  # an abort that does not wait for the lock is done by now
        try:
            session.commit(tx)  # the journal resumes: the decision is applied (or refused)
        except SessionError:
            pass
    worker.join(timeout=120)
    assert aborted, "the abort did not end"
    landed = deciding.state()
    deciding.close()
    JmsSink().plan(opts, _BODY, Guarantee.EXACTLY_ONCE)  # the restart's take-over
    got = stomp_util.drain(services, dest)
    if landed is not None and landed.decision == decision:
        assert sorted(got) == sorted(sent[0] + sent[1])  # decided: the whole batch, once
    else:
        assert got == []  # rolled back: nothing of it
    assert jms_sink.staged_tokens(services, sink_id) == []


def test_appends_racing_from_four_connections_each_take_their_own_sequence_number(services):
    """Four drivers of one sink append to its log at the same moment, 40 times each (a
    zombie and a new run deciding and taking over together). Each append that reports
    success must own its sequence number: 160 entries, numbered 0 to 159. The broker's
    duplicate ids alone let two sends with one id both land when they arrive together
    (measured on Artemis 2.40: 8 rounds in 100 with four connections)."""
    cfg = _config(services, stomp_util.queue_name("race"))
    drivers = [JmsCommitter(cfg) for _ in range(4)]
    drivers[0].ensure_queues()
    start = threading.Barrier(len(drivers))
    errors: list[BaseException] = []

    def run(c: JmsCommitter) -> None:
        try:
            for _ in range(40):
                start.wait(timeout=60)
                c._until_appended(lambda now: c._append(now, 1, None, True), "racing")
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
            start.abort()

    threads = [threading.Thread(target=run, args=(c,)) for c in drivers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert errors == []
    listed = json.loads(drivers[0]._queue(cfg.log, "listMessagesAsJSON", ""))
    seqs = sorted(int(m[SEQ_HEADER]) for m in listed)
    assert seqs == list(range(160)), [s for s in set(seqs) if seqs.count(s) > 1]
    for c in drivers:
        c.close()
