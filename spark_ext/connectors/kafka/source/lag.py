"""A query's Kafka source lag from its checkpoint, for ``spark-ext status kafka --checkpoint``.

The checkpoint's offset log holds each committed batch's end offsets in the shape both
Spark's Kafka source and ours write (``{"topic": {"0": 42}}``); the broker's latest (last
stable) offset minus that is what the query has yet to read. Read from the files, not
from the running query, so a stopped or crashed query's lag shows too.
"""

from __future__ import annotations

from collections.abc import Mapping

from spark_ext.connectors.kafka.source.admin import KafkaMetadata
from spark_ext.connectors.kafka.source.config import KafkaSourceConfig
from spark_ext.options import Options
from spark_ext.status import SourceLag
from spark_ext.status.checkpoint import committed_offsets, kafka_offsets


def checkpoint_lag(bootstrap: str, checkpoint: str,
                   client: Mapping[str, str] | None = None) -> list[SourceLag]:
    """Per partition of each Kafka source of the checkpoint's query: the last committed
    batch's end against the latest offset of the cluster at ``bootstrap`` (``client``:
    further ``kafka.*`` options, e.g. security). Empty before the first committed batch."""
    committed = committed_offsets(checkpoint)
    if committed is None:
        return []
    sources = {i: offs for i, doc in enumerate(committed[1]) if (offs := kafka_offsets(doc))}
    if not sources:
        return []
    topics = sorted({t for offs in sources.values() for t, _ in offs})
    opts = {**(client or {}), "kafka.bootstrap.servers": bootstrap, "subscribe": ",".join(topics)}
    metadata = KafkaMetadata(KafkaSourceConfig.parse(Options(opts, "spark-ext status kafka")))
    try:
        latest = metadata.latest({tp for offs in sources.values() for tp in offs})
    finally:
        metadata.close()
    return [SourceLag(i, t, p, end, latest[(t, p)]) for i, offs in sorted(sources.items())
            for (t, p), end in sorted(offs.items()) if (t, p) in latest]
