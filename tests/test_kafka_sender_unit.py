"""What the sink's sender reads back from an encoded record batch (pure logic)."""

from __future__ import annotations

from aiokafka.record.default_records import DefaultRecordBatchBuilder

from spark_ext.connectors.kafka.sink.sender import _last_sequence, _producer_id


def test_producer_id_and_last_sequence_come_from_the_batch_header():
    b = DefaultRecordBatchBuilder(2, 0, 1, 4242, 7, 100, 1 << 16)
    for i in range(3):
        b.append(i, 0, b"k", b"v", [])
    item = (("t", 0), bytes(b.build()), 3)
    assert _producer_id(item) == 4242
    assert _last_sequence(item) == 102  # base sequence 100, three records
