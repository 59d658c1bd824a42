"""Jobs that carry every kind of secret, in a driver of their own with the event log and
the UI on, so a test can look for the secrets wherever Spark and we write.

Usage: python -m tests.drivers.secrets_leak SPEC_JSON OUT_DIR
SPEC_JSON (a file): ``bootstrap`` (SASL_SSL), ``kafka_options`` (its login inline), ``topic``,
``kafka_by_file`` (options that replace the inline login by ``passwordFile``);
``by_file`` (a PostgreSQL URL without password, ``password_file``, ``table``); ``inline``
(a URL, ``password``, ``table``: the password as an option); ``stomp`` (``host``, ``port``,
``user``, ``password_env``, ``queue``); ``wrong_file`` (a password file with a wrong password).
AvailableNow queries from the secured Kafka (its password by ``passwordFile``, or inline
for the second): into PostgreSQL with ``passwordFile``, into PostgreSQL with ``password``,
into the queue with ``passwordEnv``; then from that queue (``passwordEnv``) into Kafka
(``out_topic``, its SASL password by ``passwordFile``); last into PostgreSQL with a wrong
``passwordFile`` (it fails; its error goes to ``OUT/errors.txt``).
The UI's SQL and environment pages go to ``OUT/ui.json``; the event log to ``OUT/events``.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from typing import Any


def main(spec_file: str, out: str) -> int:
    from pyspark.sql import SparkSession

    import spark_ext

    spec: dict[str, Any] = json.loads(open(spec_file).read())
    os.makedirs(f"{out}/events", exist_ok=True)
    builder = (SparkSession.builder.master("local[2]").appName("secrets-leak")
               .config("spark.ui.enabled", "true").config("spark.ui.port", "0")
               .config("spark.eventLog.enabled", "true").config("spark.eventLog.dir", f"file:{out}/events")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sparkext.leakcheck.marker", spec["marker"])
               .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1"))
    spark = spark_ext.configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("INFO")  # the most a log says
    def source(**login: str | None) -> Any:
        r = (spark.readStream.format("hzsource").option("connector", "kafka")
             .option("kafka.bootstrap.servers", spec["bootstrap"]).option("subscribe", spec["topic"])
             .option("startingOffsets", "earliest"))
        for k, v in {**spec["kafka_options"], **login}.items():
            if v is not None:  # None: an inline setting the login by reference drops
                r = r.option(k, v)
        return r.load().selectExpr("partition AS p", "offset AS o", "CAST(value AS STRING) AS v")

    inline = source()  # the SASL login inline in the JAAS config, as Spark's Kafka users write it
    by_file = source(**spec["kafka_by_file"])  # kafka.sasl.username and passwordFile
    src = by_file

    def run(name: str, df: Any = src, **opts: str) -> str | None:
        w = (df.writeStream.format("hzsink").option("checkpointLocation", f"{out}/ck-{name}")
             .trigger(availableNow=True))
        for k, v in opts.items():
            w = w.option(k, v)
        q = w.start()
        try:
            q.awaitTermination(180)
        except Exception as e:  # noqa: BLE001 - the failing query's error is what we keep
            return str(e)
        finally:
            q.stop()
        return None if q.exception() is None else str(q.exception())

    f, i, s = spec["by_file"], spec["inline"], spec["stomp"]
    errors = [
        run("by-file", connector="jdbc", url=f["url"], dbtable=f["table"], passwordFile=f["password_file"]),
        run("inline", inline, connector="jdbc", url=i["url"], dbtable=i["table"], password=i["password"]),
        run("queue", src.selectExpr("v AS body"), connector="jms", host=s["host"], port=str(s["port"]),
            user=s["user"], passwordEnv=s["password_env"], destination=s["queue"]),
    ]
    # Back from the queue (the source's password by passwordEnv) into Kafka (the sink's SASL
    # password by passwordFile).
    back = (spark.readStream.format("hzsource").option("connector", "jms").option("host", s["host"])
            .option("port", str(s["port"])).option("user", s["user"]).option("passwordEnv", s["password_env"])
            .option("destination", s["queue"]).load().selectExpr("body_text AS value"))
    login = {**spec["kafka_options"], **spec["kafka_by_file"]}
    sink_login = {k: v for k, v in login.items() if v is not None}
    errors.append(run("back", back, connector="kafka", topic=spec["out_topic"],
                      **{"kafka.bootstrap.servers": spec["bootstrap"], **sink_login}))
    if any(errors):
        print("a query that should have run failed:", errors, file=sys.stderr)
        return 1
    wrong = run("wrong", connector="jdbc", url=f["url"], dbtable=f["table"], passwordFile=spec["wrong_file"])
    with open(f"{out}/errors.txt", "w") as fh:
        fh.write(wrong or "")
    base = spark.sparkContext.uiWebUrl
    app = spark.sparkContext.applicationId
    pages = {}
    for page in ("sql?details=true&planDescription=true", "environment", "jobs", "stages"):
        with urllib.request.urlopen(f"{base}/api/v1/applications/{app}/{page}", timeout=30) as r:
            pages[page] = r.read().decode()
    with open(f"{out}/ui.json", "w") as fh:
        json.dump(pages, fh)
    spark.stop()  # writes the event log out
    return 0 if wrong else 2


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
