"""Bench case ``kafka_tasks``: what a task of our Kafka sink costs above Spark's own cost of a
Python sink task, at 4, 16 and 64 tasks a batch.

``BENCH_KAFKA_TASKS_ROWS`` rows (default 1M; key ``k<n % 1000>``, a ~100-byte value) are
staged as T Parquet files (one task each) and streamed in one micro-batch
(``Trigger.AvailableNow``) into: a Python data source sink that reads every row and
writes nothing (``bench.scaling.floor``: the Python worker, the Arrow hand-off, the
commit message; no Python sink can go below it), and our sink with ``exactly_once`` into
a fresh T-partition topic, taken past its partitions' first index entries beforehand
(``kafka_common.warm_topic``: a new partition's cost at the broker, not a task's).
``BENCH_ROUNDS`` rounds (default 6, at least 5) per T, both
variants in turn; the figures are medians of the warm rounds with the cold round apart
(``bench.common.Rounds``). ``ratio_t<T>`` = ours' rows/s over the floor's; the BENCH
line's own ratio is the lowest of them.

The machine's CPU seconds (``/proc/stat``) and the Kafka broker's (its process) are read
around every query: ``cpu_floor_t<T>`` / ``cpu_ours_t<T>`` / ``broker_t<T>`` are their warm
medians. On a machine whose cores the queries fill, the broker's CPU is work the floor
never does and any Kafka sink must cause, so ``bound_t<T>`` = cpu_floor / (cpu_floor +
broker) is the ratio a sink whose own Python work cost nothing would reach there.
``workers_floor_t<T>`` / ``workers_ours_t<T>``: the warm medians of the CPU seconds of the
Python workers that run the tasks (``bench.common.task_workers_cpu``), the part of a
query's CPU where a Python sink's own work and PySpark's per-task costs show.
``equal``: every topic of the last round holds exactly the staged rows, read_committed.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import uuid
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from bench.common import (
    BenchError,
    Result,
    Rounds,
    broker_pid,
    cpu_since,
    machine_cpu_s,
    process_cpu_s,
    round_count,
    services_env,
    task_workers_cpu,
    timed_parquet_stream,
)
from bench.scaling import kafka_common as kc
from bench.scaling.floor import FORMAT, register

TASKS = (4, 16, 64)


def _stage(spark: Any, rows: int, tasks: int, path: str) -> None:
    from pyspark.sql import functions as F

    (spark.range(rows).select(
        F.concat(F.lit("k"), (F.col("id") % 1000).cast("string")).alias("key"),
        F.concat(F.col("id").cast("string"), F.lit(" "), F.sha1(F.col("id").cast("string")),
                 F.lit(" padding-to-about-one-hundred-bytes-")).alias("value"),
    ).repartition(tasks).write.mode("overwrite").parquet(path))


def run() -> Result:
    rows = int(os.environ.get("BENCH_KAFKA_TASKS_ROWS", "1000000"))
    n_rounds = round_count()
    bootstrap = services_env()["KAFKA_BOOTSTRAP_SERVERS"]
    broker = broker_pid("kafka_tasks")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    spark = kc.session()  # every Parquet file its own task (the session's setting, put back below)
    register(spark)
    run_id = uuid.uuid4().hex[:8]
    figures: dict[str, float] = {}
    detail: dict[str, Any] = {}
    worst: tuple[float, Rounds] | None = None
    equal = True
    made: list[str] = []

    def ours(topic: str) -> Any:
        return lambda w: (w.format("hzsink").option("connector", "kafka").option("guarantee", "exactly_once")
                          .option("kafka.bootstrap.servers", bootstrap).option("topic", topic))

    try:
        with tempfile.TemporaryDirectory() as tmp:
            for tasks in TASKS:
                src = f"{tmp}/stage-{tasks}"
                _stage(spark, rows, tasks, src)
                have = spark.read.parquet(src).rdd.getNumPartitions()
                if have != tasks:
                    raise BenchError(f"kafka_tasks: the staged input has {have} tasks, not {tasks}")
                timed = Rounds(f"kafka_tasks t={tasks}", n_rounds)
                cpu: dict[str, list[float]] = {"floor": [], "ours": [], "broker": [], "workers_floor": [],
                                               "workers_ours": []}
                last = ""
                for i in timed:
                    for name in ("floor", "ours"):
                        if name == "floor":
                            sink = lambda w: w.format(FORMAT)  # noqa: E731
                        else:
                            last = f"bench-tasks-t{tasks}-{run_id}-{i}"
                            admin.create_topics([NewTopic(last, tasks, 1)])[last].result(timeout=60)
                            made.append(last)
                            kc.warm_topic(bootstrap, last, tasks)
                            sink = ours(last)
                        m0, b0, w0 = machine_cpu_s(), process_cpu_s(broker), task_workers_cpu()
                        ckpt = f"{tmp}/ck-{tasks}-{name}-{i}"
                        n, dt = timed_parquet_stream(spark, "kafka_tasks", src, ckpt, sink)
                        m1, b1, w1 = machine_cpu_s(), process_cpu_s(broker), task_workers_cpu()
                        if n != rows:
                            raise BenchError(f"kafka_tasks {name} t={tasks}: read {n} rows, expected {rows}")
                        timed.add(name, i, n, dt)
                        if i:
                            cpu[name].append(m1 - m0)
                            cpu[f"workers_{name}"].append(cpu_since(w0, w1))
                            if name == "ours":
                                cpu["broker"].append(b1 - b0)
                got = kc.count_committed(spark, bootstrap, last)
                if got != rows:
                    equal = False
                    print(f"kafka_tasks t={tasks}: topic {last} holds {got} committed records, "
                          f"expected {rows}", file=sys.stderr)
                ratio = timed.ratio("ours", "floor")
                lo, hi = timed.spread("ours", "floor")
                med = {k: statistics.median(v) for k, v in cpu.items()}
                figures.update({f"ratio_t{tasks}": ratio, f"cold_t{tasks}": timed.cold_ratio("ours", "floor"),
                                f"spread_lo_t{tasks}": lo, f"spread_hi_t{tasks}": hi,
                                f"cpu_floor_t{tasks}": med["floor"], f"cpu_ours_t{tasks}": med["ours"],
                                f"broker_t{tasks}": med["broker"],
                                f"workers_floor_t{tasks}": med["workers_floor"],
                                f"workers_ours_t{tasks}": med["workers_ours"],
                                f"bound_t{tasks}": med["floor"] / (med["floor"] + med["broker"])})
                detail[f"t{tasks}"] = {**timed.detail(), "cpu_s": cpu}
                print(f"[bench] kafka_tasks t={tasks}: ours / floor {ratio:.2f} (warm {lo:.2f}-{hi:.2f}, "
                      f"cold {timed.cold_ratio('ours', 'floor'):.2f}); CPU s floor {med['floor']:.2f}, ours "
                      f"{med['ours']:.2f} of which the broker {med['broker']:.2f}; task workers floor "
                      f"{med['workers_floor']:.2f}, ours {med['workers_ours']:.2f}", file=sys.stderr)
                if worst is None or ratio < worst[0]:
                    worst = (ratio, timed)
    finally:
        spark.conf.unset("spark.sql.files.openCostInBytes")  # make bench runs every case in one session
        if made:
            for f in admin.delete_topics(made).values():
                f.result(timeout=60)
    assert worst is not None
    timed = worst[1]
    return Result("kafka_tasks", timed.rate("ours"), timed.rate("floor"), equal, cold_ratio=timed.cold_ratio(
        "ours", "floor"), spread=timed.spread("ours", "floor"), rounds=n_rounds, figures=figures,
        detail={"baseline_sink": "a Python data source sink that writes nothing (bench.scaling.floor)",
                "headline": f"the lowest ratio: {timed.case}", **detail})
