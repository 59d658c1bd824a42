"""What a task of the Kafka sink reports to the driver (executor -> driver), apart from the
writer so the driver's commit worker reads it without loading the writer's modules."""

from __future__ import annotations

from dataclasses import dataclass

from spark_ext.commit import Committable
from spark_ext.connectors.kafka.client.transactions import Producer


@dataclass(frozen=True)
class KafkaCommittable(Committable):
    """One task attempt's outcome (executor -> driver): the transaction it left open.

    ``producer``: (transactional id, producer id, epoch) of the open transaction; None when
    the attempt opened none (a replay of a decided batch, no rows, a weaker guarantee).
    """

    producer: Producer | None = None

    @property
    def prepared(self) -> bool:
        return self.producer is not None
