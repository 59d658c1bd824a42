"""A second, short-lived Kafka broker for tests that need broker settings the shared one
must not have (for example ``offsets.retention.minutes=1``). Same jars as ``make
services``; listens on 127.0.0.1 only; stopped by its pid when the ``with`` block ends."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from services.common import HOST, _java
from services.kafka import kafka_libs
from spark_ext.connectors.kafka.client.transactions import KafkaTxnClient
from tests.support.processes import stop_group

PORT, CONTROLLER_PORT = 9096, 9097


@contextmanager
def temporary_broker(workdir: Path, settings: dict[str, str]) -> Iterator[str]:
    """Start a one-node KRaft broker with ``settings`` on top of the shared broker's
    basics; yields its bootstrap address. Fails (never skips) if it does not come up."""
    workdir.mkdir(parents=True, exist_ok=True)
    props = workdir / "server.properties"
    base = {
        "process.roles": "broker,controller", "node.id": "1",
        "controller.quorum.voters": f"1@{HOST}:{CONTROLLER_PORT}",
        "listeners": f"PLAINTEXT://{HOST}:{PORT},CONTROLLER://{HOST}:{CONTROLLER_PORT}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{PORT}",
        "controller.listener.names": "CONTROLLER", "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(workdir / "data"), "num.partitions": "1",
        "offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1", "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1", "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false", "transaction.max.timeout.ms": "900000",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
    }
    props.write_text("".join(f"{k}={v}\n" for k, v in {**base, **settings}.items()))
    java, cp = _java(), f"{kafka_libs()}/*"
    jvm = ["-Xms128m", "-Xmx512m", f"-Dkafka.logs.dir={workdir}"]
    fmt = subprocess.run([java, *jvm, "-cp", cp, "kafka.tools.StorageTool", "format", "-t",
                          "dGVzdC1icm9rZXItMDAwMQ", "-c", str(props)], capture_output=True, text=True)
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr
    log = open(workdir / "broker.log", "wb")
    proc = subprocess.Popen([java, *jvm, "-cp", cp, "kafka.Kafka", str(props)], stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    bootstrap = f"{HOST}:{PORT}"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, (workdir / "broker.log").read_text()[-3000:]
            try:
                client = KafkaTxnClient(bootstrap, 3.0)
                try:
                    client.coordinator("ready-check", 0)  # the offsets topic is up
                    break
                finally:
                    client.close()
            except Exception:  # noqa: BLE001 - not up yet
                assert time.monotonic() < deadline, "the temporary broker did not come up in 90 s"
                time.sleep(0.5)
        yield bootstrap
    finally:
        stop_group(proc)
        log.close()
