"""Executor side of the routing sink (step 3): one task's rows, split by the route column,
each sub-sink's share written and prepared by that sub-sink's own writer."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_ext.commit import Claim, Committable, SinkWriter, TaskInfo
from spark_ext.errors import ConnectorError

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RoutingCommittable(Committable):
    """One task attempt's outcome in every sub-sink it wrote to: (name, its committable)."""

    parts: tuple[tuple[str, Committable], ...] = ()
    first_refusal: str = ""  # with dead letters: the first row error, for a cap's message

    @property
    def prepared(self) -> bool:
        return any(c.prepared for _, c in self.parts)


@dataclass(frozen=True)
class RoutingFence:
    """The routing sink's claim: the decision log's epoch and every sub-sink's own claim."""

    epoch: int
    claims: tuple[tuple[str, Claim[Any]], ...]

    def claim(self, name: str) -> Claim[Any]:
        return dict(self.claims)[name]


class RoutingWriter(SinkWriter[RoutingCommittable]):
    """Splits a task's rows by the route column (in memory: a sub-sink's writer reads its
    share once the task's input is read) and runs each sub-sink's writer on its share."""

    def __init__(self, route_column: str | None, columns: Mapping[str, tuple[str, ...]],
                 writers: Mapping[str, SinkWriter[Any]], claim: Claim[Any] | None,
                 dead_letters: tuple[str, str] | None = None, routing_id: str = "") -> None:
        self.route_column = route_column
        self.columns = dict(columns)
        self.writers = dict(writers)
        self.claim = claim
        self.dead_letters, self.routing_id = dead_letters, routing_id
        # With dead letters, a source's unreadable records (``_corrupt_record``) are dead letters too.
        self.sets_corrupt_aside = dead_letters is not None

    def write(self, batches: Iterator[pa.RecordBatch], task: TaskInfo) -> RoutingCommittable:
        import pyarrow.compute as pc

        if self.claim is not None and self.claim.replays(task):  # in every sub-sink already
            for _ in batches:
                pass
            return RoutingCommittable(task.batch_id, task.partition_id, task.attempt, 0,
                                      query_id=task.query_id)
        if self.dead_letters is not None:
            return self._write_setting_aside(batches, task, *self.dead_letters)
        assert self.route_column is not None
        shares: dict[str, list[pa.RecordBatch]] = {n: [] for n in self.writers}
        names = list(self.writers)
        for rb in batches:
            route = rb.column(self.route_column)
            known = pc.is_in(route, value_set=_array(names))
            if not pc.all(pc.fill_null(known, False)).as_py():
                bad = route.filter(pc.invert(pc.fill_null(known, False)))
                raise ConnectorError(
                    f"batch {task.batch_id}: a row's {self.route_column!r} is {bad[0].as_py()!r}, which "
                    f"names no sub-sink (sub-sinks: {', '.join(names)}); nothing of the batch was "
                    "committed. Fix the route column or add that sub-sink")
            for name in names:
                share = rb.filter(pc.equal(route, name)).select(list(self.columns[name]))
                if share.num_rows:
                    shares[name].append(share)
        parts = []
        for name in names:
            if shares[name]:
                parts.append((name, self.writers[name].write(iter(shares[name]), task)))
        return RoutingCommittable(task.batch_id, task.partition_id, task.attempt,
                                  sum(c.rows for _, c in parts), query_id=task.query_id, parts=tuple(parts))

    def _write_setting_aside(self, batches: Iterator[pa.RecordBatch], task: TaskInfo, target: str,
                             dead: str) -> RoutingCommittable:
        """Every row to ``target``; the rows it refuses for a reason of their own to ``dead``."""
        from spark_ext import deadletters

        writer = self.writers[target]
        assert isinstance(writer, deadletters.SetsAside)
        writer.refused = []
        cols = list(self.columns[target])
        unreadable: list[deadletters.Refusal] = []

        def readable() -> Iterator[pa.RecordBatch]:
            for rb in batches:
                clean, bad = deadletters.split_corrupt(rb)
                unreadable.extend(bad)
                yield clean.select(cols)

        parts = [(target, writer.write(readable(), task))]
        refused = unreadable + writer.refused
        first = ""
        if refused:
            first = f"{refused[0].error_class} {refused[0].error_code}: {refused[0].message}"[:500]
            log.warning("batch %s partition %s: %d row(s) refused, set aside as dead letters; the first: %s",
                        task.batch_id, task.partition_id, len(refused), first)
            rows = deadletters.table(refused, self.routing_id, task.batch_id, task.partition_id)
            share = rows.select(list(self.columns[dead]))
            parts.append((dead, self.writers[dead].write(iter([share]), task)))
        return RoutingCommittable(task.batch_id, task.partition_id, task.attempt,
                                  sum(c.rows for _, c in parts), query_id=task.query_id, parts=tuple(parts),
                                  first_refusal=first)


def _array(names: list[str]) -> Any:
    import pyarrow as pa

    return pa.array(names, pa.string())
