"""Bench case ``jdbc_write``: our PostgreSQL sink vs Spark's JDBC writer, same data, same run.

``BENCH_JDBC_ROWS`` rows (default 1M: id, account, amount, ts, a ~60-byte note) are
staged once as Parquet and streamed in one micro-batch (``Trigger.AvailableNow``) into
an empty table by: our sink with ``exactly_once`` (the BENCH figure), Spark's own JDBC
writer called from ``foreachBatch`` (the baseline, at least once, its defaults: batched
INSERTs of 1,000 rows), our ``at_least_once`` append, and our ``at_least_once`` upsert by
``id``, and our ``exactly_once`` with a dead-letter table (``deadLetter.*``), once into a
table that refuses no row and once into one whose check constraint refuses one row in
100,000 (10 in 1M: the cost of finding them by halving the refused COPYs).
``BENCH_ROUNDS`` rounds (default 6, at least 5), every variant once a round in that
order, each into its emptied table; rows/s are the rows over the median wall-clock
seconds (``start()`` to termination) of the warm rounds 1..n-1, round 0 printed apart as
``cold_ratio``, the warm rounds' paired ratios as ``spread`` (``bench.common.Rounds``).
``equal``: the exactly-once table and the baseline table hold exactly the same rows
(``EXCEPT ALL`` both ways). The other figures go to stderr and the JSON files.

Every round also runs a Python sink that reads every row and writes nothing (``floor``,
``bench.scaling.floor``), and the machine's and the PostgreSQL server's CPU seconds are
read around it and ours (warm medians: ``cpu_floor``, ``cpu_eo``, ``cpu_server_eo``).
With both cores busy, a sink whose own Python work cost nothing would still take the
floor's time plus the server's CPU for the rows, so ``bound`` = ``floor_vs_spark`` x
``cpu_floor`` / (``cpu_floor`` + ``cpu_server_eo``) is the highest ratio a Python data
source sink reaches here; ``floor_busy`` (the floor's CPU over every core's worth of its
time) says how nearly the floor fills the machine, which the bound assumes.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench.common import (
    RESULTS_DIR,
    BenchError,
    Result,
    Rounds,
    machine_cpu_s,
    postgres_pid,
    round_count,
    run_sql,
    server_cpu_s,
    services_env,
    spark_session,
    timed_parquet_stream,
)
from bench.scaling.floor import FORMAT as FLOOR
from bench.scaling.floor import register as register_floor

COLUMNS = "id bigint PRIMARY KEY, account text, amount double precision, ts timestamptz, note text"
POISON = ", CHECK (id % 100000 <> 7)"  # one row in 100,000 refused: dead letters



def _stage(spark: Any, rows: int, path: str) -> None:
    from pyspark.sql import functions as F

    (spark.range(rows).select(
        F.col("id"),
        F.concat(F.lit("acct-"), (F.col("id") % 1000).cast("string")).alias("account"),
        ((F.col("id") * 7919) % 100000 / 100.0).alias("amount"),
        (F.lit(1_700_000_000) + F.col("id")).cast("timestamp").alias("ts"),
        F.concat(F.lit("payment note "), F.sha1(F.col("id").cast("string"))).alias("note"),
    ).repartition(2).write.mode("overwrite").parquet(path))



def run() -> Result:
    rows = int(os.environ.get("BENCH_JDBC_ROWS", "1000000"))
    timed = Rounds("jdbc_write", round_count())
    url = services_env()["POSTGRES_URL"]
    eng_url = sa.engine.make_url(url)
    jdbc_url = f"jdbc:postgresql://{eng_url.host}:{eng_url.port or 5432}/{eng_url.database}"
    props = {"user": eng_url.username or "", "password": eng_url.password or "",
             "driver": "org.postgresql.Driver"}
    spark = spark_session()
    register_floor(spark)
    server = postgres_pid("jdbc_write")
    tables = {k: f"bench_jdbc_{k}" for k in ("eo", "spark", "alo", "upsert", "dl", "dlp")}
    for k, t in tables.items():
        run_sql(url, f"DROP TABLE IF EXISTS {t}")
        run_sql(url, f"CREATE TABLE {t} ({COLUMNS}{POISON if k == 'dlp' else ''})")
    dead = "bench_jdbc_dead"
    run_sql(url, f"DROP TABLE IF EXISTS {dead}")
    dl = {"deadLetter.connector": "jdbc", "deadLetter.url": url, "deadLetter.dbtable": dead,
          "deadLetter.createTable": "true"}

    def ours(table: str, **opts: str) -> Any:
        def sink(w: Any) -> Any:
            w = w.format("hzsink").option("connector", "jdbc").option("url", url).option("dbtable", table)
            for k, v in opts.items():
                w = w.option(k, v)
            return w
        return sink

    def spark_jdbc(w: Any) -> Any:
        return w.foreachBatch(lambda df, _id: df.write.jdbc(jdbc_url, tables["spark"], "append", props))

    with tempfile.TemporaryDirectory() as tmp:
        src = f"{tmp}/src"
        _stage(spark, rows, src)
        sinks = (("spark", spark_jdbc), ("eo", ours(tables["eo"])),
                 ("alo", ours(tables["alo"], guarantee="at_least_once")),
                 ("upsert", ours(tables["upsert"], guarantee="at_least_once", upsertKeys="id")),
                 ("dl", ours(tables["dl"], **dl)), ("dlp", ours(tables["dlp"], **dl)),
                 ("floor", lambda w: w.format(FLOOR)))
        cpu: dict[str, list[float]] = {"floor": [], "eo": [], "server_eo": []}
        for i in timed:
            for name, sink in sinks:
                if name != "floor":  # writes nowhere
                    run_sql(url, f"TRUNCATE {tables[name]}")
                m0, s0 = machine_cpu_s(), server_cpu_s(server)
                n, dt = timed_parquet_stream(spark, "jdbc_write", src, f"{tmp}/ck-{name}-{i}", sink)
                if n != rows:
                    raise BenchError(f"jdbc_write {name}: read {n} rows, expected {rows}")
                timed.add(name, i, n, dt)
                if i > 0 and name in ("eo", "floor"):  # warm rounds
                    cpu[name].append(machine_cpu_s() - m0)
                    if name == "eo":
                        cpu["server_eo"].append(server_cpu_s(server) - s0)
    diff = run_sql(url, f"SELECT (SELECT count(*) FROM (SELECT * FROM {tables['eo']} EXCEPT ALL "
                     f"SELECT * FROM {tables['spark']}) a), (SELECT count(*) FROM (SELECT * FROM "
                     f"{tables['spark']} EXCEPT ALL SELECT * FROM {tables['eo']}) b), "
                     f"(SELECT count(*) FROM {tables['eo']})")[0]
    refused = sum(1 for i in range(7, rows, 100000))
    kept = run_sql(url, f"SELECT count(*) FROM {tables['dlp']}")[0][0]
    equal = diff[0] == 0 and diff[1] == 0 and diff[2] == rows and kept == rows - refused
    rates = {name: timed.rate(name) for name, _sink in sinks}  # warm medians
    extra = {"at_least_once_rows_per_s": rates["alo"], "upsert_rows_per_s": rates["upsert"],
             "exactly_once_vs_at_least_once": rates["eo"] / rates["alo"],
             "upsert_vs_spark_jdbc": rates["upsert"] / rates["spark"],
             "dead_letters_vs_exactly_once": rates["dl"] / rates["eo"],
             "dead_letters_10_refused_vs_exactly_once": rates["dlp"] / rates["eo"],
             # every round adds its refused rows to the same dead-letter table
             "dead_letter_rows": run_sql(url, f"SELECT count(*) FROM {dead}")[0][0] // timed.n,
             "floor_vs_spark": rates["floor"] / rates["spark"]}
    med = {k: statistics.median(v) for k, v in cpu.items()}
    extra.update({f"cpu_{k}": v for k, v in med.items()})
    extra["bound"] = extra["floor_vs_spark"] * med["floor"] / (med["floor"] + med["server_eo"])
    extra["floor_busy"] = med["floor"] / ((os.cpu_count() or 1) * rows / rates["floor"])
    print(f"[bench] jdbc_write extra {json.dumps(extra)}", file=sys.stderr)
    RESULTS_DIR.mkdir(exist_ok=True)
    (Path(RESULTS_DIR) / "jdbc_write_extra.json").write_text(json.dumps(extra, indent=2))
    for t in (*tables.values(), dead):
        run_sql(url, f"DROP TABLE IF EXISTS {t}")
    return timed.result("eo", ["spark"], equal)
