"""What the sink's sender reads back from an encoded record batch (pure logic)."""

from __future__ import annotations

from aiokafka.record.default_records import DefaultRecordBatchBuilder

from spark_ext.connectors.kafka.sink.config import KafkaSinkConfig
from spark_ext.connectors.kafka.sink.sender import _last_sequence, _producer_epoch, _producer_id, _unconfirmed


def test_producer_id_epoch_and_last_sequence_come_from_the_batch_header():
    b = DefaultRecordBatchBuilder(2, 0, 1, 4242, 7, 100, 1 << 16)
    for i in range(3):
        b.append(i, 0, b"k", b"v", [])
    item = (("t", 0), bytes(b.build()), 3)
    assert _producer_id(item) == 4242
    assert _producer_epoch(item) == 7
    assert _last_sequence(item) == 102  # base sequence 100, three records


def _batch(tp: tuple[str, int], base_sequence: int, records: int) -> tuple[tuple[str, int], bytes, int]:
    b = DefaultRecordBatchBuilder(2, 0, 1, 4242, 7, base_sequence, 1 << 16)
    for i in range(records):
        b.append(i, 0, b"k", b"v", [])
    return (tp, bytes(b.build()), records)


def test_the_last_batch_a_leader_holds_goes_again_with_those_it_does_not():
    """Per partition: batches before the last one held are dropped; the last one held is
    sent again (its leader may not have had it copied yet), then the rest."""
    a0, a1, a2 = _batch(("t", 0), 0, 5), _batch(("t", 0), 5, 5), _batch(("t", 0), 10, 5)
    b0, b1 = _batch(("t", 1), 0, 3), _batch(("t", 1), 3, 3)
    c0 = _batch(("u", 0), 20, 2)  # its earlier batches were acknowledged; the leader holds up to 19
    items = [a0, b0, a1, b1, a2, c0]
    assert _unconfirmed(items, {("t", 0): 9, ("u", 0): 19}) == [b0, a1, b1, a2, c0]
    assert _unconfirmed(items, {("t", 0): 14, ("t", 1): 5, ("u", 0): 21}) == [b1, a2, c0]
    assert _unconfirmed(items, {}) == items


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
