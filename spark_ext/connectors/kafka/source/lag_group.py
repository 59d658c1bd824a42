"""``commitOffsetsToGroup``: a committed batch's end offsets, committed to a consumer group
so that Kafka's own tools see the query's lag. Driver, in the source's ``commit`` and in
its next ``latestOffset`` (whose start Spark hands over only once that batch committed).

For monitoring only: the offsets the query reads from live in Spark's checkpoint, and
nothing here is ever read back. The group has no members (the source joins none); its
offsets are committed as a standalone consumer commits them (generation -1), which is
what ``kafka-consumer-groups.sh --describe``, Burrow and Kafka exporters read. A failed
commit is logged, never raised: it must not stop the query it describes.
"""

from __future__ import annotations

import logging
from typing import Any

from spark_ext.connectors.kafka.source.config import KafkaSourceConfig
from spark_ext.connectors.kafka.source.offsets import from_json

log = logging.getLogger(__name__)


class GroupCommitter:
    """Commits end offsets to ``cfg.commit_group`` through a librdkafka consumer that is
    never subscribed (so every security setting the source supports works here too)."""

    def __init__(self, cfg: KafkaSourceConfig) -> None:
        assert cfg.commit_group
        self.cfg, self.group = cfg, cfg.commit_group
        self._consumer: Any = None
        self._failing = False
        self._last: Any = None  # the offsets last committed

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_consumer": None}

    def commit(self, end: Any) -> None:
        """Queue the commit and return: the planning path never waits on the group's
        coordinator (an away coordinator would hold a synchronous commit for many seconds
        every trigger). The outcome arrives in ``_done`` on a later call."""
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        offsets = from_json(end)
        try:
            if self._consumer is None:
                conf = {**self.cfg.consumer_conf(), "group.id": self.group, "on_commit": self._done}
                self._consumer = Consumer(conf)
            self._consumer.poll(0)  # serves the outcomes of earlier commits
            if offsets == self._last:
                return  # an idle query asks for the next batch many times a second
            self._consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())],
                                  asynchronous=True)
            self._last = offsets
        except KafkaException as e:
            self._failed(e)

    def _done(self, err: Any, partitions: Any) -> None:
        if err is not None:
            self._failed(err)
        elif self._failing:
            log.info("committing end offsets to consumer group %r works again", self.group)
            self._failing = False

    def _failed(self, e: Any) -> None:
        if not self._failing:
            log.warning("could not commit the batch's end offsets to consumer group %r (%s); the query "
                        "goes on, and the group's lag shows the last commit that worked", self.group, e)
        self._failing, self._last = True, None  # the next call commits again

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.poll(0)
            self._consumer.close()
            self._consumer = None
