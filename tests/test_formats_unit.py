"""Format versions (``spark_ext.formats``): every persisted record names its version, a
record without one reads as version 1, and a newer release's record is refused where it
is read, naming the version found, the versions this release reads, and the fix."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

from spark_ext import formats
from spark_ext.commit import Claim, TaskInfo, read_other
from spark_ext.connectors.jdbc.transactions import read_winners, winners_text
from spark_ext.connectors.jms import source as queue_source
from spark_ext.connectors.jms.sink.entries import JmsDecision, SinkState, Winner
from spark_ext.connectors.kafka.client.transactions import Producer
from spark_ext.connectors.kafka.sink.decision import Decision
from spark_ext.decisions import RoutingDecision
from spark_ext.errors import NewerFormatError, ReleaseMismatchError, UnreadableRecordError
from spark_ext.guarantees import Guarantee
from spark_ext.monitoring import cards
from spark_ext.stream import ProtocolStreamWriter, SinkPlan
from spark_ext.windows import state as window_state
from tests.support.fakes import NullWriter, RecordingTwoPhaseCommitter

NEWER = formats.JDBC_DECISION.current + 1


def _bumped(text: str) -> str:
    doc = json.loads(text)
    assert doc[formats.KEY] == 1, doc  # written with this release's version
    return json.dumps({**doc, formats.KEY: NEWER})


# Each format: a record this release writes, and the reader that must refuse a newer one.
CASES: dict[str, tuple[Callable[[], str], Callable[[str], Any]]] = {
    "jdbc decision": (lambda: winners_text({"sx:s:1:0:0:0.1"}, "run-1"), read_winners),
    "kafka decision": (lambda: Decision(3, "q", None, (Producer("t-0", 1, 0),), "run-1", 10).parts()[0],
                       Decision.decode),
    "queue sink log": (lambda: SinkState(2, 1, JmsDecision(3, "q", (Winner("sx-1", 4),)), False).encode(),
                       SinkState.decode),
    "routing decision": (lambda: RoutingDecision(3, "q", ()).to_json(), RoutingDecision.from_json),
    "windows state": (lambda: window_state.encode_meta(window_state.BucketState(2)),
                      lambda text: window_state.decode_meta(text, 2)),
    "queue source offset": (lambda: json.dumps({formats.KEY: 1, "seq": 3, "ids": [], "carry": []}),
                            lambda text: queue_source._check_format(json.loads(text))),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_record_is_written_with_its_version_and_a_newer_ones_is_refused_naming_the_fix(case):
    write, read = CASES[case]
    written = write()
    read(written)  # this release reads what it writes
    with pytest.raises(NewerFormatError) as refused:
        read(_bumped(written))
    said = str(refused.value)
    assert f"in format version {NEWER}, written by a newer release" in said, said
    assert "reads versions 1 to 1" in said and "on the driver and every executor" in said, said


# The records other sinks read when they look for a query's earlier identities: a newer
# release's names its query, where version 1 keeps it, and a search passes over another's.
OTHERS_READ: dict[str, Callable[[str], str]] = {
    "kafka decision": lambda q: Decision(3, q, None, (Producer("t-0", 1, 0),), "run-1", 10).parts()[0],
    "queue sink log": lambda q: SinkState(2, 1, JmsDecision(3, q, (Winner("sx-1", 4),)), False).encode(),
}


@pytest.mark.parametrize("case", sorted(OTHERS_READ))
def test_a_newer_record_that_other_sinks_read_names_its_query(case):
    newer, read = _bumped(OTHERS_READ[case]("queryA")), CASES[case][1]
    with pytest.raises(NewerFormatError) as refused:
        read(newer)
    assert refused.value.query_id == "queryA"
    assert read_other(lambda: read(newer), "queryB") is None  # another query's: passed over
    with pytest.raises(NewerFormatError):
        read_other(lambda: read(newer), "queryA")  # this query's: refused


def test_a_newer_record_whose_query_is_not_where_version_1_keeps_it_is_refused_by_a_search():
    """A newer release that moved the query breaks the promise: the search cannot tell
    whose the record is, so it refuses rather than pass over this query's."""
    for doc in ({formats.KEY: NEWER, "query": "queryB"}, {formats.KEY: NEWER, "q": 7}):
        with pytest.raises(NewerFormatError) as refused:
            formats.KAFKA_DECISION.of(doc, "here")
        assert refused.value.query_id is None
        with pytest.raises(NewerFormatError):
            read_other(partial(formats.KAFKA_DECISION.of, doc, "here"), "queryA")
    assert formats.QUEUE_LOG.query_of({formats.KEY: NEWER, "d": None}) == ""  # an entry deciding nothing
    assert formats.JDBC_DECISION.query_of({formats.KEY: NEWER, "q": "queryA"}) is None  # none kept


@pytest.mark.parametrize("found", ["x", 0, -1])
def test_a_version_no_release_writes_is_refused_as_edited(found):
    with pytest.raises(NewerFormatError, match="edited by hand"):
        formats.KAFKA_DECISION.read(found, "here")


@pytest.mark.parametrize("row", ['{"v": 1, "r": "run-1"}', '{"v": 1, "winners": ["g1"]}',
                                 '{"v": 1, "w": "g1"}', '"g1"', "7"])
def test_a_decision_row_without_its_winners_is_refused_not_read_as_deciding_nothing(row):
    """Read as no winners, the take-over would roll the decided batch back and the replay,
    finding the batch decided, would write nothing: a batch lost without a word."""
    with pytest.raises(UnreadableRecordError, match=r"without its 'w' field.*changed the format without"):
        read_winners(row, "table t")


def test_records_written_before_versions_were_kept_read_as_version_1():
    assert formats.QUEUE_LOG.of({"s": 1}, "here") == 1 and formats.QUEUE_LOG.of([1, 2], "here") == 1
    assert read_winners('["g1"]') == (frozenset({"g1"}), "")
    old_kafka = json.dumps({"b": 1, "q": "q", "c": None, "w": [["t", 1, 0]]})
    assert Decision.decode(old_kafka) == Decision(1, "q", None, (Producer("t", 1, 0),))


def test_a_card_of_a_newer_release_is_left_to_that_releases_exporter(tmp_path, monkeypatch):
    monkeypatch.setenv(cards.ENV, str(tmp_path))
    cards.write("q-1", "jdbc sink a", 3, {"rows": 5})
    (card,) = cards.read("q-1")
    assert card[formats.KEY] == 1
    (tmp_path / "q-1" / "newer.json").write_text(json.dumps({**card, formats.KEY: NEWER, "sink": "b"}))
    assert [c["sink"] for c in cards.read("q-1")] == ["jdbc sink a"]


def test_an_executor_of_another_release_refuses_to_write_naming_both_releases():
    plan = SinkPlan(Guarantee.EXACTLY_ONCE, NullWriter, RecordingTwoPhaseCommitter, Claim(1), release="0.0.9")
    with pytest.raises(ReleaseMismatchError, match=r"spark-ext 0\.0\.9, and this executor runs spark-ext"):
        ProtocolStreamWriter(plan).write_as(iter([]), TaskInfo("q", 0, 0, 0, 1))
