"""The queue sink against the real Artemis, beyond the conformance suite: the log's
compare-and-set, what a consumer receives, and bad input refused at start."""

from __future__ import annotations

import threading
import uuid

import pyarrow as pa
import pytest
import stomp
from pyspark.sql.types import StringType, StructField, StructType

from spark_ext.commit import TaskInfo
from spark_ext.connectors.jms import JmsSink
from spark_ext.connectors.jms.sink.committer import JmsCommitter, JmsDecision, Winner
from spark_ext.connectors.jms.sink.config import JmsSinkConfig
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
    now = a.state()
    decision = JmsDecision(0, "q", (Winner("w", 1),))
    won = a._append(now, 1, decision, False)
    lost = b._append(now, 2, None, True)  # on the same state: must lose
    assert won is not None and lost is None
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
        conn.disconnect()
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
    committer.record(batch)  # decided; the driver dies here
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
