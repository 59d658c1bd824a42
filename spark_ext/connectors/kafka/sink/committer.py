"""Driver side of the Kafka sink: commit what the tasks prepared, and recover after crashes.

Where "batch N is committed" lives: Kafka has no transaction spanning several
transactional ids, so the decision is recorded before any task's transaction is
committed, in Kafka itself, as consumer-group offsets written *transactionally* by the
sink's own commit id ``<prefix>-commit``:

- group ``<prefix>.batches``, partition 0 of ``commitTopic``: offset N+1, metadata
  naming the query, the checkpoint and the winners (partition, attempt, producer id,
  epoch) — "batch N decided, commit these";
- group ``<prefix>.batches.done``: offset N+1 once every winner is committed;
- group ``<prefix>.batches.kept``: a copy of the last decision and whether it is done,
  committed outside the transaction with an explicit retention (OffsetCommit v4) so the
  broker never expires it. The broker deletes the two groups above after
  ``offsets.retention.minutes`` (7 days) without a commit; a query down that long, or
  one whose batches carried no rows, then still knows what it decided. It is written
  after the decision and before any winner is committed, so no committed record is ever
  without a decision that outlives the broker's retention.

The primitives ``spark_ext.commit.TwoPhaseCommitter`` calls, in its order:

- ``check`` (4a): every winner (the attempt whose message reached the driver) must still be open
  with its epoch; one aborted by ``transaction.timeout.ms`` or fenced means the batch is
  rolled back and the query fails loudly (nothing decided, so a restart rewrites it);
- ``record`` (4b): the decision is written; the commit id's epoch is the claim's fence from this
  batch's plan, so a zombie driver whose plan is older is fenced here and decides nothing;
- ``commit_winner`` (4c): ``EndTxn(commit)``; ``finish``: the done record;
- ``roll_back_others`` (4d): every other open transaction of the sink (failed or speculative attempts) is
  aborted, so read_committed consumers are never blocked;
- ``take_over`` (1, in the next batch's plan, the first after a restart included): a
  decision without its done record is finished (its winners committed), then every open
  transaction of the sink is aborted. Spark replays a batch whose commit log entry is
  missing; if that batch was decided, the claim's ``last_decided`` names it and its
  tasks write nothing, so nothing appears twice.
"""

from __future__ import annotations

import logging
import re
import time
import zlib
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from functools import partial

from spark_ext import failpoints
from spark_ext.commit import Batch, Claim, DecidedBatch, Predecessor, TwoPhaseCommitter, read_other
from spark_ext.connectors.kafka.client.transactions import KafkaTxnClient, Producer, kept_client
from spark_ext.connectors.kafka.sink.committable import KafkaCommittable
from spark_ext.connectors.kafka.sink.config import KafkaSinkConfig
from spark_ext.connectors.kafka.sink.decision import Decision, TornDecisionError, join
from spark_ext.errors import (
    CommitError,
    ConfigurationError,
    FatalCommitError,
    FencedError,
    SparkExtError,
)

log = logging.getLogger(__name__)

OPEN_STATES = ["Ongoing", "PrepareCommit", "PrepareAbort"]
KEEP_MS = 100 * 365 * 86_400_000  # the kept copy's retention: for as long as the sink exists


class TransactionTimedOutError(FatalCommitError):
    """A prepared transaction was aborted by the broker before the driver committed it."""


class PrefixInUseError(ConfigurationError):
    """Two queries share one ``transactionalIdPrefix``."""


class KafkaCommitter(TwoPhaseCommitter[KafkaCommittable, Decision]):
    """Commits, aborts and recovers the sink's transactions. Driver only."""

    name = "kafka"
    kind, id_option = "the sink with transactionalIdPrefix", "transactionalIdPrefix"

    def __init__(self, cfg: KafkaSinkConfig) -> None:
        self.cfg = cfg
        self.client = KafkaTxnClient(cfg.bootstrap, cfg.timeout_s, cfg.security, cfg.budget_s)  # see _pooled
        self._latest: Decision | None = None  # the last decision ``recorded`` read
        self._oldest_start_ms = 0  # the winners' earliest start (broker clock), read by ``check``

    @property
    def identity(self) -> str:
        return self.cfg.txn_prefix

    @contextmanager
    def _pooled(self) -> Iterator[None]:
        """For one entry point (``take_over``, a ``commit`` or ``abort``, the doctor's): the
        client this process kept from the last one, its connections open."""
        cfg = self.cfg
        with kept_client(cfg.bootstrap, cfg.timeout_s, cfg.security, cfg.budget_s) as client:
            self.client = client
            yield

    # --- before a batch (plan with prepare=True) ---------------------------------------------

    def take_over(self, adopt: Batch[KafkaCommittable] | None = None) -> Claim[Producer]:
        """Step 1: fence older drivers, finish a decided batch, abort every other open
        transaction. The claim's fence is the commit id's producer (id and epoch). A batch
        to ``adopt`` is recorded right after the fence, unless it is already."""
        return self._take_over(abandon_lost=False, adopt=adopt)[0]

    def resolve(self) -> tuple[Claim[Producer], Decision | None, list[Producer]]:
        """The operator's way out (``spark-ext doctor kafka resolve``): what ``take_over``
        does, except that decided winners the broker already aborted are reported as lost
        and the batch is marked done, so the query can go on. Returns the claim, the last
        decision and the lost winners."""
        return self._take_over(abandon_lost=True)

    def _take_over(self, abandon_lost: bool, adopt: Batch[KafkaCommittable] | None = None,
                   ) -> tuple[Claim[Producer], Decision | None, list[Producer]]:
        cfg = self.cfg
        with self._pooled():
            # Refuse a second query before fencing anything of the first one. Read the last
            # *committed* decision: one pending in a crashed driver's open transaction would
            # block a stable read until the broker times it out; fencing below aborts it.
            decision = self._decision(stable=False) or self._kept()[0]
            if decision and decision.checkpoint and cfg.checkpoint and decision.checkpoint != cfg.checkpoint:
                raise PrefixInUseError(
                    f"transactionalIdPrefix {cfg.txn_prefix!r} is already used by another query (a "
                    "different checkpoint location); two queries must not share a prefix (the second "
                    "would abort the first's transactions). Choose another prefix"
                )
            commit_producer = self.client.init_producer(cfg.commit_txn_id, cfg.txn_timeout_ms)  # fence
            decision, done = self._recorded()  # again, now that no older driver can write one
            if adopt is not None and not _decides(decision, adopt.batch_id, str(adopt.query_id)):
                decision = self.adopt(Batch(adopt.batch_id, adopt.committables, Claim(commit_producer)))
                done = False
            committed, lost = 0, []
            if decision is not None and not done:
                log.warning("finishing batch %s, decided before a crash", decision.batch_id)
                lost = self._commit_winners(decision, abandon_lost)
                self._mark_done(commit_producer, decision)
                committed = len(decision.winners) - len(lost)
            rolled_back = self._abort_open(keep=())
            last = DecidedBatch(decision.batch_id, decision.query_id) if decision else None
            claim = Claim(commit_producer, last, committed=committed, rolled_back=rolled_back,
                          planned_ms=time.time() * 1000)
            return claim, decision, lost

    def last_decision(self) -> tuple[Decision | None, bool]:
        """The last recorded decision and whether it was finished (for the operator tool)."""
        with self._pooled():
            return self._recorded()

    def _recorded(self, stable: bool = True) -> tuple[Decision | None, bool]:
        """The last decision and whether it was finished. From the transactional records
        while the broker keeps them, else from the kept copy (they expired)."""
        decision = self._decision(stable)
        if decision is not None and self._done(decision):
            return decision, True  # the kept copy can add nothing (a round trip less a batch)
        kept, kept_done = self._kept()
        if decision is None:
            if kept is not None:
                log.warning("the decision records of %s expired (the broker's offsets.retention.minutes); "
                            "using the kept copy: batch %s, %s", self.cfg.txn_prefix, kept.batch_id,
                            "done" if kept_done else "decided, not finished")
            return kept, kept_done
        same = kept is not None and (kept.batch_id, kept.query_id) == (decision.batch_id, decision.query_id)
        return decision, same and kept_done

    def _kept(self, group: str | None = None,
              read: tuple[int, str] | None = None) -> tuple[Decision | None, bool]:
        """The kept copy of this sink's (or of ``group``'s sink's) last decision, and
        whether it is done. ``read``: its partition 0's (offset, metadata), if read already."""
        group = group or self.cfg.group + ".kept"
        anchor = self._anchor()
        if read is None:
            read = self.client.fetch_offsets(group, anchor, [0]).get(0, (-1, ""))
        off, meta = read
        if off < 0 or not meta:
            return None, False
        state, _, first = meta.partition("|")
        return join(first, lambda parts: self.client.fetch_offsets(group, anchor, parts), off,
                    f"group {group!r}"), state == "done"

    def _keep(self, decision: Decision, done: bool) -> None:
        """Write the kept copy (see the module docstring). Not fenced: it runs only right
        after a fenced step of this run succeeded."""
        parts = decision.parts()
        parts[0] = ("done|" if done else "decided|") + parts[0]
        self.client.keep_offsets(self.cfg.group + ".kept", self._offsets(decision, parts), KEEP_MS)

    def _offsets(self, decision: Decision, parts: list[str]) -> dict[tuple[str, int], tuple[int, str]]:
        return {(self._anchor(), i): (decision.batch_id + 1, part) for i, part in enumerate(parts)}

    def _decision(self, stable: bool = True) -> Decision | None:
        group, anchor = self.cfg.group, self._anchor()
        off, meta = self.client.fetch_offsets(group, anchor, [0], stable=stable).get(0, (-1, ""))
        if off < 0 or not meta:
            return None
        return join(meta, lambda parts: self.client.fetch_offsets(group, anchor, parts, stable=stable), off,
                    f"group {group!r}")

    def _check_room(self, decision: Decision, parts: list[str]) -> None:
        """A decision split over more partitions than the commit topic has cannot be written."""
        if len(parts) == 1:
            return
        anchor = self._anchor()
        md = self.client.metadata([anchor])  # over the kept connection
        have = max((len(t.partitions) for t in md.topics if t.name == anchor), default=0)
        if have < len(parts):
            raise FatalCommitError(
                f"batch {decision.batch_id} has {len(decision.winners)} winning tasks; naming them takes "
                f"{len(parts)} partitions of the commit topic {anchor!r} (about 300 tasks each), which has "
                f"{have}. Set option commitTopic to a topic with at least {len(parts)} partitions, or write "
                "fewer tasks a batch with df.coalesce(n) before the sink; nothing of the batch was committed")

    def _done(self, decision: Decision) -> bool:
        """Was ``decision`` finished? The done record names its batch *and query*: after a
        checkpoint reset at the same path, batch ids start again at 0 under the same prefix."""
        off, meta = self.client.fetch_offsets(self.cfg.group + ".done", self._anchor(), [0]).get(0, (-1, ""))
        return off == decision.batch_id + 1 and meta == decision.query_id

    def _anchor(self) -> str:
        if not self.cfg.commit_topic:
            raise ConfigurationError("set option 'topic' or 'commitTopic' (an existing topic whose "
                                     "consumer-group offsets record the committed batches)")
        return self.cfg.commit_topic

    # --- the primitives of steps 4 and 5 (spark_ext.commit.TwoPhaseCommitter orders them) ---

    def connected(self) -> AbstractContextManager[None]:
        return self._pooled()

    def recorded(self, batch: Batch[KafkaCommittable]) -> Decision | None:
        decision = self._latest = self._decision()
        return decision if _decides(decision, batch.batch_id, str(batch.query_id)) else None

    def check(self, batch: Batch[KafkaCommittable]) -> None:
        assert batch.claim is not None  # _fence checked it
        self._check_open(batch.prepared, batch.batch_id, _fence(batch), batch.claim.planned_ms)

    def predecessors(self, batch: Batch[KafkaCommittable]) -> list[Predecessor]:
        """Every sink that decided a batch keeps a copy of its last decision in a group of
        its own (``<prefix>.batches.kept``): those naming this query, with the open
        transactions of their prefix. Searched once per run: after this sink's first
        decision for the query, its own record names the query."""
        query = str(batch.query_id or "")
        own = self._latest or self._kept()[0]  # read by ``recorded`` in this commit; kept if expired
        if not query or (own is not None and own.query_id == query):
            return []
        mine = self.cfg.group + ".kept"
        # Kept copies live as long as their sinks: read them all in one request a broker, not
        # a round trip each (a cluster keeps one for every exactly-once sink it ever ran).
        by_broker = {node: [g for g in groups if g.endswith(".batches.kept") and g != mine]
                     for node, groups in self.client.groups_by_broker().items()}
        firsts = self.client.fetch_offsets_of_groups(by_broker, self._anchor(), [0])
        found = []
        for group in sorted(firsts):
            kept = read_other(partial(self._kept, group, firsts[group].get(0, (-1, ""))), query,
                              (ValueError, KeyError, TypeError, zlib.error, TornDecisionError))
            old, done = kept or (None, False)
            if old is None or old.query_id != query:
                continue  # a sink of another topic, or of another query
            prefix = group[: -len(".batches.kept")]
            if self.siblings(prefix):
                continue
            pattern = re.escape(prefix) + r"-(p[0-9]+-a[0-9]+(-b[01])?|commit)"
            open_ = self.client.list_transactions(pattern, OPEN_STATES)
            found.append(Predecessor(prefix, old.batch_id, done, len(open_), old.checkpoint))
        return found

    def roll_back_own(self, batch: Batch[KafkaCommittable]) -> None:
        self._abort_own(batch.prepared)

    def carry_on(self, predecessor: Predecessor) -> str:
        """A prefix belongs to one checkpoint: the old location finishes the batch."""
        return (f"Restart the query from {predecessor.checkpoint or 'its old checkpoint'} until it has "
                "committed a batch, "
                "stop it, then move the checkpoint")

    def record(self, batch: Batch[KafkaCommittable]) -> Decision:
        """The decision, as group offsets in the commit id's transaction: its epoch is the
        claim's, so a zombie driver whose plan is older is fenced here and decides nothing."""
        return self._write_decision(batch, vet=True)

    def adopt(self, batch: Batch[KafkaCommittable]) -> Decision:
        """``record`` without the age check: the batch is decided elsewhere, and a winner
        the broker aborted meanwhile is reported as lost when it commits."""
        return self._write_decision(batch, vet=False)

    def _write_decision(self, batch: Batch[KafkaCommittable], vet: bool) -> Decision:
        fence = _fence(batch)
        decision = Decision(batch.batch_id, str(batch.query_id), self.cfg.checkpoint,
                            tuple(_producer(c) for c in batch.prepared), batch.run_id, batch.rows)
        parts = decision.parts()
        self._check_room(decision, parts)
        self.client.write_offsets(fence, self.cfg.group, self._offsets(decision, parts))
        assert batch.claim is not None  # _fence checked it
        if vet:
            self._check_age(batch.prepared, batch.batch_id, fence, batch.claim.planned_ms)
        failpoints.hit("kafka.mid_decision", batch.batch_id)  # decision pending in its transaction
        self.client.end_txn(fence, commit=True)
        return decision

    def run_of(self, decision: Decision) -> str:
        return decision.run_id

    def rows_of(self, decision: Decision) -> int | None:
        return decision.rows

    def finished(self, decision: Decision) -> bool:
        kept, kept_done = self._kept()
        same = kept is not None and (kept.batch_id, kept.query_id) == (decision.batch_id, decision.query_id)
        return self._done(decision) or (same and kept_done)

    def before_winners(self, batch: Batch[KafkaCommittable], decision: Decision) -> Decision:
        self._keep(decision, done=False)  # before any winner commits (also on a retry)
        return decision

    def winners(self, decision: Decision) -> Sequence[Producer]:
        return decision.winners

    def commit_winner(self, decision: Decision, winner: Producer) -> bool:
        try:
            self.client.end_txn(winner, commit=True)
            return True
        except (FencedError, FatalCommitError):
            s = self.client.describe([winner.transactional_id])[winner.transactional_id]
            # committed before a crash, and this is the retry
            return s.state == "CompleteCommit" and (s.producer_id, s.epoch) == (winner.producer_id,
                                                                                winner.epoch)

    def commit_winners(self, decision: Decision, winners: Sequence[Producer]) -> list[Producer]:
        """Step 4c: the winners' commits pipelined (``KafkaTxnClient.end_txns``); each one
        that did not commit so is taken alone by ``commit_winner``."""
        left = self.client.end_txns(winners, commit=True)
        return [w for w in left if not self.commit_winner(decision, w)]

    def lost(self, decision: Decision, lost: Sequence[Producer]) -> CommitError:
        names = ", ".join(w.transactional_id for w in lost)
        return TransactionTimedOutError(
            f"batch {decision.batch_id} was decided, but {len(lost)} of its {len(decision.winners)} "
            f"transactions ({names}) were aborted by the broker before the commit finished, most "
            f"likely by kafka.transaction.timeout.ms ({self.cfg.txn_timeout_ms} ms) while the driver "
            "was down; the others are committed. Kafka cannot bring aborted records back, so every "
            "restart stops here. To go on: list what was lost with `spark-ext doctor kafka list "
            f"--bootstrap {self.cfg.bootstrap} --prefix {self.cfg.txn_prefix} --topic "
            f"{self.cfg.commit_topic}`, then run `spark-ext doctor kafka resolve` with the same "
            "arguments (it marks the batch done), re-send that batch's input for those partitions, "
            "and raise kafka.transaction.timeout.ms"
        )

    def finish(self, batch: Batch[KafkaCommittable], decision: Decision) -> None:
        self._mark_done(_fence(batch), decision)

    def roll_back_others(self, batch: Batch[KafkaCommittable], decision: Decision) -> None:
        self._abort_open(keep=tuple(w.transactional_id for w in decision.winners))

    def roll_back(self, batch: Batch[KafkaCommittable]) -> None:
        """Abort the batch's transactions. When the claim still owns the sink (its commit
        id's epoch is the broker's), every open transaction of the sink's pool is aborted,
        so attempts that were killed or still run do not hold back read_committed
        consumers; otherwise (a zombie, or no task reported) only the reported ones, never
        another run's."""
        self._abort_own(batch.prepared)
        if batch.claim is not None and self._owns_sink(batch.claim.fence):
            self._abort_open(keep=())

    def _owns_sink(self, fence: Producer) -> bool:
        now = self.client.describe([fence.transactional_id])[fence.transactional_id]
        return (now.producer_id, now.epoch) == (fence.producer_id, fence.epoch)

    def _abort_own(self, committables: Sequence[KafkaCommittable]) -> None:
        for c in committables:
            if c.producer is None:
                continue
            try:
                self.client.end_txn(c.producer, commit=False)
            except (FencedError, FatalCommitError):
                pass  # already aborted (timeout, or fenced by a newer attempt)

    def _check_open(self, winners: Sequence[KafkaCommittable], batch_id: int, fence: Producer,
                    planned_ms: float) -> None:
        producers = [_producer(c) for c in winners]
        # One request per coordinator for the fence and every winner.
        states = self.client.describe([fence.transactional_id, *(p.transactional_id for p in producers)])
        now = states[fence.transactional_id]
        if (now.producer_id, now.epoch) != (fence.producer_id, fence.epoch):
            raise FencedError(f"batch {batch_id}: another run of this sink ({self.cfg.txn_prefix!r}) took "
                              "over after this batch began; this run stops without committing "
                              "(zombie fencing)")
        if states[fence.transactional_id].state == "Ongoing":
            # An earlier try of this commit began its decision and failed before ending it:
            # nothing is decided, and a fresh decision transaction dates the check below.
            self.client.end_txn(fence, commit=False)
        since_plan_s = (time.time() * 1000 - planned_ms) / 1000
        for p in producers:
            s = states[p.transactional_id]
            if s.state != "Ongoing" or s.producer_id != p.producer_id or s.epoch != p.epoch:
                self._abort_own(winners)
                raise TransactionTimedOutError(
                    f"batch {batch_id}: transaction {p.transactional_id!r} is no longer open on the "
                    f"broker (state {s.state}, epoch {s.epoch}, ours {p.epoch}) {since_plan_s:.1f} s after "
                    f"the batch was planned; kafka.transaction.timeout.ms is {self.cfg.txn_timeout_ms}. It "
                    "was aborted by that timeout or fenced by another run. Nothing of the batch was "
                    "committed; restart the query to write it again, and raise kafka.transaction.timeout.ms "
                    "(up to the broker's transaction.max.timeout.ms) or make batches shorter"
                )
        starts = [states[p.transactional_id].start_ms for p in producers]
        self._oldest_start_ms = min(starts) if min(starts) > 0 else 0

    def _check_age(self, winners: Sequence[KafkaCommittable], batch_id: int, fence: Producer,
                   planned_ms: float) -> None:
        """Refuse to decide winners the broker may abort before they commit. Called with
        the decision's transaction just begun: its start is the coordinator's "now", and
        the winners' starts (read by ``check``) are on the brokers' clocks too, the clocks
        that enforce the timeout. An executor's clock, which may be minutes off either way,
        never enters."""
        now_ms = self.client.describe([fence.transactional_id])[fence.transactional_id].start_ms
        if now_ms > 0 and self._oldest_start_ms > 0:
            age_s = (now_ms - self._oldest_start_ms) / 1000
        else:  # a broker that gave no start time: the time since planning bounds the age
            age_s = (time.time() * 1000 - planned_ms) / 1000
        if self._too_old(age_s):
            self.client.end_txn(fence, commit=False)  # the decision, not yet recorded
        self._refuse_if_old(age_s, winners, batch_id)

    def vet(self, batch: Batch[KafkaCommittable]) -> None:
        """Under a routing sink, which decides for this sink: the age check ``record`` makes,
        bounded by the time since this run's plan on the driver's clock (every winner began
        after it), since no decision transaction of this sink dates it on the broker's."""
        assert batch.claim is not None  # the routing sink's check found the fence
        self._refuse_if_old((time.time() * 1000 - batch.claim.planned_ms) / 1000, batch.prepared,
                            batch.batch_id)

    def _margin_s(self) -> float:
        """How close to kafka.transaction.timeout.ms a batch may not be decided."""
        return min(2 * self.cfg.timeout_s, self.cfg.txn_timeout_ms / 1000 / 4)

    def _too_old(self, age_s: float) -> bool:
        return age_s > self.cfg.txn_timeout_ms / 1000 - self._margin_s()

    def _refuse_if_old(self, age_s: float, winners: Sequence[KafkaCommittable], batch_id: int) -> None:
        limit_s, margin_s = self.cfg.txn_timeout_ms / 1000, self._margin_s()
        if self._too_old(age_s):
            # Deciding now could let the broker abort a winner after the decision: refuse.
            self._abort_own(winners)
            raise TransactionTimedOutError(
                f"batch {batch_id}: its transactions are {age_s:.1f} s old, within {margin_s:.0f} s of "
                f"kafka.transaction.timeout.ms ({self.cfg.txn_timeout_ms}); the batch is rolled back "
                "rather than risk a partial commit. A restart replays the same batch and would fail the "
                "same way: first raise kafka.transaction.timeout.ms (up to the broker's "
                "transaction.max.timeout.ms) or make the batch smaller (e.g. a lower maxOffsetsPerTrigger "
                "on the Kafka source), then restart"
            )
        if age_s > self.cfg.warn_fraction * limit_s:
            log.warning("batch %s took %.1f s, more than %.0f%% of kafka.transaction.timeout.ms (%.0f s): "
                        "a slower batch would be aborted by the broker; raise the timeout or make batches "
                        "shorter", batch_id, age_s, self.cfg.warn_fraction * 100, limit_s)

    def _commit_winners(self, decision: Decision, abandon_lost: bool = False) -> list[Producer]:
        """Step 1's finishing of a decided batch: commit every winner; returns those the
        broker had aborted already, which fail unless ``abandon_lost`` (the operator's resolve)."""
        lost = self.commit_winners(decision, decision.winners)
        if lost and not abandon_lost:
            raise self.lost(decision, lost)
        return lost

    def _mark_done(self, commit_producer: Producer, decision: Decision) -> None:
        self.client.commit_offsets(commit_producer, self.cfg.group + ".done",
                                   {(self._anchor(), 0): (decision.batch_id + 1, decision.query_id)})
        self._keep(decision, done=True)

    def _abort_open(self, keep: tuple[str, ...]) -> int:
        """Abort every open transaction of this sink except ``keep`` (fences their owners);
        returns how many were aborted."""
        aborted = 0
        for tid, _pid, _state in self.client.list_transactions(self.cfg.txn_pattern, OPEN_STATES):
            if tid in keep:
                continue
            try:
                self.client.init_producer(tid, self.cfg.txn_timeout_ms)
                aborted += 1
            except SparkExtError as e:
                log.warning("could not abort open transaction %s: %s", tid, e)
        return aborted


def _fence(batch: Batch[KafkaCommittable]) -> Producer:
    """The claim's fence: the commit id's producer, which decisions are written with."""
    if batch.claim is None:
        raise FatalCommitError(f"batch {batch.batch_id}: its tasks reported no claim; exactly_once "
                               "plans take the sink over before the tasks run, so this is a bug")
    fence = batch.claim.fence
    assert isinstance(fence, Producer)
    return fence


def _producer(c: KafkaCommittable) -> Producer:
    assert c.producer is not None, "only prepared committables are winners"
    return c.producer


def _decides(decision: Decision | None, batch_id: int, query_id: str) -> bool:
    """True when ``decision`` is the one recorded for ``batch_id`` of query ``query_id``."""
    return decision is not None and decision.batch_id == batch_id and decision.query_id == query_id
