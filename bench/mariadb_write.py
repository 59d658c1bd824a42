"""Bench case ``mariadb_write``: our jdbc sink on MariaDB vs Spark's JDBC writer, same data,
same server, same run.

``BENCH_JDBC_ROWS`` rows (default 1M: id, account, amount, ts, a ~60-byte note; the data
of ``jdbc_write``) are staged once as Parquet and streamed in one micro-batch
(``Trigger.AvailableNow``) into an empty InnoDB table by: our sink with ``exactly_once``
(XA; the BENCH figure), Spark's own JDBC writer called from ``foreachBatch`` with
MariaDB's Connector/J (the baseline, at least once, Spark's defaults: batches of 1,000
rows), our ``at_least_once`` append and our ``at_least_once`` upsert by ``id``.
``BENCH_ROUNDS`` rounds (default 6, at least 5), every variant once a round in that
order, each into its emptied table; rows/s are the rows over the median wall-clock
seconds (``start()`` to termination) of the warm rounds 1..n-1, round 0 printed apart as
``cold_ratio``, the warm rounds' paired ratios as ``spread`` (``bench.common.Rounds``).
``equal``: the exactly-once table and the baseline table hold exactly the same rows
(``EXCEPT ALL`` both ways).
"""

from __future__ import annotations

import json
import os
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
    round_count,
    run_sql,
    services_env,
    spark_session,
    timed_parquet_stream,
)
from bench.jdbc_write import _stage

COLUMNS = "id bigint PRIMARY KEY, account varchar(64), amount double, ts datetime(6), note varchar(255)"


def run() -> Result:
    rows = int(os.environ.get("BENCH_JDBC_ROWS", "1000000"))
    timed = Rounds("mariadb_write", round_count())
    url = services_env()["MARIADB_URL"]
    u = sa.engine.make_url(url)
    # Spark picks its MySQL dialect (backquoted names) by the jdbc:mysql scheme, which
    # Connector/J takes with permitMysqlScheme.
    jdbc_url = f"jdbc:mysql://{u.host}:{u.port or 3306}/{u.database}?permitMysqlScheme"
    props = {"user": u.username or "", "password": u.password or "", "driver": "org.mariadb.jdbc.Driver"}
    spark = spark_session()
    spark.conf.set("spark.sql.session.timeZone", "UTC")  # both writers store UTC wall time
    tables = {k: f"bench_mariadb_{k}" for k in ("eo", "spark", "alo", "upsert")}
    for t in tables.values():
        run_sql(url, f"DROP TABLE IF EXISTS {t}")
        run_sql(url, f"CREATE TABLE {t} ({COLUMNS}) ENGINE=InnoDB")

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
                 ("upsert", ours(tables["upsert"], guarantee="at_least_once", upsertKeys="id")))
        for i in timed:
            for name, sink in sinks:
                run_sql(url, f"TRUNCATE TABLE {tables[name]}")
                n, dt = timed_parquet_stream(spark, "mariadb_write", src, f"{tmp}/ck-{name}-{i}", sink)
                if n != rows:
                    raise BenchError(f"mariadb_write {name}: read {n} rows, expected {rows}")
                timed.add(name, i, n, dt)
    eo, sp = tables["eo"], tables["spark"]
    diff = run_sql(url, f"SELECT (SELECT count(*) FROM (SELECT * FROM {eo} EXCEPT ALL SELECT * FROM {sp}) a),"
                        f" (SELECT count(*) FROM (SELECT * FROM {sp} EXCEPT ALL SELECT * FROM {eo}) b), "
                        f"(SELECT count(*) FROM {eo})")[0]
    equal = diff[0] == 0 and diff[1] == 0 and diff[2] == rows
    rates = {name: timed.rate(name) for name, _sink in sinks}  # warm medians
    extra = {"at_least_once_rows_per_s": rates["alo"], "upsert_rows_per_s": rates["upsert"],
             "exactly_once_vs_at_least_once": rates["eo"] / rates["alo"],
             "upsert_vs_spark_jdbc": rates["upsert"] / rates["spark"]}
    print(f"[bench] mariadb_write extra {json.dumps(extra)}", file=sys.stderr)
    RESULTS_DIR.mkdir(exist_ok=True)
    (Path(RESULTS_DIR) / "mariadb_write_extra.json").write_text(json.dumps(extra, indent=2))
    for t in tables.values():
        run_sql(url, f"DROP TABLE IF EXISTS {t}")
    return timed.result("eo", ["spark"], equal)
