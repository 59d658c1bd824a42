"""Helpers for tests of the queue source against the real Artemis."""

from __future__ import annotations

import sys


def jms(spark, services, dest: str, **opts: str):
    r = (spark.readStream.format("hzsource").option("connector", "jms")
         .option("host", services.stomp_host).option("port", str(services.stomp_port))
         .option("user", services.stomp_user).option("password", services.stomp_password)
         .option("destination", dest))
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def driver_argv(services, dest: str, ckpt, table: str) -> list[str]:
    """``tests.drivers.jms_to_jdbc`` up to its EXPECTED argument."""
    return [sys.executable, "-m", "tests.drivers.jms_to_jdbc", services.stomp_host, str(services.stomp_port),
            services.stomp_user, services.stomp_password, dest, str(ckpt), services.postgres_url, table]
