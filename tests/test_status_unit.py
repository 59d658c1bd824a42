"""``spark-ext status``: the table, the JSON document's keys, and errors that never show a
password (pure logic; the real sinks are in test_status.py)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from spark_ext import cli, registry
from spark_ext.errors import ConnectorError, SparkExtError
from spark_ext.status import JSON_KEYS, LAG_KEYS, SinkStatus, SourceLag, render, to_json

DECIDED = SinkStatus(sink="ck-1a2b", target="public.ledger", batch=7, query="q-1", finished=False,
                     in_doubt=2, epoch=9, in_doubt_ids=("sx:ck-1a2b:9:7:0:0", "sx:ck-1a2b:9:7:1:0"))
FRESH = SinkStatus(sink="ck-3c4d", target=None, batch=None, query=None, finished=None, in_doubt=0, epoch=None)


def test_json_has_the_documented_keys_in_order_and_nulls_for_unknowns():
    doc = json.loads(to_json("jdbc", [DECIDED, FRESH]))
    assert list(doc) == ["connector", "sinks"] and doc["connector"] == "jdbc"
    assert [list(s) for s in doc["sinks"]] == [list(JSON_KEYS)] * 2
    assert JSON_KEYS == ("sink", "target", "batch", "query", "finished", "in_doubt", "epoch", "in_doubt_ids",
                         "dead_letters")
    assert doc["sinks"][0] == {"sink": "ck-1a2b", "target": "public.ledger", "batch": 7, "query": "q-1",
                               "finished": False, "in_doubt": 2, "epoch": 9,
                               "in_doubt_ids": ["sx:ck-1a2b:9:7:0:0", "sx:ck-1a2b:9:7:1:0"],
                               "dead_letters": None}
    assert doc["sinks"][1] == {"sink": "ck-3c4d", "target": None, "batch": None, "query": None,
                               "finished": None, "in_doubt": 0, "epoch": None, "in_doubt_ids": [],
                               "dead_letters": None}


def test_the_table_shows_one_row_per_sink_with_every_column():
    out = io.StringIO()
    render("jdbc", [DECIDED, FRESH], as_json=False, out=out)
    text = out.getvalue()
    assert "spark-ext status jdbc" in text
    for header in ("sink", "table/topic", "last", "batch", "query", "finished", "in", "doubt", "epoch"):
        assert header in text
    row = next(line for line in text.splitlines() if "ck-1a2b" in line)
    assert all(cell in row for cell in (" 7 ", "q-1", " no ", " 2 ", " 9 "))
    fresh = next(line for line in text.splitlines() if "ck-3c4d" in line)
    assert fresh.count(" - ") >= 4 and " 0 " in fresh
    assert "\x1b[" not in text  # not a terminal: no colour codes


def test_no_sinks_says_so():
    out = io.StringIO()
    render("kafka", [], as_json=False, out=out)
    assert out.getvalue().strip() == "no kafka sinks found"


def test_the_cli_prints_json_from_the_connectors_rows(monkeypatch, capsys):
    from spark_ext.connectors.jdbc import doctor

    seen = []

    def fake(url: str, schema: str, sink: str | None) -> list[SinkStatus]:
        seen.append((url, schema, sink))
        return [DECIDED]

    monkeypatch.setattr(doctor, "sink_status", fake)
    url = "postgresql+psycopg2://spark@db.example:5432/app"
    assert cli.main(["status", "jdbc", "--url", url, "--schema", "ops", "--json"]) == 0
    assert seen == [(url, "ops", None)]
    assert json.loads(capsys.readouterr().out)["sinks"][0]["batch"] == 7


def test_a_failure_is_one_line_without_the_password(capsys):
    # Port 1 refuses at once; the password must not appear in what is printed.
    url = "postgresql+psycopg2://spark:S3cret-pw@127.0.0.1:1/app"
    assert cli.main(["status", "jdbc", "--url", url]) == 1
    out = capsys.readouterr()
    assert out.out == "" and out.err.startswith("error: ") and len(out.err.strip().splitlines()) == 1
    assert "S3cret-pw" not in out.err


def test_a_connector_error_is_reported_with_exit_status_1(monkeypatch, capsys):
    from spark_ext.connectors.kafka import doctor

    def fail(cfg: object) -> SinkStatus:
        raise ConnectorError("cannot reach the cluster")

    monkeypatch.setattr(doctor, "sink_status", fail)
    args = ["status", "kafka", "--bootstrap", "localhost:1", "--prefix", "p", "--topic", "t"]
    assert cli.main(args) == 1
    assert capsys.readouterr().err == "error: cannot reach the cluster\n"


def test_unknown_connectors_and_doctors_without_status_are_refused(monkeypatch, capsys):
    assert cli.main(["status", "nosuch"]) == 2
    monkeypatch.setitem(registry._extra[registry.DOCTORS], "bare", "tests.test_status_unit:_bare_doctor")
    assert cli.main(["status", "bare"]) == 2
    assert "the bare doctor has no status command" in capsys.readouterr().err
    assert cli.main(["doctor", "bare", "x"]) == 5  # the doctor itself still runs


def _bare_doctor(argv: list[str]) -> int:
    return 5


def test_the_table_counts_dead_letters_only_where_a_sink_has_them():
    plain, out = io.StringIO(), io.StringIO()
    render("jdbc", [DECIDED, FRESH], as_json=False, out=plain)
    assert "dead" not in plain.getvalue()
    routed = SinkStatus(sink="pay", target="routing", batch=12, query="q-2", finished=True, in_doubt=0,
                        epoch=3, dead_letters=4)
    render("jdbc", [DECIDED, routed], as_json=False, out=out)
    assert "dead" in out.getvalue() and "letters" in out.getvalue()
    row = next(line for line in out.getvalue().splitlines() if "pay" in line)
    assert row.rstrip(" │|").endswith(" 4")


def _checkpoint(root: Path, batches: dict[int, list[str]], committed: list[int]) -> str:
    """A query checkpoint's offset and commit logs as Spark writes them."""
    (root / "offsets").mkdir(parents=True)
    (root / "commits").mkdir()
    for n, sources in batches.items():
        (root / "offsets" / str(n)).write_text("\n".join(["v1", '{"batchWatermarkMs":0}', *sources]))
    for n in committed:
        (root / "commits" / str(n)).write_text('v1\n{"nextBatchWatermarkMs":0}')
        (root / "commits" / f".{n}.crc").write_text("")
    return str(root)


def test_a_checkpoints_committed_ends_are_the_last_committed_batchs_offsets(tmp_path):
    from spark_ext.status.checkpoint import committed_offsets, kafka_offsets

    ck = _checkpoint(tmp_path / "ck", {0: ['{"t":{"0":5,"1":7}}', '{"seq":1,"ids":[]}'],
                                       1: ['{"t":{"0":9,"1":7}}', "-"], 2: ['{"t":{"0":12,"1":8}}', "-"]},
                     committed=[0, 1])
    got = committed_offsets(ck)
    assert got is not None
    batch, sources = got
    assert batch == 1 and sources == [{"t": {"0": 9, "1": 7}}, None]  # batch 2 planned, not committed
    assert kafka_offsets(sources[0]) == {("t", 0): 9, ("t", 1): 7}
    assert kafka_offsets({"seq": 1, "ids": []}) is None and kafka_offsets(None) is None
    assert committed_offsets(_checkpoint(tmp_path / "fresh", {0: ['{"t":{"0":1}}']}, committed=[])) is None
    assert committed_offsets(str(tmp_path / "not-yet")) is None  # a sidecar started before its query
    (tmp_path / "file").write_text("")
    with pytest.raises(SparkExtError, match="is not a directory"):
        committed_offsets(str(tmp_path / "file"))


def test_lag_rows_render_as_a_table_and_json_key_lag():
    lag = [SourceLag(0, "payments", 0, 90, 100), SourceLag(0, "payments", 1, 50, 50)]
    doc = json.loads(to_json("kafka", [], lag))
    assert list(doc) == ["connector", "sinks", "lag"]
    assert [list(r) for r in doc["lag"]] == [list(LAG_KEYS)] * 2
    assert doc["lag"][0] == {"source": 0, "topic": "payments", "partition": 0, "end": 90, "latest": 100,
                             "lag": 10}
    out = io.StringIO()
    render("kafka", [], as_json=False, out=out, lag=lag)
    text = out.getvalue()
    assert "no kafka sinks" not in text and "source lag" in text
    assert any(" 90 " in line and " 100 " in line and " 10 " in line for line in text.splitlines())


def test_kafka_status_needs_a_sink_or_a_checkpoint(capsys):
    assert cli.main(["status", "kafka", "--bootstrap", "localhost:1"]) == 1
    assert "--checkpoint" in capsys.readouterr().err
    assert cli.main(["status", "kafka", "--bootstrap", "localhost:1", "--prefix", "p"]) == 1
    assert "both --prefix and --topic" in capsys.readouterr().err
