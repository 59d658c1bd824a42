"""The source's record-batch decoder against Kafka's own Java client, on the real broker.

Kafka's Java producer writes one partition with every codec (none, gzip, snappy, lz4,
zstd), null and empty keys and values, headers (a null value among them), explicit
timestamps, and transactions committed and aborted between plain writes
(``tests/support/java/KafkaCodecPeer.java``). Kafka's Java consumer reads it back under
both isolation levels; the source's reader (raw fetches, decoded by ``codec``) must return
exactly the same records: offsets, timestamps, keys, values and headers, nothing of an
aborted transaction under ``read_committed``, no control record either way.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pyarrow as pa
import pytest

from services.kafka import kafka_libs
from spark_ext.connectors.kafka.source.config import KafkaSourceConfig
from spark_ext.connectors.kafka.source.offsets import KafkaRange
from spark_ext.connectors.kafka.source.wire_reader import WireRangeReader
from spark_ext.options import Options
from tests.support import kafka_util

pytestmark = [pytest.mark.services]
PEER = Path(__file__).resolve().parent / "support" / "java" / "KafkaCodecPeer.java"


def _java(*args: str) -> str:
    res = subprocess.run(["java", "-cp", f"{kafka_libs()}/*", str(PEER), *args], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout


def _javas_read(bootstrap: str, topic: str, isolation: str) -> tuple[list[tuple[str, ...]], int]:
    lines = _java("consume", bootstrap, topic, isolation).splitlines()
    assert lines[-1].startswith("END "), lines[-3:]
    return [tuple(line.split("\t")) for line in lines[:-1]], int(lines[-1].split()[1])


def _hex(v: bytes | None) -> str:
    return "-" if v is None else v.hex()


def _ours(bootstrap: str, topic: str, end: int, isolation: str) -> list[tuple[str, ...]]:
    cfg = KafkaSourceConfig.parse(Options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
                                           "includeHeaders": "true", "kafka.isolation.level": isolation},
                                          "hzsource"))
    batches = list(WireRangeReader(cfg, KafkaRange(topic, 0, 0, end)))
    table = pa.Table.from_batches(batches)
    stamps = [us // 1000 for us in table.column("timestamp").cast(pa.int64()).to_pylist()]
    rows = zip(table.column("offset").to_pylist(), stamps, table.column("timestampType").to_pylist(),
               table.column("key").to_pylist(), table.column("value").to_pylist(),
               table.column("headers").to_pylist(), strict=True)
    return [(str(o), str(t), str(k), _hex(key), _hex(val),
             "".join(f"{h['key']}={_hex(h['value'])};" for h in heads or []))
            for o, t, k, key, val, heads in rows]


def test_every_codec_and_transaction_reads_as_kafkas_own_consumer_reads_it(services):
    topic = kafka_util.create_topic(services.kafka_bootstrap, 1, "codec")
    _java("produce", services.kafka_bootstrap, topic)
    for isolation in ("read_committed", "read_uncommitted"):
        want, end = _javas_read(services.kafka_bootstrap, topic, isolation)
        got = _ours(services.kafka_bootstrap, topic, end, isolation)
        assert len(got) == len(want) and got == want, (isolation, len(got), len(want))
    committed, _ = _javas_read(services.kafka_bootstrap, topic, "read_committed")
    everything, _ = _javas_read(services.kafka_bootstrap, topic, "read_uncommitted")
    assert len(committed) < len(everything)  # the aborted transactions were there to drop
    assert not any("txn-abort" in bytes.fromhex(v).decode() for *_, v, _h in committed if v != "-")


@pytest.mark.spark
# make test writes one compressed codec; the others share its path and run in make faults.
@pytest.mark.parametrize("codec", [*(pytest.param(c, marks=pytest.mark.campaign)
                                     for c in ("none", "gzip", "snappy", "lz4")), "zstd"])
def test_what_the_sink_writes_reads_back_through_kafkas_own_consumer(spark, services, tmp_path, codec):
    """The sink's C encoder, exactly-once: Kafka's Java consumer (read_committed) returns every
    row once with its key, value and headers: null and empty keys and values, a null header
    value, rows with no headers."""
    from tests.support.kafka_sink import run
    from tests.support.pg_util import write_json_files

    topic = kafka_util.create_topic(services.kafka_bootstrap, 1, f"codec-out-{codec}")
    write_json_files(tmp_path / "src", [300, 300])
    select = ("IF(id % 7 = 0, NULL, IF(id % 11 = 0, X'', CAST(concat('k', id % 5) AS BINARY))) AS key",
              "IF(id % 13 = 0, NULL, CAST(concat(v, repeat('x', CAST(id % 40 AS INT))) AS BINARY)) AS value",
              "IF(id % 3 = 0, NULL, array(named_struct('key', 'h0', 'value', CAST(id AS STRING) ::binary), "
              "named_struct('key', 'h1', 'value', IF(id % 2 = 0, NULL, X'00ff')))) AS headers")
    q = run(spark, tmp_path / "src", tmp_path / "ckpt", services.kafka_bootstrap, topic, select,
            **{"kafka.compression.type": codec})
    assert q.awaitTermination(180), "still running after 180 s"
    assert q.exception() is None, q.exception()
    want = sorted(
        (_hex(None if i % 7 == 0 else b"" if i % 11 == 0 else f"k{i % 5}".encode()),
         _hex(None if i % 13 == 0 else f"v{i}{'x' * (i % 40)}".encode()),
         "" if i % 3 == 0 else f"h0={str(i).encode().hex()};h1={'-' if i % 2 == 0 else '00ff'};")
        for i in range(600))
    got, end = _javas_read(services.kafka_bootstrap, topic, "read_committed")
    assert end >= 600 and sorted((k, v, h) for _o, _t, _k, k, v, h in got) == want
