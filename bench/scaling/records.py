"""Curve ``scale_record_size``: Kafka throughput in MB/s against the record's value size,
ours against Spark's own ``kafka`` format in the same session.

Why: per-record costs (Python objects per record, Arrow columns) dominate at 100 B and
per-byte costs (copies of the value, fetch and request sizes) at 1 MiB; a path tuned for
one can fall off a cliff at the other. Spark's connector beside it tells which.

For each value size in 100 B, 10 KiB, 1 MiB: a 4-partition topic holding the same 200 MiB
of values (``SCALE_RECORD_BYTES``) is read into Parquet with ``Trigger.AvailableNow`` by
both sources, then those records are written to a fresh 4-partition topic by our sink
(``exactly_once``) and Spark's (at least once), 4 tasks. Every topic takes 2 MiB
messages (``max.message.bytes``); both sources fetch up to 10 MiB a partition
(``kafka.max.partition.fetch.bytes``, our default; Spark's is 1 MiB) at every size, and
Spark's producer may send 4 MiB requests (``kafka.max.request.size``; our sink cuts its
batches to the topic's limit itself). MB/s counts value bytes (10^6 B). ``SCALE_QUICK=1``:
4 MiB of values, 100 B and 10 KiB, one round.
"""

from __future__ import annotations

import os
import sys
import tempfile

from bench.common import services_env
from bench.scaling import kafka_common as kc
from bench.scaling.curves import Curve

SIZES = (100, 10 * 1024, 1024 * 1024)
PARTITIONS = 4
TOPIC_CONFIG = {"max.message.bytes": str(2 * 1024 * 1024)}
FETCH = {"kafka.max.partition.fetch.bytes": str(10 * 1024 * 1024),
         "kafka.fetch.max.bytes": str(50 * 1024 * 1024)}
SPARK_SINK = {"kafka.max.request.size": str(4 * 1024 * 1024)}


def _label(size: int) -> str:
    if size >= 1 << 20:
        return f"{size >> 20} MiB"
    return f"{size >> 10} KiB" if size >= 1 << 10 else f"{size} B"


def run() -> Curve:
    total = int(os.environ.get("SCALE_RECORD_BYTES", str((4 if kc.quick() else 200) * 1024 * 1024)))
    bootstrap = services_env()["KAFKA_BOOTSTRAP_SERVERS"]
    sizes = kc.xs(SIZES)
    curve = Curve(
        "scale_record_size", "Kafka throughput against record size (ours vs Spark's kafka format)",
        "value size (bytes)", "MB/s of values",
        notes=[f"{total / 1e6:.0f} MB of values per size, {PARTITIONS} partitions, 4 tasks; local[2], "
               "one Spark session",
               "read: topic -> Parquet, Trigger.AvailableNow; ours read_committed, Spark's read_uncommitted; "
               "both with kafka.max.partition.fetch.bytes 10 MiB, kafka.fetch.max.bytes 50 MiB",
               "write: key/value Parquet (4 files) -> fresh topic; ours exactly_once, Spark's at least once "
               "with kafka.max.request.size 4 MiB; topics max.message.bytes 2 MiB",
               f"best of {kc.n_rounds()} round(s) per point, wall clock from start() to termination"],
    )
    series = (("ours read", "read", "ours"), ("spark read", "read", "spark"),
              ("ours write exactly_once", "write", "ours"), ("spark write", "write", "spark"))
    with tempfile.TemporaryDirectory() as root:
        spark = kc.session()
        for size in sizes:
            rows = max(PARTITIONS, total // size)
            topic = kc.fill_topic(bootstrap, f"bench-scale-records-{size}b-{rows}", PARTITIONS, rows, size,
                                  TOPIC_CONFIG)
            tmp = f"{root}/s{size}"
            read, spark_out = kc.read_point(spark, "scale_record_size", bootstrap, topic, rows, tmp, FETCH)
            write = kc.write_point(spark, "scale_record_size", bootstrap, spark_out, rows, PARTITIONS, tmp,
                                   TOPIC_CONFIG, SPARK_SINK, FETCH)
            pts = {"read": read, "write": write}
            for name, kind, side in series:
                rate = pts[kind].rates[side]
                curve.add(name, size, rate * size / 1e6)
                curve.notes.append(f"{name} at {_label(size)}: {rate:,.0f} records/s ({rows:,} records)")
            for pt in (read, write):
                if not pt.equal:
                    curve.equal = False
                    curve.notes.extend(f"NOT EQUAL at {_label(size)}: {w}" for w in pt.why)
    if not curve.equal:
        print("scale_record_size: outputs differ from their inputs:\n  " + "\n  ".join(
            n for n in curve.notes if n.startswith("NOT EQUAL")), file=sys.stderr)
    at = ",".join(_label(s) for s in sizes)
    print(f"SCALE record_size ours/spark at {at}: "
          f"read {kc.ratios(curve, 'ours read', 'spark read', sizes)} | "
          f"write {kc.ratios(curve, 'ours write exactly_once', 'spark write', sizes)}", flush=True)
    return curve
