"""Exactly-once Kafka -> Kafka on a three-broker KRaft cluster of its own (replication 3,
``min.insync.replicas=2``), with the faults a production cluster has: a broker frozen
past the client timeouts, the partition leaders killed.

The cluster runs on free loopback ports, so these tests do not touch the shared broker.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.kafka_cluster import KafkaCluster, kafka_cluster
from spark_ext.connectors.kafka.client.connection import metadata
from spark_ext.connectors.kafka.client.transactions import KafkaTxnClient
from spark_ext.connectors.kafka.sink.config import KafkaSinkConfig
from spark_ext.guarantees import Guarantee
from spark_ext.options import Options
from tests.support.kafka_sink import consume, open_transactions, prefix_of
from tests.support.kafka_util import create_topic, produce

pytestmark = [pytest.mark.spark, pytest.mark.kafka_cluster]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """One three-node cluster for the module: each test leaves every node running."""
    with kafka_cluster(tmp_path_factory.mktemp("cluster")) as c:
        yield c

RECORDS = 24_000
PER_TRIGGER = 1_200  # 20 batches


def _start(c: KafkaCluster, tmp: Path, src: str, out: str, first: int | None = None,
           **options: str) -> subprocess.Popen:
    """The query as its own driver; ``first``: the node named first in its bootstrap list."""
    nodes = sorted(c.nodes, key=lambda n: n.node_id != first)
    spec = {"name": "cluster", "source": "kafka", "sink": "kafka", "checkpoint": str(tmp / "ckpt"),
            "per_trigger": PER_TRIGGER, "bootstrap": ",".join(n.address for n in nodes), "topic": src,
            "out": out,
            "options": {"guarantee": "exactly_once", **options}}
    return subprocess.Popen([sys.executable, "-m", "tests.drivers.campaign", json.dumps(spec)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _topics(c: KafkaCluster) -> tuple[str, str]:
    src = create_topic(c.bootstrap, 3, "in", replication=3)
    out = create_topic(c.bootstrap, 3, "out", replication=3)
    produce(c.bootstrap, src, ((i % 3, str(i).encode(), str(i).encode()) for i in range(RECORDS)))
    return src, out


def _wait_committed(c: KafkaCluster, out: str, proc: subprocess.Popen) -> None:
    """Until the query committed its first batch (bounded)."""
    deadline = time.monotonic() + 120
    while not consume(c.bootstrap, out):
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "no batch committed in 120 s"
        time.sleep(0.5)


def _node_of(c: KafkaCluster, address: tuple[str, int]) -> int:
    return next(n.node_id for n in c.nodes if n.port == address[1])


def _assert_exactly_once(c: KafkaCluster, proc: subprocess.Popen, out: str, tmp: Path) -> None:
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-4000:]
    got = sorted(int(v) for _, _, v in consume(c.bootstrap, out))
    assert len(got) == len(set(got)), f"{len(got) - len(set(got))} records twice"
    assert got == list(range(RECORDS)), f"{RECORDS - len(got)} records lost"
    assert open_transactions(c.bootstrap, prefix_of(tmp / "ckpt")) == []


def test_one_broker_of_three_frozen_past_the_client_timeout_is_ridden_out(cluster, tmp_path):
    """The broker coordinating the sink's decision group, named first in the query's
    bootstrap list, is frozen (SIGSTOP) for 40 s, past the 30 s request timeout, while the
    query runs: the cluster stays available (the other two take over its partitions), so
    the query must ride it out and end with every record once and no transaction open."""
    c = cluster
    src, out = _topics(c)
    prefix = prefix_of(tmp_path / "ckpt")
    client = KafkaTxnClient(c.bootstrap, 10.0)
    try:
        coord = client.coordinator(f"{prefix}.batches", 0)
        victim = _node_of(c, coord.sock.getpeername()[:2])
    finally:
        client.close()
    proc = _start(c, tmp_path, src, out, first=victim)
    try:
        _wait_committed(c, out, proc)
        c.freeze(victim)
        time.sleep(40)  # the fault's length, not a wait for a condition
        c.thaw(victim)
        _assert_exactly_once(c, proc, out, tmp_path)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_frozen_coordinator_is_left_for_its_successor_within_the_delivery_budget(cluster, tmp_path):
    """The sink's client holds a connection to its decision group's coordinator; that broker
    freezes. A request to it times out after ``kafka.request.timeout.ms`` (5 s here), which
    must not end the step: the client looks the coordinator up again (the cluster moves it
    once the controller fences the frozen broker, about 9 s) and answers within
    ``kafka.delivery.timeout.ms``. Before: it gave up after one request timeout."""
    c = cluster
    out = create_topic(c.bootstrap, 1, "out", replication=3)
    cfg = KafkaSinkConfig.parse(Options({"kafka.bootstrap.servers": c.bootstrap, "topic": out,
                                         "transactionalIdPrefix": "frozen-coord",
                                         "kafka.request.timeout.ms": "5000"}, "hzsink"),
                                Guarantee.EXACTLY_ONCE)
    client = KafkaTxnClient(cfg.bootstrap, cfg.timeout_s, cfg.security, cfg.budget_s)
    try:
        coord = client.coordinator(cfg.group, 0)
        victim = _node_of(c, coord.sock.getpeername()[:2])
        c.freeze(victim)
        began = time.monotonic()
        assert client.fetch_offsets(cfg.group, out, [0]).get(0, (-1, ""))[0] == -1  # nothing decided yet
        took = time.monotonic() - began
        assert took > cfg.timeout_s  # it did wait on the frozen broker first
        survivor = _node_of(c, client.coordinator(cfg.group, 0).sock.getpeername()[:2])
        assert survivor != victim
    finally:
        client.close()
        c.thaw(victim)


def test_the_sinks_start_check_asks_a_live_broker_when_one_was_just_killed(cluster):
    """Every batch builds the sink's writer, which reads the brokers' transaction.max.timeout.ms.
    Right after a broker is killed the cluster's metadata still lists it (until the
    controller fences it) and the check picked the lowest node id: the query ended on
    "Connection refused" while two brokers served (seen in make faults). It must ask another."""
    c = cluster
    first = min(b.node_id for b in metadata(c.bootstrap, [], 5.0).brokers)
    c.kill(first)
    try:
        client = KafkaTxnClient(c.bootstrap, 5.0, budget_s=30.0)
        try:
            assert client.broker_config("transaction.max.timeout.ms") is not None
        finally:
            client.close()
    finally:
        c.start(first)
        c.wait_ready()


def _preferred_election(c: KafkaCluster, topics: list[str]) -> None:
    """Move every partition of ``topics`` back to its preferred leader (Kafka's
    kafka-leader-election --election-type preferred)."""
    from confluent_kafka import ElectionType, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    tps = [TopicPartition(t, p) for t in topics for p in range(3)]
    admin.elect_leaders(ElectionType.PREFERRED, tps).result(timeout=60)


def test_partition_leaders_killed_then_elected_back_keep_exactly_once(cluster, tmp_path):
    """While the query runs, the node leading the output's partition 0 is killed (kill -9),
    so that partition's leadership and whatever coordinators the node held move to the
    others; the node comes back on its data and a preferred election moves its partitions
    back to it (a second leader move). Every record once, nothing left open."""
    c = cluster
    src, out = _topics(c)
    proc = _start(c, tmp_path, src, out)
    try:
        _wait_committed(c, out, proc)
        victim = c.leader(out, 0)
        c.kill(victim)
        deadline = time.monotonic() + 60
        while c.leader(out, 0) in (victim, -1):  # the controller elects another leader
            assert time.monotonic() < deadline, "no new leader for the output in 60 s"
            time.sleep(0.5)
        c.start(victim)
        c.wait_ready()
        deadline = time.monotonic() + 90
        while c.leader(out, 0) != victim:  # once it is back in sync, it leads again
            assert time.monotonic() < deadline, "the preferred leader never took the output back"
            _preferred_election(c, [src, out])
            time.sleep(1)
        _assert_exactly_once(c, proc, out, tmp_path)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_leader_killed_while_every_leader_holds_unacknowledged_requests(cluster, monkeypatch):
    """One task writes to 3 partitions led by 3 nodes, in small record batches, so each
    leader holds unacknowledged produce requests; the leader of partition 0 is killed
    (kill -9) at the first read of an acknowledgement while every leader has some. The task must ride it
    out within its delivery budget and every record land once. Before: the recovery asked
    the new leader on the connection that still carried its own unacknowledged requests
    and read one of their replies as the answer (the task failed), and a failed recovery
    attempt closed every connection while other leaders' requests stayed counted as in
    flight."""
    from spark_ext.connectors.kafka.sink import sender
    from tests.support.kafka_sink import prepare_batch, sink_plan

    c = cluster
    out = create_topic(c.bootstrap, 3, "unacked", replication=3)
    deadline = time.monotonic() + 30
    while -1 in (leaders := {c.leader(out, p) for p in range(3)}):  # until every node knows the topic
        assert time.monotonic() < deadline, f"no leaders for {out} in 30 s"
        time.sleep(0.2)
    assert len(leaders) >= 2, f"partitions led by {leaders}: one node leads all, the case is not made"
    victim = c.leader(out, 0)
    real = sender.Sender._receive
    killed: list[int] = []

    def receive(self: sender.Sender, leader: int) -> None:
        if not killed and all(self._pending.get(n) for n in leaders):  # every leader holds some
            c.kill(victim)  # the fault; the sender's own steps are unchanged
            killed.append(victim)
        real(self, leader)

    monkeypatch.setattr(sender.Sender, "_receive", receive)
    rows = [f"row-{i:05d}" for i in range(3000)]
    prefix = f"unacked-{out}"
    try:
        plan = sink_plan(c.bootstrap, out, prefix, opts={"kafka.batch.size": "1024"})
        committable = prepare_batch(plan, 0, rows)
        assert killed and committable.rows == len(rows)
        monkeypatch.setattr(sender.Sender, "_receive", real)
        plan.new_committer().commit([committable], 0, plan.claim)
    finally:
        if killed:
            c.start(victim)
            c.wait_ready()
    _assert_each_once(c, out, rows, prefix)


def test_a_batch_the_leader_appended_and_no_follower_copied_is_not_taken_as_held(cluster, monkeypatch):
    """A task writes two record batches to a partition. The first is sent, and copied by
    both followers; then they freeze, and the task's last batch goes out. The leader appends
    it and cannot acknowledge it, so the request times out and the recovery asks the leader
    which batches it holds (DescribeProducers): it names the last one, though no follower
    has it. The leader is then killed (kill -9) and the followers resumed: one of them, in
    sync and without the batch, leads. Before: the batch counted as held, was never sent
    again, and the transaction committed without its records."""
    from spark_ext.connectors.kafka.sink import sender
    from tests.support.kafka_sink import end_offsets, prepare_batch, sink_plan

    c = cluster
    out = create_topic(c.bootstrap, 1, "uncopied", replication=3)
    deadline = time.monotonic() + 30
    while (victim := c.leader(out, 0)) == -1:  # until every node knows the topic
        assert time.monotonic() < deadline, f"no leader for {out} in 30 s"
        time.sleep(0.2)
    followers = [n.node_id for n in c.nodes if n.node_id != victim]
    # The leader first: the recovery's metadata comes from it while the followers are frozen.
    bootstrap = ",".join(n.address for n in sorted(c.nodes, key=lambda n: n.node_id != victim))
    real_flush, real_last = sender.Sender.flush, sender.Sender._last_sequences
    steps: list[str] = []

    def flush(self: sender.Sender) -> None:
        if not steps:
            # The first batch is in flight: once the followers hold it (the leader's high
            # watermark past it), they freeze. The last batch is still to be sent.
            first = sum(n for reqs in self._pending.values() for req in reqs for _, _, n in req)
            assert first and self._ready, "the case needs a batch sent and one to send at flush"
            deadline = time.monotonic() + 30
            while end_offsets(c.node(victim).address, out) < first:
                assert time.monotonic() < deadline, "the followers did not copy the first batch in 30 s"
                time.sleep(0.05)
            for f in followers:
                c.freeze(f)
            steps.append("frozen")
        real_flush(self)

    def last_sequences(self: sender.Sender, items: list[sender.Item]) -> dict[tuple[str, int], int]:
        held = real_last(self, items)
        if steps == ["frozen"]:  # the leader has answered: now it goes, the followers come back
            steps.append(f"held {held}")
            c.kill(victim)
            for f in followers:
                c.thaw(f)
        return held

    monkeypatch.setattr(sender.Sender, "flush", flush)
    monkeypatch.setattr(sender.Sender, "_last_sequences", last_sequences)
    rows = [f"row-{i:05d}-{'x' * 300}" for i in range(2500)]  # 1.5 MB: two batches of the default size
    prefix = f"uncopied-{out}"
    try:
        plan = sink_plan(bootstrap, out, prefix, opts={"kafka.request.timeout.ms": "3000"})
        committable = prepare_batch(plan, 0, rows)
        assert len(steps) == 2 and steps[1] != "held {}", steps  # the leader named the uncopied batch
        monkeypatch.setattr(sender.Sender, "flush", real_flush)
        monkeypatch.setattr(sender.Sender, "_last_sequences", real_last)
        plan.new_committer().commit([committable], 0, plan.claim)
    finally:
        for f in followers:
            if c.node(f).frozen:
                c.thaw(f)
        if c.node(victim).proc is None:
            c.start(victim)
        c.wait_ready()
    _assert_each_once(c, out, rows, prefix)


def _assert_each_once(c: KafkaCluster, out: str, rows: list[str], prefix: str) -> None:
    """Every row in ``out`` once, read_committed, and no transaction of ``prefix`` left open."""
    deadline = time.monotonic() + 60
    while len(got := consume(c.bootstrap, out)) < len(rows) and time.monotonic() < deadline:
        time.sleep(0.5)  # the commit's markers reach the partitions after it returns
    assert sorted(v.decode() for _, _, v in got) == rows
    assert open_transactions(c.bootstrap, prefix) == []
