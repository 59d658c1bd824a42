"""A frozen executor on a standalone cluster: the worker host running a task stopped
(SIGSTOP of its Worker daemon, executor JVM and Python workers) while the task writes to
PostgreSQL, as a hung VM would. Spark declares the executor lost and runs the task again
elsewhere; the frozen task's session still holds its share lock on the sink's row, which
the next batch's claim must get past. Resumed later (SIGCONT), the frozen task must not
land anything. ``make faults`` runs this (marker campaign)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from spark_ext.options import checkpoint_sink_id
from tests.support.kafka_sink import consume, open_transactions, prefix_of
from tests.support.kafka_util import create_topic, produce
from tests.support.pg_util import prepared, query, table_name
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.spark, pytest.mark.services, pytest.mark.campaign]

PER_PARTITION = 1500
GATE_OFFSET = 550  # partition 0, batch 1 (300 records a partition a batch), row 250 of its task


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().replace(b"\0", b" ").decode(errors="replace")


def _executor_of(pid: int) -> int:
    """The executor JVM a Python worker belongs to (its nearest CoarseGrainedExecutorBackend)."""
    p = pid
    while p > 1:
        if "CoarseGrainedExecutorBackend" in _cmdline(p):
            return p
        p = _ppid(p)
    raise AssertionError(f"process {pid} runs under no executor")


def _tree(root: int) -> list[int]:
    """``root`` and every process below it."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                children.setdefault(_ppid(int(d)), []).append(int(d))
            except (OSError, IndexError):
                continue
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def _signal(pids: list[int], sig: signal.Signals) -> None:
    for p in pids:
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass


class _Target:
    """Where the query writes, and what a reader sees there."""

    def __init__(self, sink: str, services, ckpt: Path) -> None:
        self.sink, self.services, self.ckpt = sink, services, ckpt
        if sink == "jdbc":
            self.table = table_name("frozen")
        else:
            self.topic = create_topic(services.kafka_bootstrap, 2, "frozenout")

    def argv(self) -> list[str]:
        if self.sink == "jdbc":
            return ["jdbc", self.services.postgres_url, self.table]
        return ["kafka", self.topic]

    def committed(self) -> list[tuple[int, int]]:
        """(partition, offset) of every input record the sink holds, committed, repeats kept."""
        if self.sink == "jdbc":
            try:
                return [(int(p), int(o)) for p, o in
                        query(self.services.postgres_url, f'SELECT partition, "offset" FROM {self.table}')]
            except Exception:  # noqa: BLE001  the table is created by the query's first batch
                return []
        values = [v.decode().split(":") for _, _, v in consume(self.services.kafka_bootstrap, self.topic)]
        return [(int(p), int(o)) for p, o, _ in values]

    def in_doubt(self) -> list:
        if self.sink == "jdbc":
            return prepared(self.services.postgres_url, checkpoint_sink_id(str(self.ckpt)))
        return open_transactions(self.services.kafka_bootstrap, prefix_of(self.ckpt))


@pytest.mark.parametrize("sink", ["jdbc", "kafka"])
def test_a_worker_host_frozen_mid_task_is_declared_lost_and_its_task_lands_once(services, tmp_path: Path,
                                                                                sink: str):
    """Before (PostgreSQL): the frozen task's session kept its share lock on the sink's row
    and the next batch's claim failed after lockTimeoutMs ("writers of another run still
    hold it"), so did the query; now the claim ends the sessions of fenced epochs."""
    from examples.payments.cluster import StandaloneCluster  # here: make test-compat stages tests alone

    bootstrap = services.kafka_bootstrap
    topic = create_topic(bootstrap, 2, "frozen")
    produce(bootstrap, topic, [(p, None, ("gate" if (p, i) == (0, GATE_OFFSET) else f"{p}-{i}").encode())
                               for p in range(2) for i in range(PER_PARTITION)])
    ckpt, gates = tmp_path / "ckpt", tmp_path / "gate"
    target = _Target(sink, services, ckpt)
    gates.mkdir()
    (gates / "hold").touch()
    log = tmp_path / "driver.log"
    with StandaloneCluster(workers=2, memory="1g", work=tmp_path / "cluster") as cluster:
        driver = subprocess.Popen(
            [sys.executable, "-m", "tests.drivers.gated_kafka_to_sink", cluster.url, bootstrap, topic,
             str(ckpt), str(gates), *target.argv()], start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=log.open("w"))
        frozen: list[int] = []
        try:
            wait_for(lambda: (gates / "holding").exists() or driver.poll() is not None,
                     "the task of batch 1 to reach the gate", 240)
            assert driver.poll() is None, log.read_text()[-3000:]
            assert len(target.committed()) == 600  # batch 0 committed first
            # The whole worker host: its Worker daemon too, which would otherwise reap the
            # lost executor's processes (and so end the task's session) within seconds.
            host = _ppid(_executor_of(int((gates / "holding").read_text())))
            assert "deploy.worker.Worker" in _cmdline(host), _cmdline(host)
            frozen = _tree(host)
            _signal(frozen, signal.SIGSTOP)
            (gates / "hold").unlink()  # the task's next attempt, elsewhere, passes the gate
            wait_for(lambda: len(target.committed()) >= 1800 or driver.poll() is not None,
                     "batches 1 and 2 committed without the frozen host", 240)
            _signal(frozen, signal.SIGCONT)  # the frozen task goes on, long after its batch committed
            frozen = []
            assert driver.wait(timeout=300) == 0, log.read_text()[-5000:]
        finally:
            _signal(frozen, signal.SIGCONT)
            if driver.poll() is None:
                os.killpg(driver.pid, signal.SIGKILL)
                driver.wait()
    got = target.committed()
    assert len(got) == len(set(got)) == 2 * PER_PARTITION  # every record once
    assert target.in_doubt() == []  # nothing left in doubt
