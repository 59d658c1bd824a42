"""Kafka error codes, classified in one place through kafka-python's error classes.

kafka-python marks each broker error ``retriable`` (worth sending again: a coordinator
or leader moving, a timeout) and ``invalid_metadata`` (the leader or the partition map
changed: look the leader up again first). On top of that the transactional client needs
to tell two non-retriable kinds apart: *fenced* (a newer producer owns the id, or the
transaction was aborted by its timeout) and *not open* (the transaction is no longer in
a state that accepts the request).
"""

from __future__ import annotations

from kafka import errors as ke

OK = 0
FENCED: tuple[type[ke.BrokerResponseError], ...] = (
    ke.ProducerFencedError, ke.InvalidProducerEpochError, ke.InvalidProducerIdMappingError)
COORDINATOR_MOVED: tuple[type[ke.BrokerResponseError], ...] = (
    ke.NotCoordinatorError, ke.CoordinatorNotAvailableError)


def error_class(code: int) -> type[ke.BrokerResponseError]:
    return ke.for_code(code)


def error_name(code: int) -> str:
    return str(error_class(code).__name__)


def is_retriable(code: int) -> bool:
    """Sending the same request again may succeed (after a short wait)."""
    return code != OK and bool(error_class(code).retriable)


def leader_moved(code: int) -> bool:
    """The partition's leader must be looked up again before the request is sent again."""
    return code != OK and bool(getattr(error_class(code), "invalid_metadata", False))


def coordinator_moved(code: int) -> bool:
    """The transaction or group coordinator must be looked up again."""
    return code != OK and issubclass(error_class(code), COORDINATOR_MOVED)


def is_fenced(code: int) -> bool:
    return code != OK and issubclass(error_class(code), FENCED)


def is_not_open(code: int) -> bool:
    return code != OK and issubclass(error_class(code), ke.InvalidTxnStateError)


def matches(code: int, cls: type[ke.BrokerResponseError]) -> bool:
    """``code`` is kafka-python's ``cls`` (for the few codes a caller expects by name)."""
    return code != OK and issubclass(error_class(code), cls)
