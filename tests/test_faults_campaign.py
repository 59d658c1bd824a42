"""The fault campaign (``make faults``) on the real services: single faults found by it,
kept as regression tests, and a short seeded campaign over every pipeline."""

from __future__ import annotations

import pytest

from bench.faults.campaign import Episodes, Fault
from bench.faults.pipelines import PIPELINES, PipelineRun, count

pytestmark = [pytest.mark.spark, pytest.mark.services]


def _episodes(name: str, tmp_path, ids: int = 2400) -> Episodes:
    return Episodes(PipelineRun(PIPELINES[name], tmp_path, ids, 40), lambda msg: None)


def _assert_exactly_once(ep: Episodes) -> None:
    ep.final()
    got = ep.run.committed()
    assert count(got, ep.run.expected) == (0, 0)
    assert len(got) == len(ep.run.expected) and ep.run.in_doubt() == 0
    ep.run.cleanup()


def test_a_postgres_restart_under_a_running_query_is_ridden_out(services, tmp_path):
    """PostgreSQL restarts while Kafka -> PostgreSQL (2PC) runs, after the run committed
    two batches: the query reconnects and goes on (it used to fail at the next batch's
    plan with "Connection refused"), and every row lands once."""
    ep = _episodes("kafka_to_jdbc", tmp_path)
    ep(Fault("restart", "postgres", 2))
    assert ep.injected == 2  # the restart, then the kill that ends the episode: it was still running
    assert ep.failures == []
    _assert_exactly_once(ep)
