"""Which hits an armed failpoint fires at (pure logic; the kill itself is tested by every crash test)."""

from __future__ import annotations

import pytest

from spark_ext.failpoints import armed


@pytest.mark.parametrize(("spec", "batch", "rows", "fires"), [
    ("jdbc.after_decision", 0, 10, True),
    ("jdbc.after_decision", 0, 0, False),  # an empty batch proves nothing: wait for data
    ("jdbc.after_decision", None, None, True),  # the caller does not know: fire
    ("jdbc.after_decision@2", 1, 10, False),
    ("jdbc.after_decision@2", 2, 0, True),  # a named batch fires, data or not
    ("other,jdbc.after_decision@2", 2, 5, True),
    ("jdbc.after_decision_x", 0, 10, False),
    ("", 0, 10, False),
])
def test_armed(spec, batch, rows, fires):
    assert armed("jdbc.after_decision", batch, rows, spec) is fires


def test_the_suite_and_the_short_campaign_crash_at_every_failpoint_in_the_code():
    """A failpoint added to the code that neither the sink conformance suite (``make
    test``) nor a pipeline of the short campaign (``make faults``) reaches would never be
    crashed: add it to a sink case (tests/support/sinks.py) or a pipeline
    (bench/faults/pipelines.py)."""
    import re
    from pathlib import Path

    from bench.faults.campaign import short_plan
    from bench.faults.pipelines import PIPELINES, SHORT_PIPELINES
    from tests.support.sinks import crashed_points

    root = Path(__file__).resolve().parent.parent
    code = {f: f.read_text() for f in (root / "spark_ext").rglob("*.py")}
    in_code = {m for text in code.values() for m in re.findall(r"""\bhit\(\s*["']([\w.]+)["']""", text)}
    # the protocol's own points, hit by the core's template for every transactional sink
    core_points = set(re.findall(r"""\bhit\(f["']\{self\.name\}\.(\w+)["']""",
                                 (root / "spark_ext" / "commit.py").read_text()))
    sinks = {m for text in code.values() if "TwoPhaseCommitter[" in text
             for m in re.findall(r"""^    name = ["'](\w+)["']""", text, re.M)}
    assert core_points and sinks == {"jdbc", "jms", "kafka", "routing"}
    in_code |= {f"{sink}.{point}" for sink in sinks for point in core_points}
    elsewhere = crashed_points()
    campaign = {f.target if f.kind == "failpoint" else f"task:{f.target}"
                for faults in short_plan([PIPELINES[n] for n in SHORT_PIPELINES], elsewhere).values()
                for f in faults if f.kind in ("failpoint", "task")}
    crashed = {p.removeprefix("task:") for p in campaign | elsewhere}
    assert len(in_code) >= 16 and in_code <= crashed, sorted(in_code - crashed)
    assert not campaign & elsewhere  # each point crashed once, where it is cheapest
