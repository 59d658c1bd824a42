"""The Kafka sink's decision split over offset metadata: pure logic (the broker round trip
is in test_kafka_sink.py)."""

from __future__ import annotations

import pytest

from spark_ext.connectors.kafka.client.transactions import Producer
from spark_ext.connectors.kafka.sink.decision import Decision, TornDecisionError, join, split_count


def _decision(tasks: int) -> Decision:
    return Decision(7, "q-1", "/ckpt", tuple(Producer(f"prefix-p{p}-a0-b1", 1000 + 7 * p, p % 3)
                                             for p in range(tasks)))


@pytest.mark.parametrize("tasks", [1, 200, 5000])
def test_every_part_fits_and_the_parts_join_to_the_decision(tasks):
    d = _decision(tasks)
    parts = d.parts(limit=1000)
    assert all(len(p) <= 1000 for p in parts)
    assert split_count(parts[0]) == len(parts)
    stored = {i: (8, p) for i, p in enumerate(parts)}
    assert join(parts[0], lambda ps: {i: stored[i] for i in ps}, 8, "g") == d


def test_a_part_of_another_batch_is_refused_not_joined():
    parts = _decision(5000).parts(limit=1000)
    assert len(parts) > 2
    stale = {i: (8, p) for i, p in enumerate(parts)}
    stale[2] = (5, parts[2])  # left by an earlier, longer decision
    with pytest.raises(TornDecisionError, match="part 2 of"):
        join(parts[0], lambda ps: {i: stale[i] for i in ps}, 8, "g")


@pytest.mark.parametrize("run", ["", "0b8e4f7c-9d5e-4c1a-8f2e-3d6b7a9c1e20"])
def test_the_run_that_decided_reads_back_and_a_decision_without_one_reads_as_before(run):
    d = Decision(7, "q-1", None, (Producer("p-0", 1, 0),), run)
    (part,) = d.parts()
    assert Decision.decode(part) == d
    assert ('"r":' in part) == bool(run)
