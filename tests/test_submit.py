"""``spark-submit`` runs our formats from the repository's own environment (issue 17).

The job runs outside the repository directory with the environment a user has after
``make venv`` (the editable install), so Spark's lookup of ``pyspark_*`` modules must see
ours without the repository on ``sys.path`` or ``PYTHONPATH``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.drivers import kafka_to_jdbc_app
from tests.support import kafka_util, pg_util
from tests.support.processes import driver_report

pytestmark = [pytest.mark.spark, pytest.mark.services]

@pytest.mark.compat  # under make test-compat: the built wheel beside that PySpark, exactly-once
def test_spark_submit_outside_the_repository_finds_hzsource_and_hzsink(services, tmp_path: Path) -> None:
    topic = kafka_util.create_topic(services.kafka_bootstrap, 2, "submit")
    kafka_util.produce(services.kafka_bootstrap, topic, kafka_util.numbered(2, 200))
    table = pg_util.table_name("submit")
    app = tmp_path / "app.py"
    shutil.copy(kafka_to_jdbc_app.__file__, app)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable  # local master
    env["MAX_OFFSETS_PER_TRIGGER"] = ""  # one batch: runs on every supported PySpark
    submit = Path(sys.executable).parent / "spark-submit"
    args = [services.kafka_bootstrap, topic, services.postgres_url, table, str(tmp_path / "ck")]
    cmd = [str(submit), "--master", "local[2]", "--conf", "spark.ui.enabled=false", str(app), *args]
    res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, driver_report(res)
    rows = pg_util.query(services.postgres_url,
                         f"SELECT count(*), count(DISTINCT (partition, \"offset\")) FROM {table}")
    assert rows == [(200, 200)]
