"""Driver side of the routing sink: one decision for every sub-sink (steps 1, 4, 5).

``TwoPhaseCommitter.commit`` orders the steps as for any sink; the primitives here compose
the sub-sinks' own:

- ``check`` (4a): the decision log's epoch is this run's, then every sub-sink's ``check``
  and ``vet`` (what its own ``record`` would refuse, such as Kafka's age check);
- ``record`` (4b): **the one decision**, in the decider's ``DecisionLog``;
- ``before_winners``: every sub-sink records its copy of its part (``adopt``) and runs its
  own ``before_winners``; a crash from here on leaves the decision to the next take-over;
- ``commit_winners`` (4c): the sub-sinks' winners, sub-sink after sub-sink, each sub-sink's
  run of them in one call of its own ``commit_winners``;
- ``finish``: every sub-sink's, then the log marks the decision carried out;
- ``roll_back_others`` (4d) / ``roll_back`` (5): every sub-sink's.

``take_over`` (1) fences the log first (no older run can decide after that), then takes
every sub-sink over handing it the last decision's part when that decision was not
carried out: the sub-sink records it as its own before it resolves what is in doubt, so
it is finished there, never rolled back.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from typing import Any

from spark_ext import failpoints
from spark_ext.commit import Batch, Claim, DecidedBatch, Predecessor, TwoPhaseCommitter
from spark_ext.deadletters import Cap
from spark_ext.decisions import DecisionLog, RoutingDecision
from spark_ext.errors import CommitError, FatalCommitError, FencedError
from spark_ext.routing.writer import RoutingCommittable, RoutingFence

log = logging.getLogger(__name__)


class RoutingCommitter(TwoPhaseCommitter[RoutingCommittable, RoutingDecision]):
    name = "routing"
    kind = "routing sink"

    def __init__(self, routing_id: str, subs: Mapping[str, TwoPhaseCommitter[Any, Any]],
                 decisions: DecisionLog, dead_letters: tuple[str, str] | None = None,
                 cap: Cap | None = None) -> None:
        self.routing_id = routing_id
        self.dead_letters, self.cap = dead_letters, cap
        self.subs = dict(subs)
        self.log = decisions

    @property
    def identity(self) -> str:
        return self.routing_id

    # --- step 1 -------------------------------------------------------------------------------

    def take_over(self, adopt: Batch[Any] | None = None) -> Claim[RoutingFence]:
        assert adopt is None, "a routing sink is never a sub-sink"
        epoch, last, done = self.log.take_over()
        pending = last if last is not None and not done else None
        if pending is not None:
            log.warning("%s: finishing batch %s, decided before a crash, in every sub-sink", self.label,
                        pending.batch_id)
        claims = {}
        for name, sub in self.subs.items():
            part = pending.of(name) if pending is not None else ()
            share = Batch(pending.batch_id, part, None) if pending is not None and part else None
            claims[name] = sub.take_over(adopt=share)
        if pending is not None:
            with self.log.connected():
                self.log.mark_finished(pending)
        decided = DecidedBatch(last.batch_id, last.query_id) if last is not None else None
        # Every sub-sink's writers skip a replay of the routing sink's last decided batch,
        # also a sub-sink that had no rows in it (and so no decision of its own).
        subs = tuple((n, replace(c, last_decided=_later(c.last_decided, decided))) for n, c in claims.items())
        return Claim(RoutingFence(epoch, subs), decided,
                     committed=sum(c.committed for c in claims.values()),
                     rolled_back=sum(c.rolled_back for c in claims.values()), planned_ms=time.time() * 1000)

    # --- the primitives of steps 4 and 5 ------------------------------------------------------------

    @contextmanager
    def connected(self) -> Iterator[None]:
        with ExitStack() as stack:
            stack.enter_context(self.log.connected())
            for sub in self.subs.values():
                stack.enter_context(sub.connected())
            yield

    def _share(self, batch: Batch[RoutingCommittable], name: str) -> Batch[Any]:
        """Sub-sink ``name``'s part of the batch: its committables, under its own claim."""
        fence = _fence(batch)
        part = tuple(c for rc in batch.committables for n, c in rc.parts if n == name)
        return Batch(batch.batch_id, part, fence.claim(name))

    def recorded(self, batch: Batch[RoutingCommittable]) -> RoutingDecision | None:
        return self.log.recorded(str(batch.query_id), batch.batch_id)

    def check(self, batch: Batch[RoutingCommittable]) -> None:
        fence = _fence(batch)
        now = self.log.epoch()
        if now != fence.epoch:
            # The newer run took every sub-sink over too: it resolves what this one prepared.
            raise FencedError(f"{self.label} was taken over by a newer run (epoch {now}, this run "
                              f"{fence.epoch}); this run commits nothing of batch {batch.batch_id}")
        self._check_dead_letters(batch)
        for name, sub in self.subs.items():
            share = self._share(batch, name)
            if share.prepared:
                sub.check_predecessors(share)
                sub.check(share)
                sub.vet(share)

    def set_aside(self, batch: Batch[RoutingCommittable]) -> int | None:
        if self.dead_letters is None:
            return None
        return sum(c.rows for rc in batch.committables for n, c in rc.parts if n == self.dead_letters[1])

    def _check_dead_letters(self, batch: Batch[RoutingCommittable]) -> None:
        """Refuse a batch with more dead letters than its cap allows: rolled back whole."""
        if self.dead_letters is None or self.cap is None:
            return
        count = self.set_aside(batch) or 0
        rows = sum(c.rows for rc in batch.committables for _, c in rc.parts)
        why = self.cap.exceeded(count, rows)
        if why is None:
            return
        first = next((rc.first_refusal for rc in batch.committables if rc.first_refusal), "")
        self.roll_back(batch)
        raise FatalCommitError(
            f"batch {batch.batch_id}: {count} rows refused, {why}; the first: {first}. Nothing of the batch "
            "was committed: fix the rows (or the target), or raise the cap")

    def predecessors(self, batch: Batch[RoutingCommittable]) -> list[Predecessor]:
        """Routing sinks of this query in the decision log under other ids. A copied
        checkpoint is a new routing sink (new sub-sink ids), so each sub-sink would write
        the batch again and the old routing sink's unfinished decision would wait for ever."""
        return [Predecessor(other, last, finished) for other, last, finished
                in self.log.predecessors(str(batch.query_id))]

    def siblings(self, name: str) -> bool:
        return False  # routing sinks are never sub-sinks: an id spelled with '--' is another sink

    def roll_back_own(self, batch: Batch[RoutingCommittable]) -> None:
        for name, sub in self.subs.items():
            sub.roll_back_own(self._share(batch, name))

    def carry_on(self, predecessor: Predecessor) -> str:
        """Its sub-sinks' ids derive from its own, and a Kafka sub-sink's prefix belongs to
        one checkpoint: the old location finishes the batch."""
        return ("Restart the query from its old checkpoint location until it has committed a batch, stop "
                "it, then move the checkpoint")

    def record(self, batch: Batch[RoutingCommittable]) -> RoutingDecision:
        parts = []
        for name in self.subs:
            prepared = tuple(c for c in self._share(batch, name).prepared)
            if prepared:
                parts.append((name, prepared))
        dead = self.dead_letters[1] if self.dead_letters is not None else ""
        decision = RoutingDecision(batch.batch_id, str(batch.query_id), tuple(parts), dead, batch.run_id)
        return self.log.record(decision, _fence(batch).epoch)

    def run_of(self, decision: RoutingDecision) -> str:
        return decision.run_id

    def rows_of(self, decision: RoutingDecision) -> int | None:
        return sum(c.rows for _, part in decision.parts for c in part)

    def finished(self, decision: RoutingDecision) -> bool:
        return self.log.finished(decision)

    def before_winners(self, batch: Batch[RoutingCommittable], decision: RoutingDecision) -> RoutingDecision:
        """Every sub-sink's own copy of its part, before any winner commits (also on a retry):
        the rest of step 4 carries the decision out through those copies."""
        own = {}
        for name, part in decision.parts:
            sub = self.subs[name]
            share = Batch(decision.batch_id, part, _fence(batch).claim(name))
            own[name] = sub.before_winners(share, sub.recorded(share) or sub.adopt(share))
        return decision.carried_by(own)

    def winners(self, decision: RoutingDecision) -> Sequence[tuple[str, Any]]:
        return [(name, w) for name, own in decision.own for w in self.subs[name].winners(own)]

    def commit_winner(self, decision: RoutingDecision, winner: tuple[str, Any]) -> bool:
        return not self.commit_winners(decision, [winner])

    def commit_winners(self, decision: RoutingDecision, winners: Sequence[tuple[str, Any]]) -> list[Any]:
        """Each sub-sink's run of winners in one call of its own ``commit_winners``; the crash
        point ``routing.between_sinks`` before each sub-sink's run but the first."""
        own, every = dict(decision.own), self.winners(decision)
        lost: list[Any] = []
        for name, run in itertools.groupby(winners, key=lambda w: w[0]):
            ws = [w for _n, w in run]
            at = every.index((name, ws[0]))
            if at > 0 and every[at - 1][0] != name:
                failpoints.hit("routing.between_sinks", decision.batch_id)
            lost += [(name, w) for w in self.subs[name].commit_winners(own[name], ws)]
        return lost

    def lost(self, decision: RoutingDecision, lost: Sequence[tuple[str, Any]]) -> CommitError:
        texts = []
        for name, own in decision.own:
            mine = [w for n, w in lost if n == name]
            if mine:
                texts.append(f"sub-sink {name!r}: {self.subs[name].lost(own, mine)}")
        return FatalCommitError(f"{self.label}, batch {decision.batch_id}: " + "; ".join(texts))

    def finish(self, batch: Batch[RoutingCommittable], decision: RoutingDecision) -> None:
        for name, own in decision.own:
            self.subs[name].finish(self._share(batch, name), own)
        self.log.mark_finished(decision)
        if self.dead_letters is not None:
            count = sum(c.rows for n, part in decision.parts if n == self.dead_letters[1] for c in part)
            if count:
                first = next((rc.first_refusal for rc in batch.committables if rc.first_refusal), "")
                log.warning("%s: batch %s committed %d refused row(s) as dead letters (sub-sink %r); the "
                            "first: %s", self.label, batch.batch_id, count, self.dead_letters[1], first)

    def roll_back_others(self, batch: Batch[RoutingCommittable], decision: RoutingDecision) -> None:
        """4d. A decision found finished (a retry, a replay) carries no sub-sink records yet:
        each sub-sink's own record is read for it."""
        if not decision.own and batch.claim is None:
            return
        own = decision.own or tuple(
            (name, found) for name, part in decision.parts
            if (found := self.subs[name].recorded(Batch(decision.batch_id, part, _fence(batch).claim(name))))
            is not None)
        for name, mine in own:
            self.subs[name].roll_back_others(self._share(batch, name), mine)

    def roll_back(self, batch: Batch[RoutingCommittable]) -> None:
        for name, sub in self.subs.items():
            sub.roll_back(self._share(batch, name))


def _fence(batch: Batch[Any]) -> RoutingFence:
    if batch.claim is None or not isinstance(batch.claim.fence, RoutingFence):
        raise FatalCommitError(f"batch {batch.batch_id}: its tasks reported no routing claim; exactly_once "
                               "plans take the sink over before the tasks run, so this is a bug")
    return batch.claim.fence


def _later(a: DecidedBatch | None, b: DecidedBatch | None) -> DecidedBatch | None:
    if a is None or b is None:
        return a or b
    if a.query_id != b.query_id:
        return b  # the routing sink's own record names the query running now
    return a if a.batch_id >= b.batch_id else b

