"""The compatibility corpus, read by today's code: each state an earlier (or this) release
recorded at its hardest moment (``tests/corpus/<case>/v<versions>/``, made by
``tests/corpus/record.py``) is restored onto the real services, and the query is restarted
from the recorded checkpoint to its end: every expected id (window) is in the target
exactly once, and nothing is left in doubt (0 lost, 0 twice, 0 in doubt).

A format changed without a new version fails here: the recorded records no longer read
as they did. A version raised without a recording fails ``test_every_current_format_
version_has_a_recording``.
"""

from __future__ import annotations

import fcntl
import json
import re
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException

from tests.corpus import record as corpus

pytestmark = [pytest.mark.spark, pytest.mark.services]

RECORDED = [d for case in corpus.CASES.values() for d in corpus.case_dirs(case)]


def test_every_current_format_version_has_a_recording() -> None:
    missing = [f"{c.name}/{c.version}" for c in corpus.CASES.values()
               if not (corpus.HERE / c.name / c.version).is_dir()]
    assert not missing, (f"no recorded state for {missing}: a format version was raised in "
                         "spark_ext/formats.py; record it: .venv/bin/python -m tests.corpus.record <case>")


@pytest.mark.parametrize("case_dir", RECORDED, ids=[f"{d.parent.name}-{d.name}" for d in RECORDED])
def test_a_recorded_state_is_finished_exactly_once_by_todays_code(services: Any, spark: Any, tmp_path: Path,
                                                                 case_dir: Path) -> None:
    del services  # fails, never skips, without the services
    case = corpus.CASES[case_dir.parent.name]
    e = corpus.env()
    src, ckpt = tmp_path / "src", tmp_path / "ckpt"
    corpus.restore_inputs(case_dir, src)
    corpus.restore_checkpoint(case_dir / "checkpoint", src, ckpt)
    started = time.monotonic()
    with _alone(case), _cleaned(case, e):
        corpus.RESTORERS[case.kind](case, e, case_dir)
        _check_restored(case, e)
        q = corpus.start_query(spark, case, src, ckpt, e)
        try:
            assert q.awaitTermination(240), f"the query from {case_dir} did not end in 240 s"
        finally:
            q.stop()
        assert q.exception() is None, f"the query from {case_dir} failed: {q.exception()}"
        _check_exactly_once(case, e, case_dir)
    print(f"{case_dir.parent.name}/{case_dir.name}: {time.monotonic() - started:.1f} s")


# A JSON record's format version as the recordings hold it: plain in SQL, escaped in queues.json.
_VERSION = re.compile(r'(\\?"v\\?": ?)1([,}])')
_STATE_FILES = ("postgres.sql", "mariadb.sql", "queues.json")


@pytest.mark.parametrize("case_dir", RECORDED, ids=[f"{d.parent.name}-{d.name}" for d in RECORDED])
def test_a_recorded_state_one_version_ahead_is_refused_at_start_and_left_in_doubt(
        services: Any, spark: Any, tmp_path: Path, case_dir: Path) -> None:
    """The reverse of an upgrade: the same state with every decision and log entry one format
    version ahead of this release (as a newer release would have left it). The query fails as
    it starts, naming the versions, and touches nothing: the committed rows stay as they were,
    and what was in doubt stays in doubt for the newer release to finish."""
    del services
    case = corpus.CASES[case_dir.parent.name]
    ahead = tmp_path / "ahead"
    shutil.copytree(case_dir, ahead)
    bumped = 0
    for name in _STATE_FILES:
        f = ahead / name
        if f.exists():
            text, n = _VERSION.subn(r"\g<1>2\g<2>", f.read_text())
            f.write_text(text)
            bumped += n
    assert bumped, f"no format version found to raise in {case_dir}"
    e = corpus.env()
    src, ckpt = tmp_path / "src", tmp_path / "ckpt"
    corpus.restore_inputs(ahead, src)
    corpus.restore_checkpoint(ahead / "checkpoint", src, ckpt)
    with _alone(case), _cleaned(case, e):
        corpus.RESTORERS[case.kind](case, e, ahead)
        before = _state(case, e)
        q = corpus.start_query(spark, case, src, ckpt, e)
        try:
            with pytest.raises(StreamingQueryException) as failed:
                q.awaitTermination(240)
        finally:
            q.stop()
        said = str(failed.value)
        assert "written by a newer release" in said and "reads versions 1 to 1" in said, said
        assert _state(case, e) == before  # nothing committed, nothing rolled back


def _state(case: corpus.Case, e: dict[str, str]) -> tuple[Any, ...]:
    """What a refusal must leave as it was: the committed rows and what is in doubt."""
    if case.kind == "mariadb":
        return sorted(map(tuple, corpus.my_target(case, e))), sorted(corpus.my_in_doubt(case, e))
    if case.kind == "jms":
        return (sorted(corpus.jms_staged(case, e)),)
    if case.kind == "routing":
        table, queue = corpus.part(case, "postgres"), corpus.part(case, "jms")
        return (sorted(map(tuple, corpus.pg_target(table, e))), sorted(corpus.pg_prepared(case, e)),
                sorted(corpus.jms_staged(queue, e)))
    return sorted(map(tuple, corpus.pg_target(case, e))), sorted(corpus.pg_prepared(case, e))


@contextmanager
def _alone(case: corpus.Case) -> Iterator[None]:
    """One recorded version of a case at a time: the versions share the case's fixed names,
    and pytest-xdist may deal two of them to two workers."""
    with open(Path(tempfile.gettempdir()) / f"spark-ext-corpus-{case.name}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


@contextmanager
def _cleaned(case: corpus.Case, e: dict[str, str]) -> Iterator[None]:
    """Whatever the outcome, the case's tables, rows, prepared transactions and queues go."""
    try:
        yield
    finally:
        corpus.CLEANERS[case.kind](case, e)


def _check_restored(case: corpus.Case, e: dict[str, str]) -> None:
    """The restore put the hardest moment back: something in doubt."""
    if case.kind == "mariadb":
        assert corpus.my_in_doubt(case, e), "the restore prepared no XA transaction"
    elif case.kind == "jms":
        assert corpus.jms_staged(case, e), "the restore staged no message"
    elif case.kind == "routing":
        assert corpus.pg_prepared(case, e), "the restore prepared no transaction"
        assert corpus.jms_staged(corpus.part(case, "jms"), e), "the restore staged no message"
    else:
        assert corpus.pg_prepared(case, e), "the restore prepared no transaction"


def _check_exactly_once(case: corpus.Case, e: dict[str, str], case_dir: Path) -> None:
    inputs = [[json.loads(line) for line in f.read_text().splitlines()]
              for f in sorted((case_dir / "input").iterdir())]
    if case.kind == "windows":
        want = corpus.expected_windows(inputs)
        windows = [(r[0], _seconds(r[1]), _seconds(r[2]), *(int(x) for x in r[3:]))
                   for r in corpus.pg_target(case, e) if r[0] != "~flush"]
        doubled = [k for k, n in Counter(r[:3] for r in windows).items() if n > 1]
        assert not doubled, f"windows written twice: {doubled}"
        assert {r[:3]: r[3:] for r in windows} == want, "windows lost or wrong"
        assert corpus.pg_prepared(case, e) == []
        return
    ids = sorted(r["id"] for rows in inputs for r in rows)
    if case.kind == "postgres":
        got, doubt = [int(r[0]) for r in corpus.pg_target(case, e)], corpus.pg_prepared(case, e)
    elif case.kind == "mariadb":
        got, doubt = [int(r[0]) for r in corpus.my_target(case, e)], corpus.my_in_doubt(case, e)
    elif case.kind == "jms":
        got = [int(m[1]) for m in corpus.drain(e, case.target)]
        doubt = corpus.jms_staged(case, e)
    else:  # routing: even ids in the table, odd ones in the queue
        table, queue = corpus.part(case, "postgres"), corpus.part(case, "jms")
        rows = [int(r[0]) for r in corpus.pg_target(table, e)]
        messages = [int(m[1]) for m in corpus.drain(e, queue.target)]
        assert all(i % 2 == 0 for i in rows) and all(i % 2 == 1 for i in messages), (rows, messages)
        got, doubt = rows + messages, corpus.pg_prepared(case, e) + corpus.jms_staged(queue, e)
    counts = Counter(got)
    lost, twice = sorted(set(ids) - set(counts)), sorted(i for i, n in counts.items() if n > 1)
    assert (lost, twice, doubt) == ([], [], []), f"lost {lost}, twice {twice}, in doubt {doubt}"
    assert sorted(got) == ids


def _seconds(v: Any) -> int:
    if isinstance(v, datetime):
        return int((v if v.tzinfo else v.replace(tzinfo=UTC)).timestamp())
    return int(v)
