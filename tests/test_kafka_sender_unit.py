"""What the sink's sender reads back from an encoded record batch (pure logic)."""

from __future__ import annotations

from aiokafka.record.default_records import DefaultRecordBatchBuilder

from spark_ext.connectors.kafka.sink.config import KafkaSinkConfig
from spark_ext.connectors.kafka.sink.sender import _last_sequence, _producer_epoch, _producer_id


def test_producer_id_epoch_and_last_sequence_come_from_the_batch_header():
    b = DefaultRecordBatchBuilder(2, 0, 1, 4242, 7, 100, 1 << 16)
    for i in range(3):
        b.append(i, 0, b"k", b"v", [])
    item = (("t", 0), bytes(b.build()), 3)
    assert _producer_id(item) == 4242
    assert _producer_epoch(item) == 7
    assert _last_sequence(item) == 102  # base sequence 100, three records


def _sink_config(**opts: str) -> KafkaSinkConfig:
    from spark_ext.guarantees import Guarantee
    from spark_ext.options import Options

    base = {"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "t", "transactionalIdPrefix": "p"}
    return KafkaSinkConfig.parse(Options({**base, **opts}, "hzsink"), Guarantee.EXACTLY_ONCE)


def test_the_delivery_budget_bounds_a_step_and_defaults_to_two_minutes() -> None:
    import pytest

    from spark_ext.errors import InvalidOptionError

    assert (_sink_config().timeout_s, _sink_config().budget_s) == (30.0, 120.0)
    cfg = _sink_config(**{"kafka.request.timeout.ms": "5000", "kafka.delivery.timeout.ms": "60000"})
    assert (cfg.timeout_s, cfg.budget_s) == (5.0, 60.0)
    with pytest.raises(InvalidOptionError, match=r"kafka.delivery.timeout.ms' is 1000, below"):
        _sink_config(**{"kafka.delivery.timeout.ms": "1000"})
