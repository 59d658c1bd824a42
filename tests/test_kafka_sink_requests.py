"""How the Kafka sink's writer talks to the broker when a task writes to many partitions:
produce requests carry many partitions' batches, and each partition's records still land
in row order, once. Against the real broker."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest
from kafka.partitioner.default import murmur2
from kafka.protocol.producer.produce import ProduceRequest

from spark_ext.connectors.kafka.client import connection
from spark_ext.connectors.kafka.client.produce import PRODUCE_VERSION
from spark_ext.connectors.kafka.sink import sender
from tests.support.kafka_sink import end_offsets, open_transactions, prepare_batch, read_all, sink_plan
from tests.support.kafka_util import create_topic

pytestmark = [pytest.mark.services]


def _count_produce_requests(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Partitions per produce request the sink sends (observed; the send is unchanged)."""
    seen: list[int] = []
    real = sender.Conn.send_parts

    def send_parts(self: Any, encode: Any) -> Any:
        def decoded(cid: int) -> list[bytes]:
            parts = encode(cid)
            request = ProduceRequest.decode(b"".join(parts)[4:], version=PRODUCE_VERSION, header=True)
            seen.append(sum(len(t.partition_data) for t in request.topic_data))
            return parts

        return real(self, decoded)

    monkeypatch.setattr(sender.Conn, "send_parts", send_parts)
    return seen


@pytest.mark.parametrize("batch_size", [None, "1024"])
def test_a_task_writing_to_64_partitions_sends_requests_of_many_partitions_in_row_order(
        services, monkeypatch, batch_size):
    """One task, 12,800 keyed rows over a topic of 64 partitions. Before: one produce request
    per partition (64 requests, the broker handling each; 64 tasks made 4,096 a batch).
    Now the leader's batches share a request. With 1 KiB record batches every partition
    needs several, which go in successive requests: each partition's records must still
    be in row order, every record once, in the partition Kafka's partitioner picks."""
    bootstrap = services.kafka_bootstrap
    topic = create_topic(bootstrap, 64, "many")
    # Every leader answers for its partition (a fresh topic's may not yet: the sender would
    # then send its batches again, one request each, and the count would say nothing).
    assert end_offsets(bootstrap, topic) == 0
    prefix = f"mp-{topic}"
    rows = [f"key-{i:05d}" for i in range(12800)]
    requests = _count_produce_requests(monkeypatch)
    plan = sink_plan(bootstrap, topic, prefix, opts={"kafka.batch.size": batch_size} if batch_size else None)
    committable = prepare_batch(plan, 0, rows)
    assert committable.rows == 12800
    if batch_size is None:
        assert len(requests) == 1 and requests[0] == 64, requests  # 12,800 small rows fit one request
    else:
        assert sum(requests) > 64 * 2  # several batches per partition ...
        assert max(requests) == 64 and len(requests) <= sum(requests) / 32, requests  # ... grouped
    plan.new_committer().commit([committable], 0, plan.claim)

    # The commit returns once the coordinator has it; the broker writes the 64 partitions'
    # markers after that, so read_committed sees the records partition by partition.
    deadline = time.monotonic() + 60
    while len(got := read_all(bootstrap, topic)) < len(rows) and time.monotonic() < deadline:
        time.sleep(0.2)
    got.sort(key=lambda r: (r.partition, r.offset))
    assert sorted(r.value.decode() for r in got) == rows  # each once
    for r in got:
        assert r.partition == (murmur2(r.key) & 0x7FFFFFFF) % 64
    for p in range(64):
        values = [r.value.decode() for r in got if r.partition == p]
        assert values == sorted(values), f"partition {p} out of row order"
    assert open_transactions(bootstrap, prefix) == []


def test_a_querys_first_commit_reads_the_kept_decisions_in_one_request_a_broker(services, monkeypatch):
    """A query's first commit searches the kept copies of every exactly-once Kafka sink the
    cluster ran (they are kept as long as their sinks exist) for one that decided batches of
    the same query. Before: one OffsetFetch round trip per kept copy, so a query's first
    batch slowed as the cluster aged (415 copies: 150 ms on this machine's loopback). Now
    one request per broker names them all, and copies that are not decisions of this
    query are still passed over."""
    from kafka.protocol.consumer.group import OffsetFetchRequest

    from spark_ext.connectors.kafka.client import connection
    from spark_ext.connectors.kafka.client.transactions import KafkaTxnClient

    bootstrap = services.kafka_bootstrap
    topic = create_topic(bootstrap, 1, "kept")
    decoys = [f"decoy{i}-{topic}.batches.kept" for i in range(40)]
    client = KafkaTxnClient(bootstrap, 10.0)
    try:
        for g in decoys:  # on this sink's commit topic, but no decision: each must be read and passed over
            client.keep_offsets(g, {(topic, 0): (1, "not a decision")}, 60_000)
    finally:
        client.close()
    asked: list[list[str]] = []
    real = connection.Conn.send

    def send(self: Any, request: Any, version: int) -> Any:
        if isinstance(request, OffsetFetchRequest):
            names = [g.group_id for g in request.groups] if version >= 8 else [request.group_id]
            if any(n in decoys for n in names):
                asked.append(names)
        return real(self, request, version)

    monkeypatch.setattr(connection.Conn, "send", send)
    plan = sink_plan(bootstrap, topic, f"kept-{topic}")
    committable = prepare_batch(plan, 0, [f"k{i}" for i in range(10)])
    plan.new_committer().commit([committable], 0, plan.claim)
    assert len(asked) == 1, [len(a) for a in asked]  # the test broker is one broker
    assert set(decoys) <= set(asked[0])
    assert end_offsets(bootstrap, topic) > 0 and open_transactions(bootstrap, f"kept-{topic}") == []


def _land(listener: Any, topic: str, n: int) -> list[str]:
    """The committed values of ``topic`` once ``n`` are readable (markers land after the commit)."""
    deadline = time.monotonic() + 60
    while len(got := read_all(listener, topic)) < n and time.monotonic() < deadline:
        time.sleep(0.2)
    return sorted(r.value.decode() for r in got)


@pytest.mark.parametrize("listener", ["plaintext", "sasl_ssl"], indirect=True)
def test_a_workers_next_task_opens_no_connection(services, monkeypatch, listener):
    """Spark runs an executor's tasks one after another in one Python worker. Before: every
    task opened a connection for the metadata and one per partition leader and closed them
    at its end, a TLS and SASL handshake each on SASL_SSL (16 ms of wall-clock here). Now
    the worker's next task uses the connections the one before left: it opens none."""
    topic = create_topic(services.kafka_bootstrap, 8, "kept")
    plan = sink_plan(listener.bootstrap, topic, f"kc-{topic}", listener=listener)
    first = [f"a-{i:04d}" for i in range(2000)]
    plan.new_committer().commit([prepare_batch(plan, 0, first)], 0, plan.claim)
    opened: list[tuple[str, int]] = []
    real = connection.Conn.__init__

    def counted(self: Any, host: str, port: int, *a: Any, **k: Any) -> None:
        opened.append((host, port))
        real(self, host, port, *a, **k)

    monkeypatch.setattr(connection.Conn, "__init__", counted)
    second = [f"b-{i:04d}" for i in range(2000)]
    plan.new_committer().commit([prepare_batch(plan, 1, second)], 1, plan.claim)
    assert opened == []
    assert _land(listener, topic, 4000) == sorted(first + second)  # each once
    assert open_transactions(listener, f"kc-{topic}") == []


def _cut_kept_connections() -> int:
    """Swap each connection this process keeps for one whose peer has already closed, as a
    broker's side does at its idle timeout or restart: the next request on it goes out and
    its reply never comes. How many were swapped."""
    swapped = 0
    with socket.create_server(("127.0.0.1", 0)) as server:
        for kept in sender._idle._conns.values():
            for _, conn in kept:
                dead = socket.create_connection(server.getsockname())
                peer, _ = server.accept()
                peer.close()  # the "broker" side closes first
                conn.sock.close()
                conn.sock = dead
                swapped += 1
    return swapped


def test_a_kept_connection_the_broker_closed_meanwhile_loses_and_repeats_no_record(services):
    """A kept connection can be closed by the broker while the worker waits for its next
    task. The task's first requests on it go unanswered; it sends its batches again on new
    connections, and every record lands once."""
    bootstrap = services.kafka_bootstrap
    topic = create_topic(bootstrap, 8, "stale")
    plan = sink_plan(bootstrap, topic, f"ks-{topic}")
    first = [f"a-{i:04d}" for i in range(2000)]
    plan.new_committer().commit([prepare_batch(plan, 0, first)], 0, plan.claim)
    assert _cut_kept_connections()
    second = [f"b-{i:04d}" for i in range(2000)]
    plan.new_committer().commit([prepare_batch(plan, 1, second)], 1, plan.claim)
    assert _land(bootstrap, topic, 4000) == sorted(first + second)  # each once
    assert open_transactions(bootstrap, f"ks-{topic}") == []


def test_a_resent_batch_of_a_reused_transactional_id_is_not_taken_for_the_last_epochs(services):
    """Batches alternate between two sets of transactional ids, so batch 2's task has batch
    0's id: the same producer id, a new epoch, sequence numbers from 0 again. When its
    first requests go unanswered (here: its kept connections closed under it) it asks each
    leader which of its batches it holds. Before: the answer was read by producer id alone,
    so batch 0's last sequence number on a partition (about 250 here) counted as this
    epoch's, and every batch of batch 2 up to it (about 60 records a partition) was taken
    as written and never sent again: lost. Found by the three-node campaign's leader
    election test, where batch 2's records of the moved partition were missing."""
    bootstrap = services.kafka_bootstrap
    topic = create_topic(bootstrap, 8, "epoch")
    plan = sink_plan(bootstrap, topic, f"ke-{topic}")
    batches = [[f"{b}-{i:04d}" for i in range(n)] for b, n in enumerate((2000, 100, 500))]
    for b, rows in enumerate(batches):
        if b == 2:
            assert _cut_kept_connections()
        plan.new_committer().commit([prepare_batch(plan, b, rows)], b, plan.claim)
    expected = sorted(r for rows in batches for r in rows)
    assert _land(bootstrap, topic, len(expected)) == expected  # each once
    assert open_transactions(bootstrap, f"ke-{topic}") == []


def _observe(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The requests and answers as they go ("send EndTxn", "receive EndTxn"; a lookup with
    the keys it names: "send FindCoordinator a,b"), in order (observed; the connection's
    work is unchanged)."""
    seen: list[str] = []
    send, receive = connection.Conn.send, connection.Conn.receive

    def sending(self: Any, request: Any, version: int) -> Any:
        name = type(request).__name__.removesuffix("Request")
        if name == "FindCoordinator":
            name += " " + ",".join(request.coordinator_keys if version >= 4 else [request.key])
        seen.append(f"send {name}")
        return send(self, request, version)

    def receiving(self: Any, response: Any, version: int) -> Any:
        seen.append(f"receive {response.__name__.removesuffix('Response')}")
        return receive(self, response, version)

    monkeypatch.setattr(connection.Conn, "send", sending)
    monkeypatch.setattr(connection.Conn, "receive", receiving)
    return seen


def test_a_batch_of_16_tasks_commits_them_with_one_lookup_and_pipelined_ends(services, monkeypatch):
    """The driver commits a batch's winning transactions. Before: for each task, a
    FindCoordinator round trip (the commit runs in a process that never saw the tasks'
    ids), then an EndTxn round trip, one after another: 32 round trips at 16 tasks, 128 at
    64. Now one FindCoordinator names every id, and the EndTxn requests after the first
    winner go out together before their answers are read. Every record lands once."""
    from collections import OrderedDict

    from spark_ext.connectors.kafka.client import transactions

    bootstrap = services.kafka_bootstrap
    topic = create_topic(bootstrap, 16, "ends")
    assert end_offsets(bootstrap, topic) == 0  # every leader answers (see the test above)
    prefix = f"pe-{topic}"
    plan = sink_plan(bootstrap, topic, prefix)
    rows = [[f"t{t:02d}-{i:03d}" for i in range(50)] for t in range(16)]
    committables = [prepare_batch(plan, 0, r, partition=t) for t, r in enumerate(rows)]
    # The commit runs in a process of its own: its client knows none of the tasks' ids.
    monkeypatch.setattr(transactions, "_kept", OrderedDict())
    seen = _observe(monkeypatch)
    plan.new_committer().commit(committables, 0, plan.claim)
    tids = sorted(c.producer.transactional_id for c in committables)
    lookups = [s.split()[2].split(",") for s in seen if s.startswith("send FindCoordinator")]
    naming_tasks = [k for k in lookups if set(k) & set(tids)]
    assert len(naming_tasks) == 1 and set(tids) <= set(naming_tasks[0]), lookups  # one lookup, every id
    ends = [i for i, s in enumerate(seen) if s == "send EndTxn"]
    assert len(ends) == 1 + 1 + 16, seen  # the decision's, the done record's, every winner's
    # winners 2-16 in one burst: sent back to back, then their 15 answers in a row
    burst = seen.index("send EndTxn", seen.index("receive EndTxn", ends[1]) + 1)
    assert seen[burst:burst + 30] == ["send EndTxn"] * 15 + ["receive EndTxn"] * 15, seen
    assert _land(bootstrap, topic, 800) == sorted(v for r in rows for v in r)  # every record once
    assert open_transactions(bootstrap, prefix) == []


def test_pipelined_ends_leave_what_the_broker_refused_to_the_one_at_a_time_path(services):
    """``end_txns`` against the broker: an open transaction commits, a transaction it
    committed before answers success again (a retried commit is safe), and a producer a
    newer one fenced is returned for ``end_txn`` to raise on, its transaction untouched."""
    from spark_ext.connectors.kafka.client.transactions import KafkaTxnClient

    bootstrap = services.kafka_bootstrap
    topic = create_topic(bootstrap, 3, "refused")
    assert end_offsets(bootstrap, topic) == 0
    prefix = f"pr-{topic}"
    plan = sink_plan(bootstrap, topic, prefix)
    c = [prepare_batch(plan, 0, [f"p{p}-{i}" for i in range(10)], partition=p) for p in range(3)]
    client = KafkaTxnClient(bootstrap, 10.0)
    try:
        committed, open_, fenced = (x.producer for x in c)
        assert client.end_txns([committed], commit=True) == []
        client.init_producer(fenced.transactional_id, 60_000)  # fences it, aborting its transaction
        assert client.end_txns([open_, committed, fenced], commit=True) == [fenced]
    finally:
        client.close()
    assert _land(bootstrap, topic, 20) == sorted(f"p{p}-{i}" for p in (0, 1) for i in range(10))
    assert open_transactions(bootstrap, prefix) == []



def test_a_steady_batchs_plan_reads_the_decision_records_three_times_not_six(services, monkeypatch):
    """Each batch's plan fences older runs after checking that no other query holds the
    prefix. Before: that check read the decision, its kept copy and the done record, and the
    read after the fence all three again (six round trips). The check needs only the
    decision (its kept copy once the broker expired it), and the kept copy can add nothing
    once the done record names the decision: three reads now."""
    from kafka.protocol.consumer.group import OffsetFetchRequest

    bootstrap = services.kafka_bootstrap
    topic = create_topic(bootstrap, 2, "steady")
    prefix = f"st-{topic}"
    for b in range(2):  # batch 1 is decided and done when batch 2 plans
        plan = sink_plan(bootstrap, topic, prefix)
        plan.new_committer().commit([prepare_batch(plan, b, [f"b{b}-{i}" for i in range(10)])], b, plan.claim)
    reads: list[list[str]] = []
    real = connection.Conn.send

    def send(self: Any, request: Any, version: int) -> Any:
        if isinstance(request, OffsetFetchRequest):
            reads.append([g.group_id for g in request.groups] if version >= 8 else [request.group_id])
        return real(self, request, version)

    monkeypatch.setattr(connection.Conn, "send", send)
    plan = sink_plan(bootstrap, topic, prefix)
    assert plan.claim is not None and plan.claim.last_decided is not None
    assert plan.claim.last_decided.batch_id == 1
    assert len(reads) == 3, reads  # the check's decision; after the fence, the decision and its done record
    monkeypatch.undo()
    plan.new_committer().commit([prepare_batch(plan, 2, ["b2"])], 2, plan.claim)
    assert _land(bootstrap, topic, 21) == sorted([*(f"b{b}-{i}" for b in range(2) for i in range(10)), "b2"])
