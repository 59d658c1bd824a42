"""A short-lived Kafka cluster of its own: ``nodes`` KRaft nodes (each broker and
controller) on free loopback ports, for tests and fault campaigns that need settings or
faults the shared broker must not have: leaders that move, a broker frozen or killed.

With three nodes the internal topics are replicated three times with
``min.insync.replicas=2``, as production clusters run, so one node may be down or frozen
while transactions and group commits go on. Every node is started and stopped by its pid
(process group); ``close`` stops what is left, whatever happened.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from services.common import HOST, ServiceError, _java
from services.kafka import kafka_libs

_START_TIMEOUT_S = 120.0


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind((HOST, 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class Node:
    node_id: int
    port: int
    controller_port: int
    workdir: Path
    proc: subprocess.Popen | None = None
    frozen: bool = False

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"


@dataclass
class KafkaCluster:
    """The running cluster; ``bootstrap`` names every node, as a client's list should."""

    nodes: list[Node]
    settings: dict[str, str]
    _logs: list[object] = field(default_factory=list)

    @property
    def bootstrap(self) -> str:
        return ",".join(n.address for n in self.nodes)

    def node(self, node_id: int) -> Node:
        return next(n for n in self.nodes if n.node_id == node_id)

    # --- faults ----------------------------------------------------------------------------

    def freeze(self, node_id: int) -> None:
        """SIGSTOP the node: its sockets stay open and answer nothing, as a hung host."""
        n = self.node(node_id)
        assert n.proc is not None
        os.killpg(n.proc.pid, signal.SIGSTOP)
        n.frozen = True

    def thaw(self, node_id: int) -> None:
        n = self.node(node_id)
        assert n.proc is not None
        os.killpg(n.proc.pid, signal.SIGCONT)
        n.frozen = False

    def kill(self, node_id: int) -> None:
        """kill -9 of the node (a crash); ``start`` brings it back on its data."""
        n = self.node(node_id)
        assert n.proc is not None
        os.killpg(n.proc.pid, signal.SIGKILL)
        n.proc.wait()
        n.proc, n.frozen = None, False

    def start(self, node_id: int) -> None:
        n = self.node(node_id)
        log = open(n.workdir / "broker.log", "ab")
        self._logs.append(log)
        n.proc = subprocess.Popen([_java(), *_jvm(n), "-cp", f"{kafka_libs()}/*", "kafka.Kafka",
                                   str(n.workdir / "server.properties")],
                                  stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  start_new_session=True)

    def close(self) -> None:
        for n in self.nodes:
            if n.proc is None:
                continue
            # The cluster's data is thrown away: no controlled shutdown (three nodes take
            # half a minute to agree on one).
            os.killpg(n.proc.pid, signal.SIGKILL)
            n.proc.wait()
            n.proc = None
        for log in self._logs:
            log.close()  # type: ignore[attr-defined]

    # --- what the cluster says ---------------------------------------------------------------

    def leader(self, topic: str, partition: int) -> int:
        """The node leading ``topic``-``partition`` now (-1: none), from a live node's metadata."""
        from spark_ext.connectors.kafka.client.connection import metadata

        live = ",".join(n.address for n in self.nodes if n.proc is not None and not n.frozen)
        md = metadata(live, [topic], 10.0)
        for t in md.topics:
            if t.name == topic:
                for p in t.partitions:
                    if p.partition_index == partition:
                        return int(p.leader_id)
        return -1

    def wait_ready(self, timeout_s: float = _START_TIMEOUT_S) -> None:
        """Until every live node answers and the group coordinator is elected (bounded)."""
        from spark_ext.connectors.kafka.client.transactions import KafkaTxnClient

        deadline = time.monotonic() + timeout_s
        for n in self.nodes:
            if n.proc is None:
                continue
            while True:
                if n.proc.poll() is not None:
                    raise ServiceError(f"kafka node {n.node_id} exited:\n{_tail(n.workdir / 'broker.log')}")
                try:
                    client = KafkaTxnClient(n.address, 3.0)
                    try:
                        client.coordinator(f"ready-{uuid.uuid4().hex[:8]}", 0)
                        break
                    finally:
                        client.close()
                except Exception:  # noqa: BLE001 - not up yet
                    if time.monotonic() > deadline:
                        raise ServiceError(f"kafka node {n.node_id} did not come up in {timeout_s:.0f} s:\n"
                                           f"{_tail(n.workdir / 'broker.log')}") from None
                    time.sleep(0.5)


def _jvm(n: Node) -> list[str]:
    return ["-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", f"-Dkafka.logs.dir={n.workdir}",
            f"-Dlog4j2.configurationFile={n.workdir / 'log4j2.properties'}"]


def _tail(path: Path, n: int = 3000) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else "(no log)"


_LOG4J = "\n".join([
    "status = warn", "appender.out.type = Console", "appender.out.name = OUT",
    "appender.out.layout.type = PatternLayout", "appender.out.layout.pattern = [%d] %p %m (%c)%n",
    "rootLogger.level = WARN", "rootLogger.appenderRef.out.ref = OUT", ""])


@contextmanager
def kafka_cluster(workdir: Path, nodes: int = 3,
                  settings: dict[str, str] | None = None) -> Iterator[KafkaCluster]:
    """Start ``nodes`` KRaft nodes in ``workdir`` and yield the cluster once every node
    answers; every node is stopped when the block ends. Raises ``ServiceError`` (never
    skips) when a node does not come up."""
    replicas = str(min(nodes, 3))
    min_isr = "2" if nodes >= 3 else "1"
    ports = _free_ports(2 * nodes)
    members = [Node(i + 1, ports[2 * i], ports[2 * i + 1], workdir / f"node-{i + 1}") for i in range(nodes)]
    voters = ",".join(f"{n.node_id}@{HOST}:{n.controller_port}" for n in members)
    base = {
        "process.roles": "broker,controller", "controller.quorum.voters": voters,
        "controller.listener.names": "CONTROLLER", "inter.broker.listener.name": "PLAINTEXT",
        "num.partitions": "1", "default.replication.factor": replicas, "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": replicas, "transaction.state.log.replication.factor": replicas,
        "transaction.state.log.min.isr": min_isr,
        "share.coordinator.state.topic.replication.factor": replicas,
        "share.coordinator.state.topic.min.isr": min_isr, "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false", "transaction.max.timeout.ms": "900000",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
        **(settings or {}),
    }
    cluster = KafkaCluster(members, base)
    cluster_id = "c3BhcmstZXh0LWNsdXN0ZXI"  # any fixed 22-character id: every node must share it
    try:
        for n in members:
            n.workdir.mkdir(parents=True, exist_ok=True)
            props = {**base, "node.id": str(n.node_id),
                     "listeners": f"PLAINTEXT://{HOST}:{n.port},CONTROLLER://{HOST}:{n.controller_port}",
                     "advertised.listeners": f"PLAINTEXT://{HOST}:{n.port}",
                     "log.dirs": str(n.workdir / "data")}
            (n.workdir / "server.properties").write_text("".join(f"{k}={v}\n" for k, v in props.items()))
            (n.workdir / "log4j2.properties").write_text(_LOG4J)
            fmt = subprocess.run([_java(), *_jvm(n), "-cp", f"{kafka_libs()}/*", "kafka.tools.StorageTool",
                                  "format", "-t", cluster_id, "-c", str(n.workdir / "server.properties")],
                                 capture_output=True, text=True)
            if fmt.returncode != 0:
                raise ServiceError(f"formatting kafka node {n.node_id} failed:\n{fmt.stdout}{fmt.stderr}")
        for n in members:
            cluster.start(n.node_id)
        cluster.wait_ready()
        yield cluster
    finally:
        cluster.close()
