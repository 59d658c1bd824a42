"""The run that decided a batch, kept in each sink's decision record (pure codecs): read
back where written, and records written without one still read as before."""

from __future__ import annotations

import json

import pytest

from spark_ext import compat
from spark_ext.connectors.jdbc.transactions import read_winners, winners_text
from spark_ext.connectors.jms.sink.entries import JmsDecision, SinkState, Winner
from spark_ext.decisions import RoutingDecision

RUN = "0b8e4f7c-9d5e-4c1a-8f2e-3d6b7a9c1e20"


@pytest.mark.parametrize("run", ["", RUN])
def test_a_queue_sinks_log_entry_keeps_the_run(run):
    entry = SinkState(4, 2, JmsDecision(9, "q", (Winner("sx-a-1", 3), Winner("sx-a-2", 4)), run), False, "n")
    assert SinkState.decode(entry.encode()) == entry


def test_a_queue_sinks_entry_written_before_runs_were_kept_reads_with_none():
    old = json.dumps({"s": 1, "e": 1, "f": True, "n": "", "d": [3, "q", "sx-", [["a", 2]]]})
    assert SinkState.decode(old).decision == JmsDecision(3, "q", (Winner("sx-a", 2),), "")


@pytest.mark.parametrize("run", ["", RUN])
def test_a_jdbc_decision_rows_winners_keep_the_run_and_old_rows_read_as_before(run):
    text = winners_text({"sx:s:1:0:1:0.2", "sx:s:1:0:0:0.1"}, run)
    assert read_winners(text) == (frozenset({"sx:s:1:0:1:0.2", "sx:s:1:0:0:0.1"}), run)
    assert read_winners('["g1"]') == (frozenset({"g1"}), "") and read_winners(None) == (frozenset(), "")
    routing = RoutingDecision(0, "q", (), run_id=run).to_json()  # a routing sink's row: no ids of its own
    assert read_winners(routing) == (frozenset(), "")


def test_a_routing_decision_keeps_the_run():
    d = RoutingDecision(5, "q", (), "dead", RUN)
    assert RoutingDecision.from_json(d.to_json()) == d
    assert RoutingDecision.from_json(RoutingDecision(5, "q", ()).to_json()).run_id == ""


@pytest.mark.parametrize("group,description,run", [
    (RUN, f"\nid = 1044fccb-c94b-4d07-aac0-5f3c72dbef29\nrunId = {RUN}\nbatch = 0", RUN),
    ("nightly", "my job", ""),                         # a job group the user set
    (RUN, "my own description", ""),                   # a description the user set
    ("other", f"runId = {RUN}", ""),
    (None, None, ""),                                  # no stream runs this task
])
def test_the_run_is_taken_only_from_a_streaming_runs_own_group_and_description(group, description, run):
    assert compat.run_id_of(group, description) == run
