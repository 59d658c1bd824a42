"""The payments demo's progress: a live ``rich`` table on a terminal, the plain line
(whose format is relied on) when stdout is not one (pure logic; the demo itself runs in
test_payments_demo.py)."""

from __future__ import annotations

import io
from typing import Any

QUERIES: dict[str, dict[str, Any]] = {"payments": {"batch": 12, "rows_per_s": 812.4}}
READ = {"payments": 8800}


def _demo() -> Any:
    """Imported per test: the compat run collects every test module from a staged copy of
    tests/ without the examples (it runs only the compat-marked tests)."""
    from examples.payments import demo
    return demo


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_not_a_terminal_prints_the_plain_line_every_five_seconds():
    out = io.StringIO()
    p = _demo().Progress(out)
    p.show(2, QUERIES, READ, 10000, 801.6)
    p.show(2, QUERIES, READ, 10000, 801.6)  # within 5 s: nothing more
    p.done("kill -9 of the job's process group (...); restarting it")
    p.close()
    assert out.getvalue().splitlines() == [
        "run 2 | batch 12 | 802 rows/s | lag 1,200 | sent 10,000",
        "kill -9 of the job's process group (...); restarting it",
    ]


def test_a_terminal_gets_a_live_table_per_query_and_the_lines_that_stay():
    out = _Terminal()
    p = _demo().Progress(out)
    p.show(1, QUERIES, READ, 10000, 801.6)
    p.done("the query has read all 10,000 events; stopping the job (SIGTERM)")
    p.close()
    text = out.getvalue()
    assert "run 1 | batches" not in text  # the table, not the plain line
    for cell in ("payments demo, run 1", "rows/s", "lag", "last commit", "payments", "812", "1,200",
                 "0 s ago", "sent 10,000", "the query has read all 10,000 events"):
        assert cell in text, cell
