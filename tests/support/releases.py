"""What a test expects of the running PySpark release (``spark_ext/compat.py`` decides)."""

from __future__ import annotations

from spark_ext import compat


def refusal(writer) -> str:
    """The error of a query that must be refused at start, from ``start()`` or its first trigger."""
    try:
        q = writer.start()
        ended = q.awaitTermination(120)  # raises the query's error
    except Exception as e:  # noqa: BLE001 - the text is what the test checks
        return str(e)
    q.stop()
    raise AssertionError("a query that had to be refused " + ("ended without an error" if ended else
                                                               "is still running after 120 s"))


def assert_refused_for_release(text: str, feature: str) -> None:
    """``text`` refuses ``feature`` naming the release that has it and the running one."""
    assert feature in text, text[-2000:]
    assert f"PySpark {compat.ADMISSION_CONTROL_RELEASE} or later" in text, text[-2000:]
    assert f"this is PySpark {compat.pyspark_release()}" in text, text[-2000:]
