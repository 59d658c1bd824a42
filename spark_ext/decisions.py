"""A composed sink's decision and the log that holds it: the contract between the routing
sink (``spark_ext.routing``) and the connectors whose systems can keep its decisions.

A routing batch is decided once: one row (or record) in one system, the *decider*,
names every sub-sink's winning task attempts. Each sub-sink then records its own copy of
that decision (its own primitive, fenced by its own claim) before any of its winners
commits, so a sub-sink's own take-over can finish its part; a take-over of the routing
sink hands every sub-sink the last routing decision not yet finished, which it records
as its own before it resolves what is in doubt (``TwoPhaseCommitter.take_over(adopt=)``).

``DecisionLog`` is what a connector offers to be a decider, by being ``KeepsDecisions``
(the PostgreSQL sink is: ``spark_ext.connectors.jdbc.routing_log``). Committables travel
in it as JSON naming their class; only spark-ext's own frozen dataclasses are read back.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from abc import ABC, abstractmethod
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from spark_ext import formats
from spark_ext.commit import Committable
from spark_ext.errors import FatalCommitError


@dataclass(frozen=True)
class RoutingDecision:
    """Batch ``batch_id`` of query ``query_id`` commits, in each named sub-sink, the
    transactions its committables name (the prepared ones of the tasks Spark took)."""

    batch_id: int
    query_id: str
    parts: tuple[tuple[str, tuple[Committable, ...]], ...]
    dead: str = ""  # the sub-sink holding dead letters, if any: their count is the status's
    run_id: str = ""  # Spark's run that decided it ("": not known)
    #: Each sub-sink's own record of its part, once it has one (step 4, ``before_winners``
    #: onwards); never stored in the log.
    own: tuple[tuple[str, Any], ...] = field(default=(), compare=False, repr=False)

    def carried_by(self, own: Mapping[str, Any]) -> RoutingDecision:
        """This decision with each sub-sink's own record of its part."""
        return dataclasses.replace(self, own=tuple(own.items()))

    def of(self, name: str) -> tuple[Committable, ...]:
        return dict(self.parts).get(name, ())

    def to_json(self) -> str:
        doc: dict[str, Any] = {formats.KEY: formats.ROUTING_DECISION.current, "b": self.batch_id,
                               "q": self.query_id,
                               "p": [[n, [_encode(c) for c in cs]] for n, cs in self.parts]}
        if self.dead:
            doc["d"] = self.dead
        if self.run_id:
            doc["r"] = self.run_id
        return json.dumps(doc, separators=(",", ":"))

    @staticmethod
    def from_json(text: str) -> RoutingDecision:
        d = json.loads(text)
        formats.ROUTING_DECISION.of(d, "the routing sink's decision log")
        return RoutingDecision(int(d["b"]), str(d["q"]),
                               tuple((str(n), tuple(_decode(c) for c in cs)) for n, cs in d["p"]),
                               str(d.get("d", "")), str(d.get("r", "")))

    @staticmethod
    def dead_letters(text: str) -> int | None:
        """Dead letters a decision's JSON commits (None: the routing sink has none), read
        without loading its committables' classes."""
        d = json.loads(text)
        if not isinstance(d, dict) or not d.get("d"):
            return None
        return sum(int(c.get("rows", 0)) for n, cs in d["p"] if n == d["d"] for c in cs)


def _encode(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        return {"@": f"{cls.__module__}:{cls.__qualname__}",
                **{f.name: _encode(getattr(value, f.name)) for f in dataclasses.fields(value)}}
    if isinstance(value, (tuple, list)):
        return [_encode(v) for v in value]
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, Mapping) and "@" in value:
        module, _, name = str(value["@"]).partition(":")
        if not module.startswith("spark_ext."):
            raise FatalCommitError(f"a routing decision names class {value['@']!r}, not one of spark-ext's: "
                                   "the decision log was edited by hand")
        cls: Any = importlib.import_module(module)
        for part in name.split("."):
            cls = getattr(cls, part)
        return cls(**{k: _decode(v) for k, v in value.items() if k != "@"})
    if isinstance(value, list):
        return tuple(_decode(v) for v in value)
    return value


class DecisionLog(ABC):
    """Where a routing sink's decisions live: durable, fenced by an epoch, one decision
    per (query, batch). Driver only; every call but ``take_over`` runs inside ``connected``."""

    @abstractmethod
    def connected(self) -> AbstractContextManager[Any]:
        """The connection the calls below share, for one take-over, commit or abort."""

    @abstractmethod
    def take_over(self) -> tuple[int, RoutingDecision | None, bool]:
        """A new epoch (no older run can record after this returns), the last decision and
        whether it was finished."""

    @abstractmethod
    def recorded(self, query_id: str, batch_id: int) -> RoutingDecision | None:
        """The decision of this batch of this query, if one was recorded."""

    @abstractmethod
    def epoch(self) -> int | None:
        """The current epoch (None: the log was never taken over)."""

    @abstractmethod
    def record(self, decision: RoutingDecision, epoch: int) -> RoutingDecision:
        """Record ``decision`` if ``epoch`` is still current (else ``FencedError``);
        an earlier decision of the same batch wins over this one and is returned."""

    @abstractmethod
    def predecessors(self, query_id: str) -> list[tuple[str, int, bool]]:
        """Other routing sinks that decided batches of this query (a checkpoint copied or
        spelled differently): (their id, their last decided batch, finished or not)."""

    @abstractmethod
    def finished(self, decision: RoutingDecision) -> bool:
        """Was ``decision`` carried out in every sub-sink?"""

    @abstractmethod
    def mark_finished(self, decision: RoutingDecision) -> None:
        """Note that ``decision`` was carried out in every sub-sink; prune old entries."""


class KeepsDecisions(ABC):
    """A sink connector whose system can hold a composed sink's decisions."""

    @abstractmethod
    def decision_log(self, config: Any, log_id: str) -> DecisionLog | None:
        """The log for the composed sink ``log_id`` in the system ``config`` writes to (None:
        not this system, e.g. a dialect that cannot). Driver; ``config`` has been validated."""


def decision_log(connector: object, config: Any, log_id: str) -> DecisionLog | None:
    """``connector``'s decision log for ``log_id``, if it keeps decisions at all."""
    return connector.decision_log(config, log_id) if isinstance(connector, KeepsDecisions) else None
