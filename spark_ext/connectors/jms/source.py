"""Acknowledging queue source: ``hzsource`` connector ``jms`` (ActiveMQ Artemis over STOMP).

Hazelcast Jet's rules for an acknowledging source, with Spark's micro-batch as the
snapshot:

1. **Acknowledge only after the snapshot.** Messages are received with
   client-individual acknowledgement on the driver and acked once Spark committed the
   batch (commit log N written): in ``commit(end)``, or in the next ``latestOffset``,
   whose ``start`` Spark only hands over once that batch committed.
2. **Message IDs in the snapshot.** With ``exactly_once`` the offset of batch N, which
   Spark writes to its offset log *before* N runs, is ``{"seq": N, "ids": "...",
   "carry": [...]}``: the IDs of N's messages (by default the broker's ``message-id``;
   option ``messageIdHeader`` names an application header such as a payment id), packed
   into one short string (``ids.py``).

What a restart finds, and what happens:

- Driver died **before batch N committed**: Spark replays N from the offset log. None of
  N's messages were acked, so the broker redelivers them; ``partitions`` waits until all
  of N's recorded IDs are back and rebuilds N from exactly those (messages that arrive
  meanwhile wait for later batches). An ID that never comes back (expired, moved to a
  dead-letter address after too many deliveries, consumed by someone else) fails the
  query naming it, or with ``skipMissingMessages=true`` is skipped and logged.
- Driver died **after N committed, before or during the ack**: the next offset Spark
  gives us starts at N, so N's IDs are known to be committed; their redeliveries are
  acked and dropped, never read twice. Those IDs ride along in ``carry`` (with the time
  they were first carried) until ``dedupWindowMs`` (default 5 min) passes, so the
  recorded state stays bounded: IDs of at most the batches not yet acked.

3. **The broker may go away.** While it is down (a restart, a network cut) ``latestOffset``
   plans no new data and reconnects with backoff, for up to ``reconnectTimeoutMs``
   (default 2 min), then fails naming the broker. A reconnect forgets every ack id (they
   belong to the old connection) but not the IDs: messages of batches planned before it
   come again and are acknowledged when their batch commits; IDs that could not be
   acknowledged then (their copy has not arrived yet), and IDs acked in the last batches
   on the old connection, join the committed IDs whose redeliveries are dropped and
   acknowledged. Those acks were confirmed, and Artemis confirms an ack once it stored
   it; STOMP itself promises only that the frame was handled, so a broker that confirms
   earlier and then crashes is covered too.

``at_least_once`` records IDs too, so a replay reads the same messages (a sink that skips
a batch or partition that already landed then skips exactly what it wrote), but does
not carry committed IDs across a driver restart: a batch committed and not yet
acknowledged when the driver died is read again. ``none`` subscribes with auto-ack (a
crash loses what was in flight). Where receiving happens, and why, is in ``client.py``.

Needs PySpark 4.2 or later: the acknowledgement above needs ``start`` in ``latestOffset``,
which 4.0 and 4.1 do not pass; there a query is refused at start.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_ext import compat, failpoints, formats, worker_heap
from spark_ext.compat import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from spark_ext.connector import SourceConnector
from spark_ext.connectors.jms import wire
from spark_ext.connectors.jms.client import Message, StompReceiver
from spark_ext.connectors.jms.config import SOURCE_OPTIONS, JmsSourceConfig
from spark_ext.connectors.jms.gauges import QueueGauges
from spark_ext.connectors.jms.ids import pack_ids, unpack_ids
from spark_ext.errors import AuthenticationError, ConnectorError
from spark_ext.guarantees import Guarantee
from spark_ext.options import Options
from spark_ext.retry import Backoff
from spark_ext.shipping import Shipped

log = logging.getLogger(__name__)

SCHEMA = StructType([
    StructField("message_id", StringType()),
    StructField("body", BinaryType()),
    StructField("body_text", StringType()),
    StructField("headers", MapType(StringType(), StringType())),
    StructField("destination", StringType()),
    StructField("timestamp", TimestampType()),
    StructField("redelivered", BooleanType()),
])
_ARROW = pa.schema([
    ("message_id", pa.string()), ("body", pa.binary()), ("body_text", pa.string()),
    ("headers", pa.map_(pa.string(), pa.string())), ("destination", pa.string()),
    ("timestamp", pa.timestamp("us", tz="UTC")), ("redelivered", pa.bool_()),
])
_CHUNK = 10_000  # messages per Spark task
_RECENT = 16  # batches whose acks a lost connection may have swallowed
_BACKOFF = Backoff(initial_s=0.2, max_s=5.0)  # between reconnect attempts while the broker is away
# Trigger.AvailableNow ends at the first batch planned empty: before planning one, the
# broker gets this long without sending anything (it sends more once a batch is acked).
_AVAILABLE_NOW_QUIET_S = 0.5
# How long an ERROR frame may precede the close it announces (a broker's goodbye) before
# it is taken for an error of its own, which fails the query.
_GOODBYE_S = 2.0


@dataclass(frozen=True)
class MessagesPartition(InputPartition):
    """Messages travel to the executor inside the partition (they exist only on the
    driver), as the frames the broker sent: the executor decodes them (``to_arrow``), so
    the driver, whose one process also receives, does no per-message work for it."""

    seq: int
    ids: list[str]
    frames: list[bytes]


def to_arrow(ids: Sequence[str], frames: Sequence[bytes], destination: str) -> pa.RecordBatch:
    """The messages as one batch of ``_ARROW``. Executor: headers go in as flat key and
    value arrays and the text is one Arrow cast (a per-message decode only for bodies
    that are not UTF-8)."""
    keys: list[str] = []
    values: list[str] = []
    offsets = [0]
    bodies: list[bytes] = []
    dests: list[str] = []
    stamps: list[int | None] = []
    redelivered: list[bool] = []
    for frame in frames:
        headers, body = wire.parse_message(frame)
        bodies.append(body)
        dests.append(headers.get("destination", destination))
        ts = headers.get("timestamp")
        stamps.append(int(ts) * 1000 if ts and ts != "0" else None)
        redelivered.append(headers.get("redelivered", "false").lower() == "true")
        headers.pop("ack", None)  # meaningful only on the driver's connection
        headers.pop("subscription", None)
        keys.extend(headers)
        values.extend(headers.values())
        offsets.append(len(keys))
    body_array = pa.array(bodies, pa.binary())
    try:
        text = body_array.cast(pa.string())  # validates UTF-8
    except pa.ArrowInvalid:
        text = pa.array([b.decode("utf-8", "replace") for b in bodies], pa.string())
    return pa.RecordBatch.from_arrays([
        pa.array(ids, pa.string()),
        body_array,
        text,
        pa.MapArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(keys, pa.string()),
                                pa.array(values, pa.string())),
        pa.array(dests, pa.string()),
        pa.array(stamps, pa.timestamp("us", tz="UTC")),
        pa.array(redelivered, pa.bool_()),
    ], schema=_ARROW)


class JmsStreamReader(Shipped, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Planning on the driver (one long-lived object holding the connection); ``read`` on executors."""

    def __init__(self, cfg: JmsSourceConfig) -> None:
        self.cfg = cfg
        self._rx: StompReceiver | None = None
        self._batches: dict[int, list[Message]] = {}  # planned, not yet acked
        self._committed: dict[str, float] = {}  # committed ids whose redelivery must be dropped
        self._acked_seqs: set[int] = set()  # batches this process planned and acknowledged
        self._recent: deque[list[str]] = deque(maxlen=_RECENT)  # ids of the last acked batches
        self._generation = 0  # the receiver's connection these structures were built on
        self._settled = 0  # the connection whose backlog the first batch waited for
        self._down_since: float | None = None
        self._next_try = 0.0
        self._delays = _BACKOFF.delays()
        self._cutoff_ms: int | None = None  # Trigger.AvailableNow: messages stamped later wait
        self._gauges = QueueGauges(cfg)

    def __getstate__(self) -> dict[str, Any]:
        return {"cfg": self.cfg}

    def __setstate__(self, state: dict[str, Any]) -> None:
        JmsStreamReader.__init__(self, state["cfg"])

    @property
    def rx(self) -> StompReceiver:
        """The connected receiver; ``ConnectorError`` if the broker cannot be reached now."""
        if self._rx is None:
            self._rx = StompReceiver(self.cfg)
        if not self._rx.connected:
            self._rx.connect()
        if self._rx.generation != self._generation:
            self._reconnected()
        return self._rx

    def _reconnected(self) -> None:
        """A new connection: acks sent on the old one may not have reached the broker (or,
        on a broker that confirms a frame before storing it, been lost with it), and copies
        of every unacknowledged message will come again. Keep their IDs."""
        assert self._rx is not None
        if self._generation and self.cfg.tracks_ids:
            now = time.time()
            for ids in self._recent:
                for mid in ids:
                    self._committed.setdefault(mid, now)
            log.warning("reconnected to %s: %d message ID(s) of recently acknowledged batches are "
                        "dropped if redelivered", self.cfg.where, sum(len(i) for i in self._recent))
            # Received and in no batch yet: no replay looks for these, so watch for their return.
            inflight = {m.message_id for b in self._batches.values() for m in b}
            self._rx.await_ids([m for m in self._rx.lost if m not in inflight and m not in self._committed])
        self._recent.clear()
        self._generation = self._rx.generation

    def _available(self) -> StompReceiver | None:
        """Driver: the receiver, or ``None`` while the broker is away (reconnect attempts
        spaced by a backoff) until ``reconnectTimeoutMs`` has passed; then the error."""
        now = time.monotonic()
        if self._down_since is not None and now < self._next_try:
            return None
        try:
            rx = self.rx
        except AuthenticationError:
            raise  # a TLS handshake the settings doom: no waiting fixes it
        except ConnectorError as e:
            if self._down_since is None:
                self._down_since = now
                log.warning("the STOMP broker at %s is away (%s); planning no new data while reconnecting "
                            "(up to reconnectTimeoutMs=%d)", self.cfg.where, e,
                            self.cfg.reconnect_timeout_s * 1000)
            if now - self._down_since >= self.cfg.reconnect_timeout_s:
                raise ConnectorError(
                    f"the STOMP broker at {self.cfg.where} has been unreachable for "
                    f"{now - self._down_since:.0f} s ({e}); check the broker, or raise option "
                    "reconnectTimeoutMs"
                ) from None
            self._next_try = now + next(self._delays)
            return None
        if self._down_since is not None:
            log.warning("the STOMP broker at %s is back after %.1f s", self.cfg.where, now - self._down_since)
        self._down_since = None
        self._delays = _BACKOFF.delays()
        return rx

    def check_reachable(self) -> None:
        """Driver, at ``streamReader`` time: the broker accepts the login.

        This runs in a short-lived planning worker, not in the process that will own
        the subscription, so it must not subscribe: a consumer left there would hold
        messages unacknowledged until that worker exits.
        """
        StompReceiver(self.cfg).probe()

    def prepareForTriggerAvailableNow(self) -> None:
        """Driver, once, with ``Trigger.AvailableNow``: the run reads the messages the broker
        stamped (``timestamp``) up to now, in batches of ``maxMessagesPerTrigger``, and
        Spark asks for one more batch after the last: that plan acknowledges the last
        batch before the run ends. Without this, Spark's wrapper plans a single batch and
        never asks again, so nothing of a run's last batch would ever be acknowledged."""
        self._cutoff_ms = int(time.time() * 1000)

    def initialOffset(self) -> dict:
        return {formats.KEY: formats.QUEUE_OFFSET.current, "seq": 0, "ids": [], "carry": []}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.cfg.max_per_trigger)

    def _absorb(self, rx: StompReceiver, start: dict) -> None:
        """IDs in ``start`` belong to committed batches: drop and ack their redeliveries."""
        if not self.cfg.tracks_ids:
            return
        now = time.time()
        if int(start["seq"]) not in self._acked_seqs:
            # Committed by an earlier run of this query, maybe never acknowledged: its
            # redeliveries must be dropped, for as long as the dedup window.
            for mid in unpack_ids(start.get("ids", [])):
                self._committed.setdefault(mid, now)
        for mid, since in start.get("carry", []):
            self._committed.setdefault(mid, since)
        self._drop_committed(rx)
        horizon = now - self.cfg.dedup_window_s
        self._committed = {m: t for m, t in self._committed.items() if t >= horizon}

    def _drop_committed(self, rx: StompReceiver) -> None:
        dupes = rx.drop(set(self._committed))
        if dupes:
            log.warning("dropped %d redelivered message(s) of committed batches: %s", len(dupes), dupes[:5])
            rx.ack(dupes)  # kept in _committed: this ack may be lost as well

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """Driver, before each batch: ``_plan``, then the figures for a metrics exporter."""
        _check_format(start)
        end = self._plan(start, limit)
        held = self._rx.held if self._rx is not None else 0
        self._gauges.planned(held + sum(len(b) for b in self._batches.values()))
        return end

    def _plan(self, start: dict, limit: ReadLimit) -> dict:
        """Hand the next received messages to batch seq+1.

        Spark asks for the next batch only after the previous one committed (commit log
        written), so ``start`` is committed: its messages are acknowledged here. Spark's
        own ``commit(end)`` comes only once a *later* batch has data, which would leave
        the last batch unacknowledged while the queue is idle.
        """
        rx = self._available()
        if rx is None:
            return start  # the broker is away: no new data until it is back
        self._ack_through(rx, int(start["seq"]))
        self._absorb(rx, start)
        n = limit.max_rows if isinstance(limit, ReadMaxRows) else self.cfg.max_per_trigger
        # Trigger.Once plans one batch for the whole run: it takes what the broker sends until
        # the broker has been quiet as long as AvailableNow's last plan waits. The short quiet
        # cut a Once batch to 35 of the 120 messages waiting, in CI under load.
        wait: dict[str, float] = {}
        if isinstance(limit, ReadAllAvailable):
            n = 1 << 30
            wait = {"quiet_s": _AVAILABLE_NOW_QUIET_S, "max_s": 10 * _AVAILABLE_NOW_QUIET_S}
        self._report_gone(rx)
        if self._settled != rx.generation:  # the first plan on a new subscription
            rx.settle(n, **wait)
            self._settled = rx.generation
            # Redeliveries of committed messages that came while settling: acknowledged now,
            # not only dropped, or a run that plans once (Trigger.Once) would never ack them.
            self._drop_committed(rx)
        inflight = {m.message_id for b in self._batches.values() for m in b}
        try:
            if not self._batches and rx.fit_window(n):
                rx.settle(n, **wait)
            msgs = rx.take(n, exclude=inflight | set(self._committed), stamped_by=self._cutoff_ms)
            if not msgs and (self._cutoff_ms is not None or isinstance(limit, ReadAllAvailable)):
                # An empty plan ends the run (AvailableNow's last plan, Trigger.Once's only one):
                # give the broker time to send what the acks freed, or what a new subscription
                # was slow to push (seen in CI under load: a Once run planned nothing).
                rx.settle(n, quiet_s=_AVAILABLE_NOW_QUIET_S, max_s=10 * _AVAILABLE_NOW_QUIET_S)
                msgs = rx.take(n, exclude=inflight | set(self._committed), stamped_by=self._cutoff_ms)
        except ConnectorError:
            if not rx.closes(_GOODBYE_S):
                raise
            return start  # the broker's goodbye (an ERROR frame, then the close): reconnect next time
        if not msgs:
            return start
        seq = int(start["seq"]) + 1
        self._batches[seq] = msgs
        if not self.cfg.tracks_ids:
            return {formats.KEY: formats.QUEUE_OFFSET.current, "seq": seq, "n": len(msgs)}
        carry = sorted([m, t] for m, t in self._committed.items()) if self.cfg.carries_committed else []
        return {formats.KEY: formats.QUEUE_OFFSET.current, "seq": seq,
                "ids": pack_ids([m.message_id for m in msgs]), "carry": carry}

    def _report_gone(self, rx: StompReceiver) -> None:
        """Messages received before a lost connection that have not come back within
        ``replayTimeoutMs``: fail naming them, or (``skipMissingMessages=true``) log each."""
        gone = rx.overdue(self.cfg.replay_timeout_s)
        if gone:
            wait = self.cfg.replay_timeout_s
            self._missing(gone, f"{len(gone)} message(s) this query had received from {self.cfg.where}, "
                          f"in no batch yet, did not come back within {wait:.0f} s of the connection being "
                          f"lost, e.g. {', '.join(gone[:5])} (moved to a dead-letter address after too many "
                          "deliveries, expired, or consumed by another consumer)",
                          "look for them on the broker's dead-letter address")

    def _missing(self, ids: list[str], text: str, hint: str) -> None:
        """Messages that did not come back: an error naming them, or with
        ``skipMissingMessages=true`` each one logged as an error."""
        if not self.cfg.skip_missing:
            raise ConnectorError(f"{text}. Set option skipMissingMessages=true to go on without them (they "
                                 f"are logged), or {hint}")
        log.error("%s; skipped (skipMissingMessages=true): %s", text, ids)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        """Driver: batch ``end.seq``'s messages; after a restart, the recorded ones again."""
        _check_format(start)
        _check_format(end)
        seq = int(end["seq"])
        if seq == int(start["seq"]):
            return []
        msgs = self._batches.get(seq)
        if msgs is None:
            msgs = self._replay(start, end)
            self._batches[seq] = msgs
        parts = (msgs[i:i + _CHUNK] for i in range(0, len(msgs), _CHUNK))
        return [MessagesPartition(seq, [m.message_id for m in p], [m.frame for m in p])
                for p in parts]

    def _replay(self, start: dict, end: dict) -> list[Message]:
        seq = int(end["seq"])
        if not self.cfg.tracks_ids:
            # none: no IDs recorded (and nothing acknowledged): whatever the broker has first.
            return self.rx.take(int(end.get("n", 0)) or self.cfg.max_per_trigger, exclude=set())
        recorded = unpack_ids(end["ids"])
        have, missing = self._redelivered(start, recorded)
        if missing:
            wait = self.cfg.replay_timeout_s
            self._missing(missing, f"replaying batch {seq} needs {len(missing)} recorded message(s) the "
                          f"broker at {self.cfg.where} did not redeliver within {wait:.0f} s, e.g. "
                          f"{', '.join(missing[:5])} (expired, moved to a dead-letter address, or consumed "
                          "by another consumer)", "raise replayTimeoutMs")
        log.info("replaying batch %s with %d redelivered message(s)", seq, len(have))
        return [have[i] for i in recorded if i in have]

    def _redelivered(self, start: dict, ids: list[str]) -> tuple[dict[str, Message], list[str]]:
        """Wait up to ``replayTimeoutMs`` for the recorded messages, riding through broker
        outages (for up to ``reconnectTimeoutMs``) on the way."""
        deadline = time.monotonic() + self.cfg.replay_timeout_s
        have: dict[str, Message] = {}
        missing = ids
        absorbed = fitted = False
        while True:
            rx = self._available()
            if rx is not None:
                if not absorbed:
                    self._absorb(rx, start)
                    absorbed = True
                if not fitted:
                    # Nothing is handed out yet: the window may grow to hold the whole batch,
                    # sized from the first redeliveries. They may come late (a dead driver's
                    # connection holds them until the broker notices it is gone), and a window
                    # left at its first size would let only its worth of the batch through.
                    try:
                        if rx.await_arrival(min(1.0, max(deadline - time.monotonic(), 0.0))):
                            fitted = True
                            rx.settle(len(ids))
                            if rx.fit_window(len(ids)):
                                rx.settle(len(ids))
                    except ConnectorError:
                        if not rx.closes(_GOODBYE_S):
                            raise  # else the broker went away: reconnect on the next round
                if fitted:
                    got, missing = rx.wait_for(missing, min(1.0, max(deadline - time.monotonic(), 0.0)))
                    have.update(got)
            if not missing or time.monotonic() >= deadline:
                return have, missing
            if rx is None:
                time.sleep(0.2)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Executor: the partition's messages as one Arrow batch."""
        assert isinstance(partition, MessagesPartition)
        worker_heap.settle()
        yield to_arrow(partition.ids, partition.frames, self.cfg.destination)

    def commit(self, end: dict) -> None:
        """Driver, after Spark committed the batch ending at ``end``: acknowledge it now
        (or, while the broker is away, once it is back)."""
        rx = self._available()
        if rx is not None:
            self._ack_through(rx, int(end["seq"]))

    def _ack_through(self, rx: StompReceiver, seq: int) -> None:
        """Acknowledge every planned batch up to ``seq``: Spark has committed them."""
        done = sorted(s for s in self._batches if s <= seq)
        if not done:
            return
        ids = [m.message_id for s in done for m in self._batches[s]]
        if self.cfg.guarantee is not Guarantee.NONE:  # none: the subscription auto-acks
            failpoints.hit("jms.before_ack", seq, len(ids))  # @N: the source's batch seq N
            unacked = rx.ack(ids, batch=seq)
            # A copy redelivered while the batch was in flight (reconnect) must not be read again,
            # nor one still to come for an id this connection could not acknowledge. Copies that
            # landed while the ACK frames went out are acknowledged as well: only forgotten, they
            # would stay delivered-but-unacknowledged on the broker until the connection closes.
            late = rx.drop(set(ids))
            rx.ack(late)
            now = time.time()
            for mid in unacked:  # kept even if acknowledged late: that ack may be lost as well
                self._committed.setdefault(mid, now)
            if pending := len(set(unacked) - set(late)):
                log.warning("%d message(s) of committed batches could not be acknowledged on this "
                            "connection; their redeliveries will be dropped and acknowledged", pending)
            self._recent.append(ids)
        for s in done:
            del self._batches[s]
        self._acked_seqs = {s for s in self._acked_seqs if s > seq - 16} | set(done)

    def stop(self) -> None:
        self._gauges.close()
        if self._rx is not None:
            self._rx.close()
            self._rx = None


class JmsSource(SourceConnector):
    """``spark.readStream.format("hzsource").option("connector", "jms")``."""

    name = "jms"
    option_spec = SOURCE_OPTIONS

    def check(self, options: Options) -> None:
        JmsSourceConfig.parse(options)

    def schema(self, options: Options) -> StructType:
        return SCHEMA

    def stream_reader(self, options: Options, schema: StructType) -> DataSourceStreamReader:
        cfg = JmsSourceConfig.parse(options)
        # Acknowledging needs the committed start offset in latestOffset: 4.0 and 4.1 pass none.
        compat.require_admission_control("the queue source (connector jms)")
        reader = JmsStreamReader(cfg)
        reader.check_reachable()
        return reader


def _check_format(offset: dict) -> None:
    """Refuse an offset of the checkpoint written by a newer release (``spark_ext.formats``)."""
    formats.QUEUE_OFFSET.of(offset, "the query's checkpoint (an offset of the queue source)")
