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
import time
from typing import Any

from spark_ext.connectors.kafka.source.config import KafkaSourceConfig
from spark_ext.connectors.kafka.source.offsets import from_json

log = logging.getLogger(__name__)

# How long a plan that may be a run's last waits for its commit to reach the group: the
# process ends right after it, and the group would show the last batch as lag until the
# next run. An away coordinator costs a run's end this once, never a running query.
_FLUSH_WAIT_S = 10.0


class GroupCommitter:
    """Commits end offsets to ``cfg.commit_group`` through a librdkafka consumer that is
    never subscribed (so every security setting the source supports works here too)."""

    def __init__(self, cfg: KafkaSourceConfig) -> None:
        assert cfg.commit_group
        self.cfg, self.group = cfg, cfg.commit_group
        self._consumer: Any = None
        self._failing = False
        self._want: Any = None  # the offsets the group should hold
        self._last: Any = None  # the offsets last sent
        self._pending = 0  # commits sent whose outcome has not arrived yet
        self._flushed: Any = None  # the end offsets flush() last waited for

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_consumer": None}

    def commit(self, end: Any) -> None:
        """Ask for ``end`` and return: the planning path never waits on the group's
        coordinator (an away coordinator would hold a synchronous commit for many seconds
        every trigger). The outcome arrives in ``_done`` on a later call."""
        from confluent_kafka import Consumer, KafkaException

        try:
            if self._consumer is None:
                conf = {**self.cfg.consumer_conf(), "group.id": self.group, "on_commit": self._done}
                self._consumer = Consumer(conf)
            self._consumer.poll(0)  # serves the outcomes of earlier commits
            self._want = from_json(end)
            self._send()
        except KafkaException as e:
            self._failed(e)

    def _send(self) -> None:
        """Send the offsets wanted, unless sent already (an idle query asks for the next
        batch many times a second) or a commit is in flight: one at a time, because queued
        asynchronous commits complete, and are applied by the group, in any order (seen:
        the group left at the last batch but one when a run ended)."""
        from confluent_kafka import TopicPartition

        if self._pending or self._want is None or self._want == self._last:
            return
        self._consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in sorted(self._want.items())],
                              asynchronous=True)
        self._pending += 1
        self._last = self._want

    def _done(self, err: Any, partitions: Any) -> None:
        self._pending -= 1
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

    def flush(self, end: Any = None, wait_s: float = _FLUSH_WAIT_S) -> None:
        """Wait up to ``wait_s`` for the outcomes of the queued commits; with ``end``, once
        per distinct ``end`` (an idle query plans the same end many times a second, and
        an away coordinator must not hold each of those plans)."""
        from confluent_kafka import KafkaException

        if self._consumer is None or not self._unconfirmed():
            return
        if end is not None:
            if end == self._flushed:
                return
            self._flushed = end
        deadline = time.monotonic() + wait_s
        while self._unconfirmed() and time.monotonic() < deadline:
            self._consumer.poll(0.05)
            try:
                self._send()  # the newest offsets, once the commit before them came back
            except KafkaException as e:
                self._failed(e)
        if self._unconfirmed():
            log.warning("consumer group %r: the last end offsets were not confirmed within %.0f s; its lag "
                        "may show the last batch until the next run commits again", self.group, wait_s)

    def _unconfirmed(self) -> bool:
        return self._pending > 0 or (self._want is not None and self._want != self._last)

    def close(self) -> None:
        """Let the queued commits reach the group (a query stopped right after a batch),
        then close."""
        if self._consumer is None:
            return
        self.flush()
        self._consumer.close()
        self._consumer = None
