"""Exception types of spark-ext: one root, specific subclasses.

Every message names the bad value and the fix. Messages never contain credentials:
build them from option *names* and non-secret values only (see ``options.redact``).
"""

from __future__ import annotations


class SparkExtError(Exception):
    """Root of every error raised by spark-ext."""


# --- configuration: raised on the driver at query start -----------------------------


class ConfigurationError(SparkExtError, ValueError):
    """An option is missing, unknown or has a bad value."""


class UnknownConnectorError(ConfigurationError):
    """Option ``connector`` names no connector of this data source."""


class MissingExtraError(ConfigurationError):
    """The connector's client libraries are not installed (its extra, e.g. ``spark-ext[kafka]``)."""


class UnknownGuaranteeError(ConfigurationError):
    """Option ``guarantee`` is not one of exactly_once, at_least_once, none."""


class UnsupportedGuaranteeError(ConfigurationError):
    """The connector cannot give the requested guarantee."""


class MissingOptionError(ConfigurationError):
    """A required option was not given."""


class UnknownOptionError(ConfigurationError):
    """An option the connector does not know (usually a typo)."""


class InvalidOptionError(ConfigurationError):
    """An option has a value of the wrong type or outside its range."""


class UnsupportedReleaseError(ConfigurationError):
    """The running PySpark release lacks an API the requested feature needs."""


class NewerFormatError(SparkExtError):
    """A record was written by a newer release of spark-ext, in a format this one cannot
    read (``spark_ext.formats``). Not a ``ValueError``: code that skips records it cannot
    parse as not its own must not skip this one. ``query_id``: the query the record
    belongs to, where its format keeps that in every version ("": none; None: not known)."""

    def __init__(self, message: str, query_id: str | None = None) -> None:
        super().__init__(message)
        self.query_id = query_id


class UnreadableRecordError(SparkExtError):
    """A persisted record of a version this release reads lacks what that version holds:
    edited by hand, or written by a build that changed the format without raising its
    version. Refused rather than read as empty: an empty decision would roll back a
    decided batch. Not a ``ValueError``, for the same reason as ``NewerFormatError``."""


class ReleaseMismatchError(ConfigurationError):
    """The driver and an executor run different releases of spark-ext."""


# --- external systems ------------------------------------------------------------------


class ConnectorError(SparkExtError):
    """The external system (broker, database) refused or could not be reached."""


class UnknownTopicError(ConnectorError):
    """A topic or partition named in the options does not exist on the broker."""


class AuthenticationError(ConnectorError):
    """The external system refused the credentials, or the TLS handshake failed (an
    untrusted certificate, a host name that does not match). Retrying cannot help."""


class UnwritableRowError(SparkExtError):
    """A row the sink's writer schema refuses (a null where it takes none, an unknown enum symbol)."""


class UndecodableRecordError(ConnectorError):
    """A record whose key or value cannot be read in the format the query asked for."""


class DataLossError(ConnectorError):
    """Records a query was due to read no longer exist (retention, topic recreated)."""


# --- the commit protocol -----------------------------------------------------------------
# Sorted as Flink's sinks sort them: a retriable error may succeed when tried again,
# a known-fatal one never will, an unknown one is treated as fatal but reported as such.


class CommitError(SparkExtError):
    """Committing or aborting a batch's prepared output failed."""


class RetriableCommitError(CommitError):
    """A transient failure (timeout, connection reset): the committer may try again."""


class FatalCommitError(CommitError):
    """A known failure that retrying cannot fix (e.g. transaction aborted by timeout)."""


class RetriesExhaustedError(FatalCommitError):
    """A retriable failure outlasted every retry; the last one is the cause. The query
    fails; a restart resolves what the batch left in doubt."""


class FencedError(FatalCommitError):
    """A newer run or task attempt owns the sink; this one must stop (zombie fencing)."""


class PredecessorSinkError(FatalCommitError):
    """The query (same Spark query id) ran before as another sink, which decided this
    batch or left transactions in doubt: its checkpoint was copied or spelled differently,
    or ``sinkId`` / ``transactionalIdPrefix`` changed. Carrying on as a new sink would write
    the batch twice; the message names the old sink and the option that continues it."""


class SecondWriteError(FatalCommitError):
    """A batch already decided in this very run was written again under the same sink id:
    two writes of one ``foreachBatch`` function share ``sinkId`` / ``transactionalIdPrefix``,
    and the second would pass for a replay and write nothing."""


class UnknownCommitError(CommitError):
    """An unexpected failure during commit; treated as fatal."""
