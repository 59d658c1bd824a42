"""Curve ``scale_partitions``: Kafka throughput against the topic's partition count, ours
against Spark's own ``kafka`` format in the same session.

Why: a source or sink whose cost per partition (a fetch, a produce request, a transaction
per partition per task) grows can look fine at 4 partitions and collapse at 64; Spark's
own connector beside it in the same run tells a cliff of ours from one of the machine.

For each P in 1, 4, 16, 64: a topic of P partitions holding the same 1M records
(``SCALE_PARTITIONS_ROWS``; ~100-byte values, key ``k<n % 1000>``) is read into Parquet
with ``Trigger.AvailableNow`` by both sources; then those records (key, value) are
written to a fresh topic of P partitions by our sink (``exactly_once``) and Spark's (at
least once), and into a Python data source sink that writes nothing (``floor``: what
Spark's Python Data Source API costs per task, which no Python sink can go below). Sink
tasks = P: the input is staged as P Parquet files, one task each (no shuffle, the same
input for all three). ``SCALE_QUICK=1``: 50k records, P in 1, 4, one round.
"""

from __future__ import annotations

import os
import sys
import tempfile

from bench.common import services_env
from bench.scaling import kafka_common as kc
from bench.scaling.curves import Curve

PARTITIONS = (1, 4, 16, 64)
VALUE_BYTES = 100
FLOOR = "python sink floor"


def run() -> Curve:
    rows = int(os.environ.get("SCALE_PARTITIONS_ROWS", "50000" if kc.quick() else "1000000"))
    bootstrap = services_env()["KAFKA_BOOTSTRAP_SERVERS"]
    points = kc.xs(PARTITIONS)
    curve = Curve(
        "scale_partitions", "Kafka throughput against partitions (ours vs Spark's kafka format)",
        "topic partitions P", "records/s",
        notes=[f"{rows:,} records of {VALUE_BYTES} B values (key k<n % 1000>), same for every P; "
               "local[2], one Spark session",
               "read: topic -> Parquet, Trigger.AvailableNow, one task per partition (both sources); "
               "ours read_committed, Spark's read_uncommitted (their defaults)",
               "write: key/value Parquet staged as P files -> fresh topic of P partitions, P tasks; ours "
               "exactly_once, Spark's at least once (its defaults)",
               "python sink floor: the same input into a Python data source sink that writes nothing "
               "(Spark's per-task cost of the Python Data Source API)",
               f"best of {kc.n_rounds()} round(s) per point, wall clock from start() to termination"],
    )
    with tempfile.TemporaryDirectory() as root:
        spark = kc.session()
        for p in points:
            topic = kc.fill_topic(bootstrap, f"bench-scale-partitions-p{p}-{rows}", p, rows, VALUE_BYTES)
            tmp = f"{root}/p{p}"
            read, spark_out = kc.read_point(spark, "scale_partitions", bootstrap, topic, rows, tmp)
            curve.add("ours read", p, read.rates["ours"])
            curve.add("spark read", p, read.rates["spark"])
            write = kc.write_point(spark, "scale_partitions", bootstrap, spark_out, rows, p, tmp, floor=True)
            curve.add("ours write exactly_once", p, write.rates["ours"])
            curve.add("spark write", p, write.rates["spark"])
            curve.add(FLOOR, p, write.rates["floor"])
            for pt in (read, write):
                if not pt.equal:
                    curve.equal = False
                    curve.notes.extend(f"NOT EQUAL at P={p}: {w}" for w in pt.why)
    if not curve.equal:
        print("scale_partitions: outputs differ from their inputs:\n  " + "\n  ".join(
            n for n in curve.notes if n.startswith("NOT EQUAL")), file=sys.stderr)
    at = ",".join(str(p) for p in points)
    print(f"SCALE partitions ours/spark at P={at}: "
          f"read {kc.ratios(curve, 'ours read', 'spark read', points)} | "
          f"write {kc.ratios(curve, 'ours write exactly_once', 'spark write', points)} | "
          f"write ours/floor {kc.ratios(curve, 'ours write exactly_once', FLOOR, points)} | "
          f"floor/spark {kc.ratios(curve, FLOOR, 'spark write', points)}",
          flush=True)
    return curve
