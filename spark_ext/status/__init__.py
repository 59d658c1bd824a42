"""What ``spark-ext status <connector>`` shows: the rows every connector's doctor returns
and their table and JSON forms (``rows``), and what a query's checkpoint records as
committed (``checkpoint``). The command itself is ``spark_ext.doctor``'s.
"""

from __future__ import annotations

from spark_ext.status.rows import JSON_KEYS, LAG_KEYS, SinkStatus, SourceLag, render, to_json

__all__ = ["JSON_KEYS", "LAG_KEYS", "SinkStatus", "SourceLag", "render", "to_json"]
