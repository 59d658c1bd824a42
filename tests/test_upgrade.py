"""The upgrade, tried for real: each release named in ``spark_ext/release.py`` is built into
a wheel from this repository's own history and installed in a virtualenv; a pipeline run
with it is killed right after a batch's decision, and the working tree's code, restarted
from the same checkpoint, finishes that batch: every id once, nothing in doubt. Every sink, and
the queue source, whose offsets record each batch's message ids.

The released job runs from a directory outside the checkout, so Spark's Python workers
import the released wheel (its dependencies come from the suite's environment, which the
virtualenv names in a ``.pth`` file). In ``make faults``: a wheel build and two drivers a
connector are more than ``make test``'s budget holds.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from spark_ext import release
from spark_ext.options import checkpoint_sink_id
from tests.drivers import released_job
from tests.support.jms import driver_argv
from tests.support.pg_util import execute, prepared, query, table_name, write_json_files
from tests.support.processes import driver_report
from tests.support.sinks import SINKS, run_driver
from tests.support.stomp_util import drain, queue_name, send

pytestmark = [pytest.mark.spark, pytest.mark.services, pytest.mark.campaign]
ROOT = Path(__file__).resolve().parent.parent
BATCH = 40


def _released_python(version: str, tmp: Path) -> Path:
    """A virtualenv with release ``version``'s wheel, built from its commit in the history."""
    src = tmp / "src"
    src.mkdir()
    archive = subprocess.run(["git", "archive", release.RELEASES[version]], cwd=ROOT, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    jar = release.jar_path()  # git ignores the built jar; the release's is the same version's
    assert jar.is_file(), f"no JVM companion jar at {jar}: run make jvm"
    (src / "spark_ext" / "jars").mkdir(exist_ok=True)
    shutil.copy2(jar, src / "spark_ext" / "jars" / jar.name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps",
                            "--no-build-isolation", "-q", "-w", str(tmp / "wheels")],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp / "wheels").glob(f"spark_ext-{version}-*.whl")
    env_dir = tmp / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    (Path(site) / "suite-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    installed = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
                               env=_outside_env(), capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, driver_report(installed)
    return py


def _outside_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME", "VIRTUAL_ENV")}


@pytest.fixture(scope="module")
def released(tmp_path_factory) -> dict[str, Path]:
    return {v: _released_python(v, tmp_path_factory.mktemp(f"release-{v}")) for v in release.RELEASES}


@pytest.mark.parametrize("version", sorted(release.RELEASES))
@pytest.mark.parametrize("sink", ["jdbc", "mariadb", "kafka", "jms", "routing"])
def test_a_batch_a_release_decided_is_finished_once_by_todays_code(services, tmp_path, released, version,
                                                                  sink):
    case = SINKS[sink](services)
    target = case.new_target()
    write_json_files(tmp_path / "src", [BATCH] * 3)
    job = tmp_path / "job"
    job.mkdir()
    script = job / "job.py"
    script.write_text(Path(released_job.__file__).read_text())
    py = released[version]
    env = {**_outside_env(), "PYSPARK_PYTHON": str(py), "PYSPARK_DRIVER_PYTHON": str(py),
           "SPARK_EXT_FAILPOINT_LOG": str(tmp_path / "struck.log")}
    point = f"{case.name}.after_decision@1"
    old = subprocess.run([str(py), str(script), "files", str(tmp_path / "src"), str(tmp_path / "ckpt"),
                          "|".join(case.select), point, *case.argv_options(target)],
                         cwd=job, env=env, start_new_session=True, capture_output=True, text=True,
                         timeout=600)
    assert old.returncode == -9, driver_report(old)
    assert _imported(py).startswith(str(py.parent.parent)), "the released job would not run its wheel"
    assert case.committed(target) == list(range(BATCH))  # batch 0 in, batch 1 decided only
    done = run_driver(case, tmp_path, target)  # today's code, from the checkout
    assert done.returncode == 0, driver_report(done)
    assert case.committed(target) == list(range(3 * BATCH))
    assert case.in_doubt(tmp_path / "ckpt", target) == []


@pytest.mark.parametrize("version", sorted(release.RELEASES))
def test_the_queue_sources_recorded_ids_of_a_release_are_read_once_by_todays_code(services, tmp_path,
                                                                                  released, version):
    """The queue source's offsets (the ids of each batch's messages, in Spark's offset log) as a
    release recorded them, killed right after batch 2's decision with messages received and not
    acknowledged: today's code replays that batch from the recorded ids, and every message lands
    once, all acknowledged."""
    dest, table = queue_name("upgrade"), table_name("upgrade_q")
    execute(services.postgres_url, f"CREATE TABLE {table} (message_id text, body text)")
    sent = [f"p{i}" for i in range(200)]
    send(services, dest, sent)
    job = tmp_path / "job"
    job.mkdir()
    script = job / "job.py"
    script.write_text(Path(released_job.__file__).read_text())
    py = released[version]
    env = {**_outside_env(), "PYSPARK_PYTHON": str(py), "PYSPARK_DRIVER_PYTHON": str(py)}
    argv = driver_argv(services, dest, tmp_path / "ckpt", table)[3:]  # after "python -m module"
    old = subprocess.run([str(py), str(script), "queue", *argv, "jdbc.after_decision@2"], cwd=job, env=env,
                         start_new_session=True, capture_output=True, text=True, timeout=600)
    assert old.returncode == -9, driver_report(old)
    landed = [b for (b,) in query(services.postgres_url, f"SELECT body FROM {table}")]
    assert 0 < len(landed) < 200 and len(set(landed)) == len(landed), len(landed)
    done = subprocess.run([*driver_argv(services, dest, tmp_path / "ckpt", table), "200", "-"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, driver_report(done)
    rows = query(services.postgres_url, f"SELECT body, count(*) FROM {table} GROUP BY body")
    assert sorted(b for b, _ in rows) == sorted(sent) and all(n == 1 for _, n in rows)
    assert prepared(services.postgres_url, checkpoint_sink_id(str(tmp_path / "ckpt"))) == []
    assert drain(services, dest) == []  # every message acknowledged


def _imported(py: Path) -> str:
    """Where the released virtualenv imports spark_ext from, seen from outside the checkout."""
    return subprocess.run([str(py), "-c", "import spark_ext; print(spark_ext.__file__)"], cwd="/",
                          env=_outside_env(), capture_output=True, text=True).stdout.strip()
