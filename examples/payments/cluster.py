"""``make cluster-demo``: the payments demo on a Spark standalone cluster on loopback.

1. Pack the environment executors need, as Spark documents for Python dependencies: a
   virtualenv with the spark-ext wheel and its dependencies (pinned to this
   environment's versions; pyspark itself comes from each worker's Spark), packed with
   ``venv-pack`` into ``.local/cluster/environment.tar.gz``.
2. Start a master and two workers from the installed pyspark (``spark-class
   org.apache.spark.deploy.master.Master`` / ``...worker.Worker``), bound to 127.0.0.1,
   with an environment in which ``python3`` lacks the package (no venv on PATH).
3. Run the demo (``demo.py``) with ``spark-submit --master spark://127.0.0.1:<port>
   --packages dev.sparkext:spark-ext-native_2.13:<version> --archives
   environment.tar.gz#environment`` and ``PYSPARK_PYTHON=./environment/bin/python``
   for the executors, from a work directory outside the checkout; the driver runs the
   shipped environment too (client mode).
4. Stop the cluster, whatever happened.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import importlib.metadata as md
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from examples.payments import demo

ROOT = Path(__file__).resolve().parents[2]
WORK = ROOT / ".local" / "cluster"
CACHE = Path.home() / ".cache" / "spark-ext" / "cluster-env"


class ClusterError(Exception):
    """The cluster or the packed environment could not be set up; the message says why."""


def _run(cmd: list[str], what: str, **kw: object) -> None:
    # Without PYTHONPATH: a checkout on it would make pip skip installing the wheel.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, **kw)  # type: ignore[call-overload]
    if res.returncode != 0:
        out = res.stdout[-2000:] + res.stderr[-2000:]
        raise ClusterError(f"{what} failed ({' '.join(cmd[:4])} ...):\n{out}")


EXTRAS = ("kafka", "postgres", "jms")  # the job's connectors: Kafka source and sink, PostgreSQL, queue


def _pins() -> list[str]:
    """spark-ext's runtime requirements and those of the job's connectors (``EXTRAS``) at the
    versions installed here, without pyspark."""
    wanted = [r for r in md.requires("spark-ext") or []
              if "extra ==" not in r or any(f'extra == "{e}"' in r for e in EXTRAS)]
    names = [re.split(r"[<>=!~; \[]", r, maxsplit=1)[0] for r in wanted]
    return [f"{n}=={md.version(n)}" for n in names if n.lower() not in ("pyspark", "spark-ext")]


def _dependencies_env() -> Path:
    """A virtualenv holding the pinned dependencies (``_pins``), built once per set of pins
    and Python version in ``~/.cache/spark-ext/cluster-env`` (outside the checkout, so a
    fresh clone reuses it): installing them is most of the packing time."""
    pins = _pins()
    key = hashlib.sha256("\n".join([sys.version, *sorted(pins)]).encode()).hexdigest()[:16]
    env = CACHE / key
    if not (env / ".complete").exists():
        shutil.rmtree(env, ignore_errors=True)
        env.parent.mkdir(parents=True, exist_ok=True)
        _run([sys.executable, "-m", "venv", "--clear", str(env)], "creating the executor virtualenv")
        _run([str(env / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
              *pins], "installing the dependencies")
        (env / ".complete").touch()  # only a finished install is reused
    return env


def pack_environment(out: Path = WORK) -> Path:
    """Build the wheel, install it into the virtualenv of its pinned dependencies and pack
    that with venv-pack; returns the archive."""
    out.mkdir(parents=True, exist_ok=True)
    dist, archive = out / "dist", out / "environment.tar.gz"
    shutil.rmtree(dist, ignore_errors=True)
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(ROOT)],
         "building the wheel")
    wheel = next(dist.glob("spark_ext-*.whl"))
    # One packing at a time: the dependencies' virtualenv is shared.
    with open(CACHE.parent / "cluster-env.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        env = _dependencies_env()
        _run([str(env / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
              "--no-deps", "--force-reinstall", str(wheel)], "installing the spark-ext wheel")
        if not list(env.glob("lib/python*/site-packages/spark_ext/__init__.py")):
            raise ClusterError(f"the spark-ext wheel did not land in {env}")
        # gzip level 1: several times faster to pack than the default 4, a few per cent larger
        _run([sys.executable, "-m", "venv_pack", "-p", str(env), "-o", str(archive), "--force", "-q",
              "--compress-level", "1"],
             "packing the environment (venv-pack)")
    return archive


def unpack(archive: Path) -> Path:
    """The archive unpacked beside it, as each executor unpacks it (for the driver)."""
    target = archive.parent / "environment"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir()
    _run(["tar", "-xzf", str(archive), "-C", str(target)], "unpacking the environment")
    return target


def _free_ports(n: int) -> list[int]:
    """``n`` distinct free ports: sockets held open together, so the kernel cannot hand the
    same port out twice before the daemons bind them."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def worker_env() -> dict[str, str]:
    """The environment of the cluster's daemons: nothing of this virtualenv, so executors
    see only the Python the archive ships."""
    venv_bin = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV", "PYTHONPATH",
                        "SPARK_HOME")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env["SPARK_HOME"] = spark_home()  # else spark-class asks python3, which lacks pyspark
    return env


def spark_home() -> str:
    import pyspark

    return str(Path(pyspark.__file__).resolve().parent)


class StandaloneCluster:
    """A master and ``workers`` workers sharing ``cores`` cores, loopback only."""

    def __init__(self, workers: int = 2, memory: str = "2g", work: Path = WORK, cores: int = 2) -> None:
        self.workers, self.memory, self.work = workers, memory, work
        self.cores = max(1, cores // workers)
        self.port, self.ui, *self.worker_ui = _free_ports(2 + workers)
        self.url = f"spark://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen[bytes]] = []

    def _start(self, name: str, args: list[str]) -> None:
        spark_class = Path(spark_home()) / "bin" / "spark-class"
        log = (self.work / f"{name}.log").open("wb")
        self.procs.append(subprocess.Popen([str(spark_class), *args], env=worker_env(), stdout=log,
                                           stderr=subprocess.STDOUT, start_new_session=True))

    def start(self, timeout: float = 90) -> StandaloneCluster:
        self.work.mkdir(parents=True, exist_ok=True)
        self._start("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(self.port), "--webui-port", str(self.ui)])
        for i in range(self.workers):
            wdir = self.work / f"worker-{i}"
            wdir.mkdir(exist_ok=True)
            self._start(f"worker-{i}", ["org.apache.spark.deploy.worker.Worker", self.url,
                                        "--host", "127.0.0.1",
                                        "--cores", str(self.cores), "--memory", self.memory, "--webui-port",
                                        str(self.worker_ui[i]), "--work-dir", str(wdir)])
        deadline = time.monotonic() + timeout
        while self.alive_workers() < self.workers:
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                self.stop()
                raise ClusterError(f"the standalone cluster did not come up with {self.workers} workers in "
                                   f"{timeout:.0f} s; logs in {self.work}")
            time.sleep(0.5)
        return self

    def alive_workers(self) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui}/json/", timeout=2) as r:
                body = r.read()
        except OSError:
            return 0
        try:
            return int(json.loads(body).get("aliveworkers", 0))
        except ValueError:
            # While the master starts, its UI can answer before its pages are mounted (an empty
            # body); that is "not up yet", like a refused connection.
            return 0

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self.procs.clear()
        self._drop_executor_files()

    def _drop_executor_files(self) -> None:
        """Keep each executor's stdout and stderr, drop the rest: every executor unpacks the
        shipped environment (hundreds of MiB) into its directory, and the worker never
        removes it."""
        for d in self.work.glob("worker-*/app-*/*"):
            for f in d.iterdir():
                if f.name in ("stdout", "stderr"):
                    continue
                if f.is_dir() and not f.is_symlink():
                    shutil.rmtree(f)
                else:
                    f.unlink()

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def submit_args(archive: Path) -> list[str]:
    """spark-submit arguments that ship ``archive`` as ``./environment`` to every executor."""
    return ["--archives", f"{archive}#environment", "--executor-memory", "1g", "--total-executor-cores", "2",
            "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="payments-cluster-demo", description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=20000)
    ap.add_argument("--rate", type=float, default=400.0)
    # One worker (one executor of two cores) ships the environment just as well and
    # starts two JVMs fewer; the suite uses it on its 2-core machine.
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    began = time.monotonic()
    try:
        print("packing the executors' environment (wheel + dependencies, venv-pack) ...", flush=True)
        archive = pack_environment()
        size = archive.stat().st_size / 2**20
        print(f"packed {archive} ({size:.0f} MiB) in {time.monotonic() - began:.0f} s; "
              f"starting a standalone cluster (a master, {args.workers} worker(s)) ...", flush=True)
        with StandaloneCluster(workers=args.workers) as cluster:
            print(f"cluster up at {cluster.url}", flush=True)
            # The job runs from a directory outside the checkout, as a user's would.
            outside = Path(tempfile.gettempdir()) / "spark-ext-cluster-demo"
            return demo.main(["--master", cluster.url, "--count", str(args.count), "--rate", str(args.rate),
                              "--work-dir", str(outside)],
                             submit_args=submit_args(archive), environment=unpack(archive))
    except ClusterError as e:
        print(f"cluster demo failed: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
