"""``make demo``: the payments job under a real crash, then a check of every output.

Steps: start the job with ``spark-submit`` (the services must be up: ``make services``);
send payments to Kafka while it runs; once the ledger and the windows hold committed rows,
``kill -9`` the job's whole process group; start it again from its checkpoint; when every
query has read the whole topic, stop it with SIGTERM; verify (``verify.py``). Progress is
a live table on a terminal (``Progress``), a plain line every 5 s otherwise; Spark's log
goes to ``<work dir>/<run>/job-<n>.log`` (``--work-dir``, default ``.local/demo``), where
the job script is copied and run from. Exit status 0 when nothing was lost, duplicated
or left in doubt.

The job is launched as users launch it: ``spark-submit --packages
dev.sparkext:spark-ext-native_2.13:<version>`` (the companion jar, which ``make jvm``
installs into the local Maven repository), so the windows fold in the JVM
(``SPARK_EXT_WINDOWS_FOLD=jvm`` unless set: the job fails if the jar is missing).

``--master spark://...`` and ``--submit-arg`` run the same job on a cluster
(``examples/payments/cluster.py``, ``make cluster-demo``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import Console
from rich.live import Live
from rich.table import Table

from examples.payments import generator
from examples.payments.job import LEDGER, QUERY, WINDOWS
from examples.payments.metrics_chart import MetricsSampler
from examples.payments.verify import Queue, verify

if TYPE_CHECKING:
    import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[2]
JOB = Path(__file__).resolve().parent / "job.py"
PARTITIONS = 3  # of the payments topic


class DemoError(Exception):
    """The demo could not run to its verification; the message says why."""


def spark_submit() -> str:
    """``spark-submit`` of the pyspark installed beside this interpreter."""
    path = Path(sys.executable).parent / "spark-submit"
    if not path.exists():
        raise DemoError(f"{path} not found: install the package (`make venv`)")
    return str(path)


class Job:
    """One run of the job: a ``spark-submit`` process group and its status file."""

    def __init__(self, cmd: list[str], env: dict[str, str], status: Path, log: Path, cwd: Path) -> None:
        status.unlink(missing_ok=True)
        self.status_path, self.log = status, log
        with log.open("wb") as out:
            self.proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True, cwd=cwd)

    def status(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.status_path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-25:])
            raise DemoError(f"the job exited with status {self.proc.returncode}; its log {self.log} "
                            f"ends:\n{tail}")
        snap = self.status()
        for name, q in (snap or {}).get("queries", {}).items():
            if q.get("error"):
                raise DemoError(f"query {name} failed: {q['error']} (log: {self.log})")

    def kill9(self) -> None:
        """What a crash does: the driver's JVM, its Python and their children, at once."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # the whole group is gone already
        self.proc.wait()

    def stop(self, timeout: float = 120) -> None:
        """SIGTERM to the job's Python: it stops its queries between micro-batches."""
        snap = self.status()
        if snap:
            os.kill(int(snap["pid"]), signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            raise DemoError(f"the job did not stop within {timeout:.0f} s after SIGTERM") from None


def read_total(offsets: dict[str, Any] | None) -> int:
    return sum(int(v) for parts in (offsets or {}).values() for v in parts.values())


QUERIES = (QUERY,)


class Progress:
    """A live table on a terminal (``rich``): per query its batch, rows/s, lag and how long
    ago its last batch committed. Not a terminal (a log, a test): the plain line every 5 s."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self.tty = self.out.isatty()
        self.last = 0.0
        self.moved: dict[str, tuple[int, float]] = {}  # query -> (batch, when it was first seen)
        self.live: Live | None = None  # started by the first show(), stopped by close()

    def show(self, runs: int, queries: dict[str, dict[str, Any]], read: dict[str, int], end: int,
             rate: float) -> None:
        now = time.monotonic()
        for name, q in queries.items():
            batch = int(q.get("batch", -1))
            if self.moved.get(name, (None, 0.0))[0] != batch:
                self.moved[name] = (batch, now)
        if self.tty:
            if self.live is None:
                self.live = Live(console=Console(file=self.out), refresh_per_second=2)
                self.live.start()
            self.live.update(self._table(runs, queries, read, end, rate, now))
        elif now - self.last >= 5:
            print(plain_line(runs, queries, read, end, rate), file=self.out, flush=True)
            self.last = now

    def _table(self, runs: int, queries: dict[str, dict[str, Any]], read: dict[str, int], end: int,
               rate: float, now: float) -> Table:
        t = Table(title=f"payments demo, run {runs}", title_justify="left",
                  caption=f"sent {end:,} | read {rate:,.0f} rows/s", caption_justify="left")
        for col in ("query", "batch", "rows/s", "lag", "last commit"):
            t.add_column(col, justify="left" if col == "query" else "right")
        for name in QUERIES:
            q = queries.get(name)
            if q is None or int(q.get("batch", -1)) < 0:
                t.add_row(name, "-", "-", f"{end - read.get(name, 0):,}", "-")
                continue
            ago = now - self.moved[name][1]
            t.add_row(name, str(q["batch"]), f"{float(q.get('rows_per_s') or 0):,.0f}",
                      f"{end - read.get(name, 0):,}", f"{ago:.0f} s ago")
        return t

    def done(self, text: str) -> None:
        """A line that stays (the kill, the end), above the live table on a terminal."""
        if self.live is not None:
            self.live.console.print(text, markup=False, highlight=False)
        else:
            print(text, file=self.out, flush=True)

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None


def plain_line(runs: int, queries: dict[str, dict[str, Any]], read: dict[str, int], end: int,
               rate: float) -> str:
    """The progress line printed when stdout is not a terminal (its format is relied on)."""
    batches = "/".join(str(queries.get(n, {}).get("batch", "-")) for n in QUERIES)
    return (f"run {runs} | batch {batches} | {rate:,.0f} rows/s | "
            f"lag {end - min(read.values(), default=0):,} | sent {end:,}")


def run(args: argparse.Namespace, submit_args: Sequence[str], env: dict[str, str],
        environment: Path | None = None) -> int:
    import sqlalchemy as sa
    from kafka import KafkaConsumer, TopicPartition

    from spark_ext import monitoring
    from spark_ext import release as native

    run_id = time.strftime("%Y%m%d-%H%M%S")
    work = (Path(args.work_dir) / run_id).resolve()
    work.mkdir(parents=True)
    job_file = work / JOB.name  # run from the work directory, outside the checkout if it is
    shutil.copy(JOB, job_file)
    if environment is not None:
        # The driver runs the shipped environment too, from its working directory: Python
        # data sources run the driver's interpreter path on the executors as well.
        (work / "environment").symlink_to(environment)
    topic, alerts = f"payments-{run_id}", f"payment-alerts-{run_id}"
    notices = Queue(args.stomp_host, args.stomp_port, args.stomp_user, env.get("STOMP_PASSWORD", ""),
                    f"/queue/payment-notices-{run_id}")
    engine = sa.create_engine(args.postgres_url)  # one pool for the whole run
    reset_tables(engine)
    generator.ensure_topic(args.bootstrap, topic, PARTITIONS)
    generator.ensure_topic(args.bootstrap, alerts, 1)
    job_args = ["--bootstrap", args.bootstrap, "--topic", topic, "--alerts-topic", alerts,
                "--postgres-url", args.postgres_url, "--checkpoint", str(work / "checkpoint"),
                "--limit", str(args.limit), "--status", str(work / "status.json"),
                "--stomp-host", notices.host, "--stomp-port", str(notices.port), "--stomp-user", notices.user,
                "--notices-queue", notices.destination]
    sampler = MetricsSampler(_free_port()) if args.metrics_chart else None
    packages = ["--packages", native.coordinate()]
    if sampler is not None:
        # From the settings alone, the job unchanged: the companion jar's listener serves them.
        packages += ["--conf", f"{monitoring.CONF_LISTENERS}={monitoring.LISTENER}",
                     "--conf", f"{monitoring.CONF_PORT}={sampler.port}"]
    cmd = [spark_submit(), "--master", args.master, *packages, *submit_args, str(job_file), *job_args]
    print(f"payments demo {run_id}: {args.count} payments to Kafka topic {topic}; job: "
          f"spark-submit --master {args.master} {' '.join(packages)} job.py; logs in {work}", flush=True)

    consumer = KafkaConsumer(bootstrap_servers=args.bootstrap)
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    sent: list[int] = []
    gen = threading.Thread(target=lambda: sent.append(generator.send(
        args.bootstrap, topic, generator.events(args.count, seed=args.seed), args.rate)), daemon=True)
    progress = Progress()
    deadline = time.monotonic() + args.timeout
    runs, killed_at = 1, ""
    job = Job(cmd, env, work / "status.json", work / "job-1.log", work)
    try:
        while job.status() is None:
            job.check_alive()
            wait(deadline, "the job to start its query")
        gen.start()
        if sampler is not None:
            sampler.start()
        rate, prev = 0.0, (time.monotonic(), 0)
        while True:
            job.check_alive()
            wait(deadline, "the job to read every payment")
            snap = job.status() or {"queries": {}}
            qs = snap["queries"]
            end = sum(consumer.end_offsets(tps).values())
            read = {n: read_total(q.get("end_offset")) for n, q in qs.items()}
            now = time.monotonic()
            if now - prev[0] >= 1:
                rate = 0.7 * rate + 0.3 * max(0, read.get(QUERY, 0) - prev[1]) / (now - prev[0])
                prev = (now, read.get(QUERY, 0))
            progress.show(runs, qs, read, end, rate)
            if runs == 1 and read.get(QUERY, 0) >= args.kill_fraction * args.count and (
                    rows := committed(engine))[1] > 0:
                # Killed after both tables hold committed rows: a replay that wrote them
                # again would show as duplicates, not only a gap as loss.
                job.kill9()
                if sampler is not None:
                    sampler.mark("kill -9")
                killed_at = (f"killed with {rows[0]:,} ledger rows and {rows[1]:,} windows "
                             f"committed, {read[QUERY]:,} events read")
                progress.done(f"kill -9 of the job's process group ({killed_at}); restarting it")
                runs += 1
                job = Job(cmd, env, work / "status.json", work / f"job-{runs}.log", work)
                continue
            if sent and runs > 1 and read.get(QUERY) == end:
                break
        progress.done(f"the query has read all {end:,} events; stopping the job (SIGTERM)")
        job.stop()
    except BaseException:
        if job.proc.poll() is None:
            os.killpg(job.proc.pid, signal.SIGKILL)
        raise
    finally:
        progress.close()
        consumer.close()
        engine.dispose()
        if sampler is not None:
            sampler.stop()
            print(sampler.chart(work / "metrics.csv", Path(args.metrics_chart)))
    rep = verify(args.bootstrap, topic, alerts, args.postgres_url, args.limit, str(work / "checkpoint"),
                 notices)
    rep.add(f"kill -9 and restart: {runs - 1} ({killed_at})", runs > 1)
    print("\n".join(rep.lines))
    print("verification: " + ("passed" if rep.ok else "FAILED"))
    return 0 if rep.ok else 1


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait(deadline: float, what: str) -> None:
    if time.monotonic() > deadline:
        raise DemoError(f"timed out waiting for {what}")
    time.sleep(0.5)


def committed(engine: sa.Engine) -> tuple[int, int]:
    """Rows committed so far: (ledger, windows); tables the job has not created count 0."""
    import sqlalchemy as sa

    try:
        with engine.connect() as conn:
            ledger, windows = (conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one()
                               for t in (LEDGER, WINDOWS))
            return int(ledger), int(windows)
    except sa.exc.ProgrammingError:
        return 0, 0


def reset_tables(engine: sa.Engine) -> None:
    """Drop the tables of an earlier run. A run killed before it finished a batch leaves
    that batch's prepared transactions holding locks on them (its checkpoint, which would
    have finished them, is that run's alone), so the DROP would wait forever: the earlier
    runs' prepared transactions on these tables are rolled back first, and the DROP gives
    up after 30 s naming what still holds a lock."""
    import sqlalchemy as sa

    with engine.begin() as conn:
        gids = conn.execute(sa.text(
            "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() "
            "AND (gid LIKE 'sx:rt-%--ledger:%' OR gid LIKE 'sx:rt-%--windows:%')")).scalars().all()
    with engine.connect() as conn:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")  # ROLLBACK PREPARED: no transaction block
        for gid in gids:
            conn.execute(sa.text("ROLLBACK PREPARED :gid"), {"gid": gid})
    with engine.begin() as conn:
        conn.execute(sa.text("SET LOCAL lock_timeout = '30s'"))
        try:
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {LEDGER}, {WINDOWS}"))
        except sa.exc.OperationalError as e:
            raise DemoError(f"{LEDGER} and {WINDOWS} are locked by another session (a payments job "
                            f"still running?): {e.orig}") from None


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="payments-demo", description=__doc__.split("\n")[0])
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--submit-arg", action="append", default=[], help="extra spark-submit argument")
    ap.add_argument("--work-dir", default=str(ROOT / ".local" / "demo"),
                    help="where each run's checkpoint, logs and job script go")
    ap.add_argument("--count", type=int, default=20000, help="payments to send")
    ap.add_argument("--rate", type=float, default=400.0, help="events per second")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--limit", type=float, default=5000.0, help="alert above this window sum")
    ap.add_argument("--kill-fraction", type=float, default=0.3, help="kill once this share was read")
    ap.add_argument("--timeout", type=float, default=600.0, help="give up after this many seconds")
    ap.add_argument("--metrics-chart", help="serve the job's metrics (turned on by spark-submit settings "
                    "alone: the job is unchanged), scrape them every second and draw "
                    "this PNG (and metrics.csv in the run's directory)")
    return ap


def main(argv: list[str] | None = None, *, submit_args: Sequence[str] = (),
         environment: Path | None = None) -> int:
    """Run the demo; ``submit_args`` go to spark-submit before the job (cluster.py ships
    the environment this way). With ``environment`` (the unpacked archive the executors
    get as ``./environment``), the driver runs ``./environment/bin/python`` as well."""
    from services.env import ServicesEnvError, load_env

    args = parser().parse_args(argv)
    try:
        svc = load_env()
    except ServicesEnvError as e:
        print(f"payments demo: {e}", file=sys.stderr)
        return 2
    args.bootstrap, args.postgres_url = svc["KAFKA_BOOTSTRAP_SERVERS"], svc["POSTGRES_URL"]
    args.stomp_host, args.stomp_user = svc["STOMP_HOST"], svc["STOMP_USER"]
    args.stomp_port = int(svc["STOMP_PORT"])
    env = dict(os.environ)
    env["STOMP_PASSWORD"] = svc["STOMP_PASSWORD"]  # to the job by its environment, not its arguments
    env.setdefault("SPARK_EXT_WINDOWS_FOLD", "jvm")  # the jar of --packages folds, or the job fails
    if args.master.startswith("local"):
        # Local mode: the driver's Python workers must run this interpreter.
        env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    elif environment is not None:
        import pyspark

        env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = "./environment/bin/python"
        env.pop("PYTHONPATH", None)  # the driver runs what the archive holds, nothing else
        # spark-submit would ask that Python where Spark is; the archive ships no pyspark.
        env["SPARK_HOME"] = str(Path(pyspark.__file__).resolve().parent)
    try:
        return run(args, [*submit_args, *args.submit_arg], env, environment)
    except DemoError as e:
        print(f"\npayments demo failed: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
