"""The format versions of what spark-ext persists, named in one place.

A streaming query outlives releases of spark-ext: what one release persisted (a sink's
decision, a source's offsets, window state) the next reads, often for a batch decided
and not yet committed when the query was stopped for the upgrade. So each persisted
record names its format's version. A release reads every version up to its own, and
refuses a newer one where it is first read (at the query's start: a take-over, an
offset Spark hands back) rather than guess at it: a decided batch misread is a batch
lost or written twice.

A record written without a version (before versions were kept) is version 1. A release
that changes a format raises its ``current`` here and keeps reading the older versions;
the compatibility corpus under ``tests/`` holds a recorded state of each version.

A sink's record that other sinks read when they look for their query's earlier
identities (the Kafka sink's kept decision, the queue sink's log entry) keeps, in every
version, version 1's framing (how it is split, compressed and laid in offset metadata or
message properties) and its query where version 1 holds it (``query_at``): an older
release then passes over a newer release's record of another query, where refusing
would stop every query of the older release on a system the two share.

Not versioned here: the Kafka source's offsets, which keep Spark's own Kafka source's
JSON so that a query can move between the two; the prepared transactions' global ids
and transactional ids, whose prefix (``sx:``, the sink's id) is their version.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spark_ext.errors import NewerFormatError, UnreadableRecordError
from spark_ext.release import VERSION

#: The key holding the version in every JSON record below.
KEY = "v"


@dataclass(frozen=True)
class Format:
    """One persisted format: ``what`` names it in messages; ``current`` is the version
    this release writes, and the newest it reads."""

    what: str
    current: int = 1
    #: The path of keys and indexes to the record's query id, kept in every version (empty:
    #: not kept, for a record no other sink reads).
    query_at: tuple[str | int, ...] = ()

    def read(self, found: Any, where: str, query_id: str | None = None) -> int:
        """The version of a record whose ``KEY`` holds ``found`` (None: not kept, version 1),
        read at ``where``; raises ``NewerFormatError`` for a version newer than ``current``,
        carrying ``query_id``, the record's query."""
        try:
            version = 1 if found is None else int(found)
        except (TypeError, ValueError):
            version = 0
        if version < 1:
            raise NewerFormatError(
                f"{where} holds {self.what} with format version {found!r}, which no release of spark-ext "
                "writes: the record was edited by hand; restore it, or finish the batch with the release "
                "that wrote it")
        if version > self.current:
            raise NewerFormatError(
                f"{where} holds {self.what} in format version {version}, written by a newer release of "
                f"spark-ext; this release ({VERSION}) reads versions 1 to {self.current}. Run the query "
                "with the release that wrote it (or a newer one) on the driver and every executor; to go "
                "back to this release, stop the query after a batch has committed with the newer one and "
                "the sink shows nothing in doubt (spark-ext status)", query_id)
        return version

    def of(self, doc: Any, where: str) -> int:
        """``read`` of a JSON object's ``KEY`` (any other JSON value: version 1)."""
        found = doc.get(KEY) if isinstance(doc, dict) else None
        return self.read(found, where, self.query_of(doc) if found is not None else None)

    def query_of(self, doc: Any) -> str | None:
        """The query id at ``query_at`` in ``doc`` of any version: "" where the path meets a
        null (the record names no query), None where it is not there."""
        if not self.query_at:
            return None
        value = doc
        for step in self.query_at:
            if value is None:
                return ""
            if isinstance(step, str) and isinstance(value, dict) and step in value:
                value = value[step]
            elif isinstance(step, int) and isinstance(value, list) and step < len(value):
                value = value[step]
            else:
                return None
        return value if isinstance(value, str) else "" if value is None else None

    def need(self, doc: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
        """``doc[key]``, which every version of this format holds as a ``kind``; raises
        ``UnreadableRecordError`` naming the record and the fix when it is not there."""
        value = doc.get(key)
        if not isinstance(value, kind):
            raise UnreadableRecordError(
                f"{where} holds {self.what} in format version {doc.get(KEY, 1)} without its {key!r} "
                f"field ({type(value).__name__} found): it was edited by hand, or written by a build of "
                "spark-ext that changed the format without raising its version. Restore the record, or "
                "finish the batch with the build that wrote it")
        return value


JDBC_DECISION = Format("a PostgreSQL or MariaDB sink's decision")
KAFKA_DECISION = Format("the Kafka sink's decision", query_at=("q",))
QUEUE_LOG = Format("the queue sink's log entry", query_at=("d", 1))
ROUTING_DECISION = Format("the routing sink's decision")
QUEUE_OFFSET = Format("the queue source's offset")
WINDOW_STATE = Format("the windows' state")
METRICS_CARD = Format("a sink's metrics card")

ALL = (JDBC_DECISION, KAFKA_DECISION, QUEUE_LOG, ROUTING_DECISION, QUEUE_OFFSET, WINDOW_STATE, METRICS_CARD)
