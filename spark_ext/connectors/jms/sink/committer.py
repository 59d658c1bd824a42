"""Driver side of the queue sink: decide a batch, move its winners into the destination.

STOMP transactions belong to one connection, so a task cannot prepare one for the driver
to commit. Instead a task commits its messages into the sink's *staging queue*
(``spark_ext.<sink id>.staging``), tagged with its attempt's token, and the driver, once
the batch is decided, asks the broker to move the winners' messages into the destination
(``QueueControl.moveMessages`` over STOMP management). A message leaves staging and
enters the destination in one broker transaction (one a call for the messages the queue
holds in memory, one per 500 for paged ones), so it is in one or the other, never both: a
move broken off by a crash is finished by moving what is left.

The sink's record lives in its *log queue* (``spark_ext.<sink id>.log``): messages nobody
consumes, each holding the whole state (sequence number, fencing epoch, last decision,
finished or not); the one with the highest sequence number is the state. A new entry is
appended with compare-and-set, under the sink's *lock*: a subscription to the queue
``spark_ext.<sink id>.lock``, which takes one consumer. The broker checks that limit
atomically, and a holder that dies or hangs loses the lock with its connection, its open
transaction rolled back. Under the lock a writer reads the state and appends the entry
after it, carrying the duplicate id ``<log>.<seq>`` in a STOMP transaction; Artemis rolls
back a transaction holding an id it has seen, so an append based on an old state (a
holder whose COMMIT the broker applies late) fails and is read again. The duplicate id
alone is no compare-and-set: sent from two connections at the same moment, both landed
(measured on Artemis 2.40), which the lock rules out.

The primitives ``spark_ext.commit.TwoPhaseCommitter`` calls, in its order:

- ``take_over`` (1): append a new epoch (fencing every older run: their decisions would need
  the old epoch at the tail), finish a decided batch left unfinished, remove everything
  else in staging (attempts of batches never decided);
- ``check`` (4a): the epoch is still ours, and every winner's messages are all in staging;
- ``record`` (4b): append the decision, under our epoch;
- ``commit_winners`` (4c): move the winners' messages, many winners a call; ``finish``:
  append "finished";
- ``roll_back_others`` (4d) / ``roll_back`` (5): remove the batch's other staged messages.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any, TypeVar

from spark_ext.commit import Batch, Claim, DecidedBatch, Predecessor, TwoPhaseCommitter, read_other
from spark_ext.connectors.jms.session import BrokerSession, ConnectorError, QueueMissingError, SessionError
from spark_ext.connectors.jms.sink.config import QUEUE_PREFIX, JmsSinkConfig
from spark_ext.connectors.jms.sink.entries import SEQ_HEADER, JmsDecision, SinkState, Winner, read_entry
from spark_ext.connectors.jms.sink.records import BATCH_HEADER, TXN_HEADER
from spark_ext.connectors.jms.sink.writer import JmsCommittable, open_session
from spark_ext.errors import (
    CommitError,
    FatalCommitError,
    FencedError,
    NewerFormatError,
    RetriableCommitError,
)
from spark_ext.retry import Backoff, Deadline, retry

log = logging.getLogger(__name__)

_CAS_TRIES = 20
_LOCK_ID = "spark-ext-lock"
_UNLIMITED_BROWSE = json.dumps({"managementBrowsePageSize": 2**31 - 1})
_ARRIVAL_S = 10.0  # how long the check waits for staged messages to show in the queue
_MOVE_GROUP = 200  # winners per move at most: the filter names each one (about 60 characters a token)
_MOVE_ROWS = 20_000  # messages per move call at most: the broker holds a call's messages in its heap
_MOVE_FLUSH = 500  # paged messages per broker transaction within a move (the broker's own default)
T = TypeVar("T")


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def token_filter(tokens: Sequence[str]) -> str:
    return f"{TXN_HEADER} IN ({', '.join(_quote(t) for t in tokens)})"


def move_groups(winners: Sequence[Winner]) -> list[list[Winner]]:
    """``winners`` in moves of at most ``_MOVE_GROUP`` winners (one filter names them), in
    order; each move goes in calls of at most ``_MOVE_ROWS`` messages."""
    return [list(winners[i:i + _MOVE_GROUP]) for i in range(0, len(winners), _MOVE_GROUP)]


def batch_filter(batch_id: int) -> str:
    return f"{BATCH_HEADER} = {_quote(str(batch_id))}"


class JmsCommitter(TwoPhaseCommitter[JmsCommittable, JmsDecision]):
    """Decides, moves and removes staged messages. Driver only."""

    name = "jms"

    def __init__(self, cfg: JmsSinkConfig) -> None:
        self.cfg = cfg
        self._session: BrokerSession | None = None
        self._browse_lifted = False  # on this session's broker (a restart may drop the setting)

    @property
    def identity(self) -> str:
        return self.cfg.sink_id

    # --- the connection and the log ------------------------------------------------------------

    @property
    def session(self) -> BrokerSession:
        if self._session is None or not self._session.usable:
            if self._session is not None:
                self._session.close()
            self._session = open_session(self.cfg)
            self._browse_lifted = False
        return self._session

    @contextmanager
    def connected(self) -> Iterator[None]:
        try:
            yield
        except SessionError as e:  # the broker went away mid-step: the step is retried
            raise RetriableCommitError(str(e)) from None
        finally:
            self.close()

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    def _queue(self, name: str, operation: str, *args: Any) -> Any:
        return self.session.call(f"queue.{name}", operation, *args)

    def ensure_queues(self) -> None:
        """The destination's queue and the sink's own three, durable and anycast (a STOMP
        send to /queue/<name> would auto-create the same); existing ones are left as they are."""
        for name in (self.cfg.queue, self.cfg.staging, self.cfg.log, self.cfg.lock):
            conf: dict[str, Any] = {"name": name, "address": name, "routing-type": "ANYCAST", "durable": True}
            if name == self.cfg.lock:
                conf["max-consumers"] = 1
            self.session.call("broker", "createQueue", json.dumps(conf), True)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the sink's lock (subscribed to its lock queue) on this session. A refused
        subscription ends the connection (STOMP), so each try is a new one; another holder
        is waited for up to reconnectTimeoutMs (a hung one loses the lock when the broker
        drops its connection, after the heartbeats it misses)."""
        deadline = Deadline(max(self.cfg.reconnect_timeout_s, self.cfg.timeout_s))
        delays = Backoff(initial_s=0.02, max_s=1.0).delays()
        while True:
            try:
                self.session.receipt("SUBSCRIBE", {"destination": f"/queue/{self.cfg.lock}", "id": _LOCK_ID,
                                                   "ack": "client-individual"}, f"locking {self.cfg.log}")
                break
            except SessionError as e:
                self.close()
                if deadline.expired:
                    cfg = self.cfg
                    raise RetriableCommitError(
                        f"the lock of sink {cfg.sink_id!r}'s log ({cfg.lock}) stayed taken: another run of "
                        f"this sink holds it, or the broker refuses the subscription ({e}). The sink's user "
                        "needs consume on spark_ext.#") from None
                time.sleep(next(delays))
        session = self._session
        try:
            yield
        finally:
            if session is self._session and session is not None and session.usable:
                try:
                    session.receipt("UNSUBSCRIBE", {"id": _LOCK_ID}, f"unlocking {self.cfg.log}")
                except SessionError:
                    self.close()  # the lock goes with the connection

    def staged(self, where: str = "") -> dict[str, int]:
        """Staged messages per attempt token (of those matching ``where``), in one pass.

        The broker's filtered counts look at only the first ``management-browse-page-size``
        messages of a queue (default 200), so the sink lifts that limit for its staging
        address first (once per connection: a broker restart, which ends the connection,
        may have dropped it)."""
        session = self.session  # first: a new connection resets the flag
        if not self._browse_lifted:
            session.call("broker", "addAddressSettings", self.cfg.staging, _UNLIMITED_BROWSE)
            self._browse_lifted = True
        counted = self._queue(self.cfg.staging, "countMessages", where or f"{TXN_HEADER} IS NOT NULL",
                              TXN_HEADER)
        return {k: int(v) for k, v in json.loads(counted).items()}

    def state(self, log_queue: str | None = None) -> SinkState | None:
        """The newest entry of this sink's log, or of ``log_queue`` (None: the sink never ran)."""
        queue = log_queue or self.cfg.log
        entries: list[SinkState] = []
        newer: list[tuple[int, NewerFormatError]] = []
        for m in json.loads(self._queue(queue, "listMessagesAsJSON", "")):
            try:
                entry = read_entry(m, queue)
            except NewerFormatError as e:
                newer.append((int(m.get(SEQ_HEADER, -1)), e))
                continue
            if entry is not None:
                entries.append(entry)
        if newer:  # the newest entry is a newer release's, whose query its error names
            raise max(newer, key=lambda n: n[0])[1]
        return max(entries, key=lambda e: e.seq, default=None)

    def _append(self, prev: SinkState | None, epoch: int, decision: JmsDecision | None,
                done: bool) -> SinkState | None:
        """Append the entry after ``prev``; None when another writer appended first."""
        new = SinkState(prev.seq + 1 if prev else 0, epoch, decision, done, uuid.uuid4().hex)
        s, tx = self.session, "log-" + new.nonce
        frame = (f"SEND\ndestination:/queue/{self.cfg.log}\ntransaction:{tx}\npersistent:true\n"
                 f"_AMQ_DUPL_ID:{self.cfg.log}.{new.seq}\n{new.headers()}\n\n\x00")
        try:
            s.begin(tx)
            s.send(frame.encode())
            s.commit(tx)
            return new
        except SessionError as e:
            refused = s.failed is not None
            now = self.state()  # on a new connection
            if now is not None and now.nonce == new.nonce:
                return new  # committed; only its receipt was lost
            if now is not None and now.seq >= new.seq:
                return None  # lost the race
            if refused:
                raise RetriableCommitError(f"appending to {self.cfg.log} failed: {e}") from None
            raise

    def _until_appended(self, step: Callable[[SinkState | None], T | None], what: str) -> T:
        """Under the lock, run ``step`` on the newest state until it returns a value (None:
        lost a race, read again)."""
        for _ in range(_CAS_TRIES):
            with self._locked():
                out = step(self.state())
            if out is not None:
                return out
        raise RetriableCommitError(f"{what}: the log {self.cfg.log} kept changing under this run "
                                   f"({_CAS_TRIES} tries); is another query writing with the same sinkId?")

    def _remove(self, where: str) -> int:
        return int(self._queue(self.cfg.staging, "removeMessages", where))

    # --- step 1 ------------------------------------------------------------------------------------

    def take_over(self, adopt: Batch[JmsCommittable] | None = None) -> Claim[int]:
        """Fence older runs (a new epoch), finish a decided batch, remove what is left staged.
        Every step is idempotent, so a broker lost on the way is waited for and it starts again.
        A batch to ``adopt`` is appended as decided under the new epoch, unless it is already."""
        try:
            return retry(lambda: self._take_over(adopt), what="taking over the queue sink",
                         retry_on=SessionError,
                         timeout_s=max(self.cfg.reconnect_timeout_s, 0.001), on_retry=lambda e: self.close(),
                         backoff=Backoff(initial_s=0.5, max_s=2.0))
        except SessionError as e:
            raise ConnectorError(f"taking over the queue sink at {self.cfg.where} failed: {e}") from None
        finally:
            self.close()

    def _take_over(self, adopt: Batch[JmsCommittable] | None) -> Claim[int]:
        self.ensure_queues()
        ours = self._until_appended(self._new_epoch, "taking the sink over")
        mine = ours.decision
        if adopt is not None and not (mine is not None
                                      and (mine.batch_id, mine.query_id) == (adopt.batch_id, adopt.query_id)):
            # Appended right after the entry this take-over appended, not after a state read
            # back: a listing made a moment after a commit's receipt may not show it yet, and
            # one without the adopted decision would have its winners removed below (seen).
            with self._locked():
                adopted = self._append(ours, ours.epoch, _decision_of(adopt), False)
            if adopted is None:
                raise FencedError(f"another run took sink {self.cfg.sink_id!r} over while this one did")
            ours = adopted
        committed = 0
        if ours.decision is not None and not ours.done:
            log.warning("finishing batch %s, decided before a crash", ours.decision.batch_id)
            self.commit_winners(ours.decision, ours.decision.winners)
            committed = len(ours.decision.winners)
            self._mark_done(ours.epoch, ours.decision)
        rolled_back = self._remove("")
        self._prune()
        d = ours.decision
        last = DecidedBatch(d.batch_id, d.query_id) if d is not None else None
        return Claim(ours.epoch, last, committed=committed, rolled_back=rolled_back)

    def _new_epoch(self, now: SinkState | None) -> SinkState | None:
        ours = self._append(now, (now.epoch if now else 0) + 1, now.decision if now else None,
                            now.done if now else True)
        if ours is None and now is None and self.state() is None:
            # the first entry's duplicate id is known to the broker, yet the log is empty
            raise FatalCommitError(
                f"the sink's log queue {self.cfg.log} is empty although the sink ran before: it was purged "
                "by hand, so nothing tells which batch was last decided. Start the query with a new "
                "checkpoint location or sinkId")
        return ours

    def _prune(self, keep: int = 3) -> None:
        """Drop log entries older than the newest ``keep`` (the newest alone is the state)."""
        listed = json.loads(self._queue(self.cfg.log, "listMessagesAsJSON", ""))
        seqs = sorted(int(m[SEQ_HEADER]) for m in listed if SEQ_HEADER in m)
        old = seqs[:-keep]
        if old:
            listed_old = ", ".join(_quote(str(s)) for s in old)
            self._queue(self.cfg.log, "removeMessages", f"{SEQ_HEADER} IN ({listed_old})")

    # --- the primitives of steps 4 and 5 ----------------------------------------------------------

    def recorded(self, batch: Batch[JmsCommittable]) -> JmsDecision | None:
        now = self.state()
        d = now.decision if now else None
        return d if d is not None and (d.batch_id, d.query_id) == (batch.batch_id, batch.query_id) else None

    def check(self, batch: Batch[JmsCommittable]) -> None:
        fence = _fence(batch)
        now = self.state()
        if now is None or now.epoch != fence:
            raise FencedError(f"batch {batch.batch_id}: another run of sink {self.cfg.sink_id!r} took over "
                              "after this batch began; this run stops without committing (zombie fencing)")
        want = {str(c.token): c.rows for c in batch.prepared}
        deadline = Deadline(_ARRIVAL_S)
        while True:
            counts = self.staged(batch_filter(batch.batch_id))
            short = {t: (n, counts.get(t, 0)) for t, n in want.items() if counts.get(t, 0) != n}
            if not short or deadline.expired:
                break
            time.sleep(0.2)  # committed messages reach the queue's memory a moment after the receipt
        if short:
            self._remove(token_filter(list(want)))
            token, (rows, found) = next(iter(short.items()))
            raise FatalCommitError(
                f"batch {batch.batch_id}: attempt {token} staged {rows} messages but {found} are in "
                f"{self.cfg.staging}; something removed or consumed them. Nothing of the batch was "
                "committed; restart the query to write it again, and keep consumers off the staging queue")

    def predecessors(self, batch: Batch[JmsCommittable]) -> list[Predecessor]:
        """Every sink keeps its state in a log queue of its own: the logs whose last decision
        names this query. Searched once per run: after this sink's first decision for the
        query, its own log names the query (not its claim: a routing sink's names the
        routing sink's decisions)."""
        query = str(batch.query_id or "")
        if not query:
            return []
        now = self.state()
        if now is not None and now.decision is not None and now.decision.query_id == query:
            return []
        names = self.session.attribute("broker", "queueNames") or []
        logs = sorted(n for n in names
                      if n.startswith(QUEUE_PREFIX) and n.endswith(".log") and n != self.cfg.log)
        found = []
        for name in logs:
            # A log deleted since the listing (an operator cleaning up) left nothing to carry on.
            old = read_other(partial(self.state, name), query,
                             (ValueError, KeyError, TypeError, QueueMissingError))
            if old is None or old.decision is None or old.decision.query_id != query:
                continue
            found.append(Predecessor(name[len(QUEUE_PREFIX):-len(".log")], old.decision.batch_id, old.done))
        return found

    def roll_back_own(self, batch: Batch[JmsCommittable]) -> None:
        self._roll_back(batch, keep=[])

    def record(self, batch: Batch[JmsCommittable]) -> JmsDecision:
        fence = _fence(batch)
        decision = _decision_of(batch)

        def step(now: SinkState | None) -> JmsDecision | None:
            if now is not None and now.decision is not None and \
                    (now.decision.batch_id, now.decision.query_id) == (decision.batch_id, decision.query_id):
                return now.decision  # recorded already (a race, or a receipt lost on the way)
            if now is None or now.epoch != fence:
                raise FencedError(f"batch {batch.batch_id}: another run of sink {self.cfg.sink_id!r} took "
                                  "over; this run decides nothing (zombie fencing)")
            return decision if self._append(now, fence, decision, False) is not None else None

        return self._until_appended(step, f"recording batch {batch.batch_id}")

    def run_of(self, decision: JmsDecision) -> str:
        return decision.run_id

    def rows_of(self, decision: JmsDecision) -> int | None:
        return sum(w.rows for w in decision.winners)

    def finished(self, decision: JmsDecision) -> bool:
        now = self.state()
        return now is not None and now.decision == decision and now.done

    def winners(self, decision: JmsDecision) -> Sequence[Winner]:
        return decision.winners

    def commit_winner(self, decision: JmsDecision, winner: Winner) -> bool:
        self._move([winner])
        return True

    def commit_winners(self, decision: JmsDecision, winners: Sequence[Winner]) -> list[Any]:
        for group in move_groups(winners):
            self._move(group)
        return []

    def _move(self, winners: Sequence[Winner]) -> int:
        """Move every staged message of ``winners`` into the destination: one filter for them
        all (each call walks the staging queue, so one a winner made a batch's commit grow
        with the square of its tasks), at most ``_MOVE_ROWS`` messages a call (Artemis 2.37
        or later keeps to that count). The broker holds a call's moved messages in its heap
        until the call returns: one call for a winner of 100,000 messages (200,000 rows in 2
        tasks) exhausted a 1 GiB broker, which moved the 200,000 in calls of 20,000 in 4-6 s.
        Messages move in queue order, so each task's keep their order. The broker moves what
        its queue holds in memory at the call, so a short call is followed by a count, and
        the move repeats until none is left; ``commitTimeoutMs`` ends one that stops moving."""
        where = token_filter([w.token for w in winners])
        expected = sum(w.rows for w in winners)
        moved = 0
        deadline = Deadline(self.cfg.commit_timeout_s)
        while True:
            n = int(self.session.call(f"queue.{self.cfg.staging}", "moveMessages", _MOVE_FLUSH, where,
                                      self.cfg.queue, False, _MOVE_ROWS, timeout_s=self.cfg.commit_timeout_s))
            moved += n
            if n:
                deadline.reset()
            if n >= _MOVE_ROWS and moved < expected:
                continue  # more to move (a move resumed after a crash counts only what it moved)
            left = self.staged(where)
            if not any(left.values()):
                return moved
            if deadline.expired:
                raise RetriableCommitError(f"moving {', '.join(sorted(left))} into {self.cfg.queue}: "
                                           f"no message moved for {self.cfg.commit_timeout_s:.0f} s")
            if not n:
                time.sleep(0.05)  # committed messages reach the queue's memory a moment after the receipt

    def lost(self, decision: JmsDecision, lost: Sequence[Any]) -> CommitError:
        return FatalCommitError(f"batch {decision.batch_id}: {len(lost)} attempts could not be moved")

    def finish(self, batch: Batch[JmsCommittable], decision: JmsDecision) -> None:
        self._mark_done(_fence(batch), decision)

    def _mark_done(self, epoch: int, decision: JmsDecision) -> None:
        def step(now: SinkState | None) -> bool | None:
            if now is None or now.decision != decision or now.done or now.epoch != epoch:
                return True  # finished already, or a newer run owns the sink and finishes it
            return True if self._append(now, epoch, decision, True) is not None else None

        self._until_appended(step, f"finishing batch {decision.batch_id}")

    def roll_back_others(self, batch: Batch[JmsCommittable], decision: JmsDecision) -> None:
        self._roll_back(batch, keep=[w.token for w in decision.winners])

    def roll_back(self, batch: Batch[JmsCommittable]) -> None:
        """Step 5, after a failed commit: its decision may be on the way (sent, not yet
        applied by a broker whose journal stalls), so the batch's sequence number in the log
        is taken first. After that the decision can never land, and removing what it would
        name is safe; if it landed meanwhile, the next take-over finishes the batch."""
        if not self._sealed(batch):
            log.warning("batch %s was decided while it was being rolled back; the next take-over "
                        "finishes its commit", batch.batch_id)
            return
        self._roll_back(batch, keep=[])

    def _sealed(self, batch: Batch[JmsCommittable]) -> bool:
        """Append a copy of the state, unless the batch is decided (False); while this run
        owns the sink only (else a newer run's entries already stand after ours)."""
        def step(now: SinkState | None) -> bool | None:
            if now is None or batch.claim is None or now.epoch != batch.claim.fence:
                return True
            d = now.decision
            if d is not None and (d.batch_id, d.query_id) == (batch.batch_id, str(batch.query_id)):
                return False
            return True if self._append(now, now.epoch, now.decision, now.done) is not None else None

        return self._until_appended(step, f"rolling back batch {batch.batch_id}")

    def _roll_back(self, batch: Batch[JmsCommittable], keep: list[str]) -> None:
        """Remove the batch's staged messages but ``keep``'s: all of the batch's while this run
        owns the sink (attempts whose message never came included), else only the reported ones."""
        now = self.state()
        owns = batch.claim is not None and now is not None and now.epoch == batch.claim.fence
        if owns:
            where = batch_filter(batch.batch_id)
            if keep:
                where += f" AND NOT ({token_filter(keep)})"
        else:
            tokens = [c.token for c in batch.committables if c.token and c.token not in keep]
            if not tokens:
                return
            where = token_filter(tokens)
        self._remove(where)


def _decision_of(batch: Batch[JmsCommittable]) -> JmsDecision:
    return JmsDecision(batch.batch_id, str(batch.query_id),
                       tuple(Winner(str(c.token), c.rows) for c in batch.prepared), batch.run_id)


def _fence(batch: Batch[JmsCommittable]) -> int:
    if batch.claim is None:
        raise FatalCommitError(f"batch {batch.batch_id}: its tasks reported no claim; exactly_once plans "
                               "take the sink over before the tasks run, so this is a bug")
    return int(batch.claim.fence)
