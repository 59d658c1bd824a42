"""Kafka -> PostgreSQL or Kafka, exactly_once, on a standalone cluster, with a gate a test
can hold a task at, for freezing the host that runs it.

Usage: python -m tests.drivers.gated_kafka_to_sink MASTER BOOTSTRAP TOPIC CHECKPOINT GATE_DIR
       jdbc URL TABLE | kafka OUT_TOPIC

Reads the topic from the earliest offset (600 records a batch, Trigger.AvailableNow) into
the sink through ``hzsink``. A UDF passes every value through; at the value ``gate``,
while ``GATE_DIR/hold`` exists, it writes its process id to ``GATE_DIR/holding`` and waits
until ``hold`` is removed (up to 5 minutes); the task's writer has begun (its session or
transaction open) by then. Executors lose their heartbeat after 6 s, so a frozen one is
declared lost quickly.
"""

from __future__ import annotations

import os
import sys
import time


def main(master: str, bootstrap: str, topic: str, ckpt: str, gate_dir: str, sink: str, *target: str) -> int:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (SparkSession.builder.master(master).appName("frozen-executor")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
             .config("spark.pyspark.python", sys.executable).config("spark.executor.memory", "1g")
             .config("spark.executor.cores", "1").config("spark.cores.max", "2")
             .config("spark.executor.heartbeatInterval", "1s").config("spark.network.timeout", "6s")
             .config("spark.network.timeoutInterval", "1s")
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    hold, holding = os.path.join(gate_dir, "hold"), os.path.join(gate_dir, "holding")

    @F.udf("string")
    def gate(v: str) -> str:
        if v == "gate" and os.path.exists(hold):
            with open(holding, "w") as f:
                f.write(str(os.getpid()))
            deadline = time.monotonic() + 300
            while os.path.exists(hold) and time.monotonic() < deadline:
                time.sleep(0.05)
        return v

    df = (spark.readStream.format("hzsource").option("connector", "kafka")
          .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
          .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "600").load())
    out = (df.selectExpr("partition", "offset", "CAST(value AS STRING) AS v").repartition(2, "partition")
           .withColumn("v", gate("v")))
    if sink == "jdbc":
        w = (out.writeStream.format("hzsink").option("connector", "jdbc").option("url", target[0])
             .option("dbtable", target[1]).option("createTable", "true"))
    else:  # one record per input record, its value naming where it came from
        w = (out.selectExpr("CAST(partition AS STRING) AS key",
                            "concat_ws(':', partition, offset, v) AS value")
             .writeStream.format("hzsink").option("connector", "kafka")
             .option("kafka.bootstrap.servers", bootstrap).option("topic", target[0]))
    q = w.option("checkpointLocation", ckpt).trigger(availableNow=True).start()
    q.awaitTermination()
    return 0 if q.exception() is None else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
