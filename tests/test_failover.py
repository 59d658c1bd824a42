"""A database that fails over under a running query: the query rides through it.

Many managed databases take 60-120 s to fail over; a query that dies after a minute needs
someone to restart it. Frozen (SIGSTOP), the server accepts TCP connections in its kernel
and answers nothing, as a host in failover does, for 90 s. Slow (the freeze itself), so
``make faults`` runs it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from spark_ext.options import checkpoint_sink_id
from tests.support import kafka_util
from tests.support.pg_util import execute, prepared, query, table_name
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.campaign, pytest.mark.services]

FREEZE_S = 90
RECORDS = 30_000  # 100 batches of 300: the query is mid-way when the freeze lands


def _count(url: str, table: str) -> int:
    return int(query(url, f"SELECT count(*) FROM {table}")[0][0])


def test_postgres_frozen_for_90_s_under_a_running_exactly_once_query_is_ridden_through(services, tmp_path):
    """Kafka -> PostgreSQL exactly_once with the sink's default options; PostgreSQL is
    frozen for 90 s after some batches committed. The query waits it out (its tasks and
    its driver reconnect within reconnectTimeoutMs, whose default covers a failover), goes
    on by itself and writes every record once, leaving nothing in doubt."""
    from services.common import _read_pid

    url = services.postgres_url
    topic = kafka_util.create_topic(services.kafka_bootstrap, 2, "failover")
    kafka_util.produce(services.kafka_bootstrap, topic, kafka_util.numbered(2, RECORDS))
    table = table_name("failover")
    execute(url, f"CREATE TABLE {table} (partition int, \"offset\" bigint, v text)")
    ckpt = tmp_path / "ckpt"
    driver = subprocess.Popen([sys.executable, "-m", "tests.drivers.kafka_to_jdbc", services.kafka_bootstrap,
                               topic, str(ckpt), url, table, "-"],
                              start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
    pg = _read_pid("postgres")
    assert pg is not None, "PostgreSQL is not running"
    frozen = False
    try:
        wait_for(lambda: _count(url, table) > 0 or driver.poll() is not None, "a first batch committed")
        before = _count(url, table)
        assert before < RECORDS, "the query finished before the freeze: nothing tested"
        os.killpg(pg, signal.SIGSTOP)
        frozen = True
        time.sleep(FREEZE_S)  # the fault itself: the server answers nothing for this long
        os.killpg(pg, signal.SIGCONT)
        frozen = False
        assert driver.poll() is None, "the query ended during the freeze:\n" + driver.communicate()[1][-3000:]
        _, err = driver.communicate(timeout=600)
        assert driver.returncode == 0, err[-3000:]
    finally:
        if frozen:
            os.killpg(pg, signal.SIGCONT)
        if driver.poll() is None:
            driver.kill()
    rows = query(url, f"SELECT count(*), count(DISTINCT (partition, \"offset\")) FROM {table}")
    assert rows == [(RECORDS, RECORDS)]  # every record once
    assert prepared(url, checkpoint_sink_id(str(ckpt))) == []
