"""Small fakes for unit tests of pure protocol logic (never proof that a connector works)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from spark_ext.commit import Batch, Claim, Committable, SinkWriter, TaskInfo, TwoPhaseCommitter
from spark_ext.errors import CommitError, FatalCommitError, FencedError


class NullWriter(SinkWriter[Committable]):
    """Counts rows and prepares nothing."""

    def write(self, batches: Iterator[pa.RecordBatch], task: TaskInfo) -> Committable:
        rows = sum(b.num_rows for b in batches)
        return Committable(task.batch_id, task.partition_id, task.attempt, rows)


class RecordingTwoPhaseCommitter(TwoPhaseCommitter[Committable, tuple[int, ...]]):
    """Records the primitives the template calls; decisions are the winners' partition ids."""

    name = "rec"

    def __init__(self, decided: tuple[int, ...] | None = None, lose: frozenset[int] = frozenset(),
                 fenced: bool = False, done: bool = False, decided_in: str = "",
                 decided_rows: int | None = None) -> None:
        self.calls: list[str] = []
        self.decided, self.lose, self.fenced, self.done = decided, lose, fenced, done
        self.decided_in, self.decided_rows = decided_in, decided_rows  # what the recorded decision names

    def run_of(self, decision: tuple[int, ...]) -> str:
        return self.decided_in

    def rows_of(self, decision: tuple[int, ...]) -> int | None:
        return self.decided_rows

    def take_over(self, adopt: Any = None) -> Claim[Any]:
        return Claim(1)

    def connected(self) -> Any:
        rec = self

        class _Conn:
            def __enter__(self) -> None:
                rec.calls.append("connect")

            def __exit__(self, *exc: object) -> None:
                rec.calls.append("close")

        return _Conn()

    def recorded(self, batch: Batch[Committable]) -> tuple[int, ...] | None:
        self.calls.append("recorded")
        return self.decided

    def check(self, batch: Batch[Committable]) -> None:
        self.calls.append("check")
        if self.fenced:
            raise FencedError("fenced")

    def record(self, batch: Batch[Committable]) -> tuple[int, ...]:
        self.calls.append("record")
        return tuple(c.partition_id for c in batch.prepared)

    def finished(self, decision: tuple[int, ...]) -> bool:
        self.calls.append("finished")
        return self.done

    def before_winners(self, batch: Batch[Committable], decision: tuple[int, ...]) -> tuple[int, ...]:
        self.calls.append("before_winners")
        return decision

    def winners(self, decision: tuple[int, ...]) -> Sequence[int]:
        return decision

    def commit_winner(self, decision: tuple[int, ...], winner: int) -> bool:
        self.calls.append(f"commit {winner}")
        return winner not in self.lose

    def lost(self, decision: tuple[int, ...], lost: Sequence[int]) -> CommitError:
        return FatalCommitError(f"lost {list(lost)}")

    def finish(self, batch: Batch[Committable], decision: tuple[int, ...]) -> None:
        self.calls.append("finish")

    def roll_back_others(self, batch: Batch[Committable], decision: tuple[int, ...]) -> None:
        self.calls.append("roll_back_others")

    def roll_back(self, batch: Batch[Committable]) -> None:
        self.calls.append("roll_back")
