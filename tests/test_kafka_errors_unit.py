"""Kafka error codes are sorted once, by kafka-python's error classes (pure logic)."""

from __future__ import annotations

import pytest
from kafka import errors as ke

from spark_ext.connectors.kafka.client import errors


@pytest.mark.parametrize("cls", [
    ke.NotLeaderForPartitionError, ke.LeaderNotAvailableError, ke.RequestTimedOutError,
    ke.NotEnoughReplicasError, ke.CoordinatorLoadInProgressError, ke.NotCoordinatorError,
    ke.ConcurrentTransactionsError, ke.UnstableOffsetCommitError, ke.KafkaStorageError,
])
def test_transient_errors_are_retried(cls):
    assert errors.is_retriable(cls.errno) and not errors.is_fenced(cls.errno)


@pytest.mark.parametrize("cls", [ke.ProducerFencedError, ke.InvalidProducerEpochError,
                                 ke.InvalidProducerIdMappingError])
def test_fencing_errors_are_fenced_and_never_retried(cls):
    assert errors.is_fenced(cls.errno) and not errors.is_retriable(cls.errno)


def test_the_other_kinds():
    assert errors.is_not_open(ke.InvalidTxnStateError.errno)
    assert errors.coordinator_moved(ke.NotCoordinatorError.errno)
    assert not errors.coordinator_moved(ke.CoordinatorLoadInProgressError.errno)  # same coordinator
    assert errors.leader_moved(ke.NotLeaderForPartitionError.errno)
    assert not errors.leader_moved(ke.RequestTimedOutError.errno)
    assert not errors.is_retriable(ke.MessageSizeTooLargeError.errno)
    assert errors.matches(ke.DuplicateSequenceNumberError.errno, ke.DuplicateSequenceNumberError)
    assert errors.error_name(ke.ProducerFencedError.errno) == "ProducerFencedError"
    assert not any(f(errors.OK) for f in (errors.is_retriable, errors.is_fenced, errors.is_not_open,
                                          errors.leader_moved, errors.coordinator_moved))
