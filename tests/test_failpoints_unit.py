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
