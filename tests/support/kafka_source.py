"""Helpers for tests that read with the Kafka source."""

from __future__ import annotations


def run_available_now(df, name: str, ckpt):
    q = (df.writeStream.format("memory").queryName(name).option("checkpointLocation", str(ckpt))
         .trigger(availableNow=True).start())
    assert q.awaitTermination(180), "still running after 180 s"
    assert q.exception() is None, q.exception()
    return q
