"""The Kafka client's Metadata call when a broker answers listing no broker (pure client
logic against a scripted endpoint; see tests/support/kafka_fake.py for when a real broker
does this)."""

from __future__ import annotations

import pytest

from spark_ext.connectors.kafka.client.connection import metadata
from spark_ext.connectors.kafka.client.transactions import KafkaTxnClient
from tests.support.kafka_fake import metadata_endpoint


def test_an_answer_listing_no_broker_is_asked_again():
    with metadata_endpoint(empty_answers=3) as (bootstrap, given):
        md = metadata(bootstrap, [], 5.0)
    assert [b.node_id for b in md.brokers] == [1]
    assert given == [0, 0, 0, 1]


def test_the_transactional_client_finds_a_broker_after_answers_listing_none():
    """``any_broker`` took the first listed broker: an empty list ended the query with an
    IndexError (seen in a seeded campaign after Kafka was frozen for 20 s)."""
    with metadata_endpoint(empty_answers=2) as (bootstrap, given):
        client = KafkaTxnClient(bootstrap, 5.0)
        try:
            assert client.any_broker() is not None
        finally:
            client.close()
    assert given[:3] == [0, 0, 1]


def test_brokers_that_never_list_a_broker_give_a_connection_error_in_time():
    """Still none within the timeout: an ``OSError`` (retried by callers that retry lost
    connections) naming the cause, not an empty answer callers would read as 'nothing'."""
    with metadata_endpoint(empty_answers=10**6) as (bootstrap, given), \
            pytest.raises(ConnectionError, match="listed no broker"):
        metadata(bootstrap, [], 1.0)
    assert len(given) > 1
