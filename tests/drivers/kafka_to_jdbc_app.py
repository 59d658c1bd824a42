"""A plain PySpark app, run as a user runs one (``spark-submit`` or a Spark Connect client):
Kafka to PostgreSQL ``exactly_once`` with ``hzsource`` / ``hzsink``, until the topic is read.

Usage: ``spark-submit kafka_to_jdbc_app.py BOOTSTRAP TOPIC URL TABLE CHECKPOINT [CONNECT_URL]``
(with CONNECT_URL, run it with ``python``: it connects with ``builder.remote``). With
``FOREACH_BATCH_SINK_ID`` set, a ``foreachBatch`` function writes each batch with
``hzsink`` under that sink id (``batchId`` and ``queryId`` given: Connect's tasks know
neither). Prints
``QUERY_ID <id>``, ``BATCHES <n>`` (micro-batches with rows); exit status 0 when the query ended cleanly. With
``SERVE_METRICS`` set it serves ``spark_ext.monitoring`` in this process and prints the
query's ``METRIC <name> <value>`` lines scraped from it at the end. With ``JVM_METRICS_URL``
(the companion jar's listener serving there, turned on by the submit's settings) it prints
``SCRAPE jvm <json>`` and, with ``SERVE_METRICS``, ``SCRAPE python <json>``: every sample
of each, once both show the query's last batch committed.
It imports nothing of this repository's tests, so tests can run a copy from any directory.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    from pyspark.sql import SparkSession

    bootstrap, topic, url, table, ckpt = argv[:5]
    builder = SparkSession.builder.appName("kafka-to-jdbc-app")
    if len(argv) > 5:
        builder = builder.remote(argv[5])
    spark = builder.getOrCreate()
    exporter = None
    if os.environ.get("SERVE_METRICS"):  # the metrics exporter in this process, Connect client or not
        from spark_ext import monitoring

        exporter = monitoring.serve(spark, port=0)
    r = (spark.readStream.format("hzsource").option("connector", "kafka")
         .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
         .option("startingOffsets", "earliest"))
    cap = os.environ.get("MAX_OFFSETS_PER_TRIGGER", "200")  # "": none (PySpark 4.1 has no caps)
    if cap:
        r = r.option("maxOffsetsPerTrigger", cap)
    rows = r.load().selectExpr("partition", "offset", "CAST(value AS STRING) AS v")
    sink_id = os.environ.get("FOREACH_BATCH_SINK_ID")
    if sink_id:
        # The same write from a foreachBatch function: one hzsink batch write per micro-batch.
        def each_batch(df, batch_id):
            (df.write.format("hzsink").option("connector", "jdbc").option("url", url)
             .option("dbtable", table).option("createTable", "true").option("sinkId", sink_id)
             .option("batchId", batch_id).option("queryId", sink_id).mode("append").save())

        w = rows.writeStream.foreachBatch(each_batch)
    else:
        w = (rows.writeStream.format("hzsink").option("connector", "jdbc").option("url", url)
             .option("dbtable", table).option("createTable", "true"))
    q = w.option("checkpointLocation", ckpt).trigger(availableNow=True).start()
    q.awaitTermination(240)
    if q.isActive:
        print("the query did not finish within 240 s", file=sys.stderr)
        return 1
    if q.exception() is not None:
        print(f"the query failed: {q.exception()}", file=sys.stderr)
        return 1
    print("SESSION", type(spark).__module__)
    print("QUERY_ID", q.id)
    if exporter is not None:
        _print_metrics(exporter.url, q.id)
    if os.environ.get("JVM_METRICS_URL"):
        _print_scrapes({"jvm": os.environ["JVM_METRICS_URL"], "python": exporter.url if exporter else None},
                       q.id)
    print("BATCHES", len([p for p in q.recentProgress if p.numInputRows > 0]))
    spark.stop()
    return 0


def _print_metrics(url: str, query_id: object) -> None:
    """``METRIC <name> <value>`` for the query's batch id and its sink's committed rows,
    once the listener has the last progress (events reach a Connect client a little later)."""
    import time
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    deadline = time.monotonic() + 30
    while True:
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        got = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.labels.get("query_id") == str(query_id)}
        if got.get("spark_ext_sink_last_batch") == got.get("spark_ext_query_batch_id") is not None \
                or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    for name in ("spark_ext_query_batch_id", "spark_ext_sink_last_batch", "spark_ext_sink_rows_total"):
        print("METRIC", name, got.get(name))


def _print_scrapes(urls: dict[str, str | None], query_id: object) -> None:
    import json
    import time
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    for which, url in urls.items():
        if url is None:
            continue
        deadline = time.monotonic() + 30
        while True:
            text = urllib.request.urlopen(url, timeout=10).read().decode()
            samples: list[tuple[str, dict[str, str], float]] = [
                (s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples]
            mine = {n: v for n, lb, v in samples if lb.get("query_id") == str(query_id)}
            if mine.get("spark_ext_sink_last_batch") == mine.get("spark_ext_query_batch_id") is not None \
                    or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        print("SCRAPE", which, json.dumps(samples))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
