"""The soak's driver: start the job, send, kill, sample, stop, verify, summarise."""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.soak import probes

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = ("minute", "run", "batches", "rss_mb", "rss_jvm_mb", "rss_python_mb", "heap_used_mb", "heap_old_mb",
           "python_procs", "fds",
           "jvm_threads", "checkpoint_mb", "checkpoint_files", "local_dir_mb", "commit_rows",
           "staged_messages", "batch_p50_ms", "batch_p99_ms", "visible_p50_ms", "visible_p99_ms",
           "lag_records", "event")


@dataclass(frozen=True)
class Plan:
    """When the faults come and what the summary compares, in minutes from the first
    payment sent."""

    minutes: float
    job_kills: tuple[float, ...]
    worker_kills: tuple[float, ...]
    ref: float  # the "10 minutes" reference (half the run when it is shorter than 20)
    window: float  # minutes of batches a p99 is taken over

    @classmethod
    def of(cls, args: argparse.Namespace) -> Plan:
        ref = min(10.0, args.minutes / 2)
        window = min(args.window, ref / 2)
        workers: list[float] = []
        t = ref + 1
        while args.worker_kill_every > 0 and t <= args.minutes - window - 1:  # none in the end window
            workers.append(t)
            t += args.worker_kill_every
        return cls(args.minutes, tuple(sorted(x for x in args.job_kill_at if x < args.minutes)),
                   tuple(workers), ref, window)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="soak", description="make soak: the payments job for an hour")
    ap.add_argument("--minutes", type=float, default=60.0, help="how long payments are sent")
    ap.add_argument("--rate", type=float, default=400.0, help="payments per second")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--sample-s", type=float, default=60.0, help="seconds between samples")
    ap.add_argument("--window", type=float, default=5.0,
                    help="minutes of batches the 10-minute and the end p99 are taken over")
    ap.add_argument("--job-kill-at", type=float, nargs="*", default=[4.0],
                    help="minutes at which the job's process group gets kill -9")
    ap.add_argument("--worker-kill-every", type=float, default=7.0,
                    help="minutes between kill -9s of a busy executor Python worker (0: none)")
    ap.add_argument("--driver-memory", default="1g",
                    help="the driver JVM's heap (spark-submit's own default)")
    ap.add_argument("--growing-heap", action="store_true",
                    help="let the heap grow toward --driver-memory as the JVM likes (default: the whole heap "
                         "from the start, so resident memory shows growth of what the job holds, not of "
                         "what the JVM has reserved)")
    ap.add_argument("--work-dir", default=str(ROOT / ".local" / "soak"))
    return ap


def main(argv: list[str] | None = None) -> int:
    from examples.payments.demo import DemoError

    args = parser().parse_args(argv)
    try:
        return run(args)
    except DemoError as e:
        print(f"\nsoak failed: {e}", file=sys.stderr)
        return 1


class Sampler:
    """One CSV row a minute from the job's processes, directories, bookkeeping and figures."""

    def __init__(self, url: str, checkpoint: Path, local: Path, staged: Any, vis: probes.Visibility,
                 batches: probes.Batches, t0: float, sink_prefix: str, csv_path: Path) -> None:
        import sqlalchemy as sa

        self.sink_prefix = sink_prefix  # the routing sink's id: its own rows and its sub-sinks'
        self.csv_path = csv_path  # each row appended as sampled: a run cut short keeps its rows
        self.caught_up: list[float] = []  # when the job had caught up after each restart
        self.engine = sa.create_engine(url, pool_pre_ping=True)
        self.checkpoint, self.local, self.staged = checkpoint, local, staged
        self.vis, self.batches, self.t0 = vis, batches, t0
        self.rows: list[dict[str, Any]] = []
        self.marks: list[tuple[float, str]] = []

    def minute(self, now: float | None = None) -> float:
        return ((now or time.monotonic()) - self.t0) / 60

    def mark(self, what: str) -> None:
        self.marks.append((round(self.minute(), 2), what))
        print(f"[soak] {self.minute():6.1f} min: {what}", flush=True)

    def sample(self, run: int, pid: int, period_s: float, lag: int | None) -> dict[str, Any]:
        import sqlalchemy as sa

        now = time.monotonic()
        procs = probes.steady_look(pid)
        heap = probes.heap_mb(pid)
        ck_mb, ck_files = probes.dir_size(self.checkpoint)
        local_mb, _ = probes.dir_size(self.local)
        try:
            with self.engine.connect() as conn:
                commit_rows = conn.execute(
                    sa.text("SELECT count(*) FROM spark_ext_commits WHERE sink_id LIKE :p"),
                    {"p": self.sink_prefix + "%"}).scalar_one()
        except sa.exc.DBAPIError:
            commit_rows = 0  # not created before the first batch
        try:
            staged = self.staged()
        except Exception as e:  # noqa: BLE001 - a sample, not the verification
            print(f"[soak] staged messages not read: {e}", file=sys.stderr)
            staged = ""
        durs = self.batches.durations(now - period_s, now)
        lat = self.vis.latencies_ms(now - period_s, now)
        row = {"minute": round(self.minute(now), 2), "run": run, "batches": len(self.batches),
               "rss_mb": round(procs.rss_mb), "rss_jvm_mb": round(procs.rss_jvm_mb),
               "rss_python_mb": round(procs.rss_python_mb), "heap_used_mb": heap[0] if heap else "",
               "heap_old_mb": heap[1] if heap else "", "python_procs": procs.python_procs,
               "fds": procs.fds, "jvm_threads": procs.threads_jvm, "checkpoint_mb": ck_mb,
               "checkpoint_files": ck_files, "local_dir_mb": local_mb, "commit_rows": commit_rows,
               "staged_messages": staged, "batch_p50_ms": _r(probes.percentile(durs, 0.5)),
               "batch_p99_ms": _r(probes.percentile(durs, 0.99)),
               "visible_p50_ms": _r(probes.percentile(lat, 0.5)),
               "visible_p99_ms": _r(probes.percentile(lat, 0.99)), "lag_records": "" if lag is None else lag,
               "event": "; ".join(w for m, w in self.marks if m > row_since(self.rows))}
        self.rows.append(row)
        with self.csv_path.open("a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=COLUMNS)
            if len(self.rows) == 1:
                w.writeheader()
            w.writerow({c: row.get(c, "") for c in COLUMNS})
        print("[soak] " + " ".join(f"{k}={v}" for k, v in row.items() if v != ""), flush=True)
        return row

    def close(self) -> None:
        self.engine.dispose()


def row_since(rows: list[dict[str, Any]]) -> float:
    return float(rows[-1]["minute"]) if rows else -1.0


def _r(x: float | None) -> Any:
    return "" if x is None else round(x)


def run(args: argparse.Namespace) -> int:
    import sqlalchemy as sa
    from kafka import KafkaConsumer, TopicPartition

    from examples.payments import demo, generator
    from examples.payments.demo import DemoError
    from examples.payments.job import LEDGER, QUERY
    from examples.payments.verify import Queue, staged_messages, verify
    from services.env import load_env
    from spark_ext import release as native
    from spark_ext.options import SEPARATOR
    from spark_ext.routing.config import routing_id

    plan = Plan.of(args)
    svc = load_env()
    bootstrap, url = svc["KAFKA_BOOTSTRAP_SERVERS"], svc["POSTGRES_URL"]
    run_id = time.strftime("%Y%m%d-%H%M%S")
    work = (Path(args.work_dir) / run_id).resolve()
    local, tmp = work / "spark-local", work / "tmp"
    for d in (local, tmp):
        d.mkdir(parents=True)
    job_file = work / demo.JOB.name
    shutil.copy(demo.JOB, job_file)
    topic, alerts = f"soak-payments-{run_id}", f"soak-alerts-{run_id}"
    notices = Queue(svc["STOMP_HOST"], int(svc["STOMP_PORT"]), svc["STOMP_USER"], svc["STOMP_PASSWORD"],
                    f"/queue/soak-notices-{run_id}")
    engine = sa.create_engine(url)
    demo.reset_tables(engine)
    generator.ensure_topic(bootstrap, topic, demo.PARTITIONS)
    generator.ensure_topic(bootstrap, alerts, 1)
    checkpoint = work / "checkpoint"
    env = dict(os.environ, STOMP_PASSWORD=svc["STOMP_PASSWORD"], TMPDIR=str(tmp),
               PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env.pop("SPARK_LOCAL_DIRS", None)  # it would win over spark.local.dir below
    env.setdefault("SPARK_EXT_WINDOWS_FOLD", "jvm")
    # Spark's scratch (spark-*, blockmgr-*) under the run's directory: a kill -9 skips the
    # JVM's shutdown hook that deletes it, so it is measured here and removed at the end.
    # The JVM commits heap as it goes, up to --driver-memory: left to grow, a heap whose live
    # set is flat reads as 30 minutes of growing memory (a 35-minute run: 396 MB committed at
    # start, 858 MB at minute 34, 164 MB live), so the whole heap is taken at start.
    heap = "" if args.growing_heap else f" -Xms{args.driver_memory} -XX:+AlwaysPreTouch"
    cmd = [demo.spark_submit(), "--master", "local[2,4]", "--packages", native.coordinate(),
           "--driver-memory", args.driver_memory,
           "--conf", f"spark.local.dir={local}", "--conf", "spark.driver.host=127.0.0.1",
           "--conf", "spark.driver.bindAddress=127.0.0.1", "--driver-java-options",
           f"-Djava.io.tmpdir={tmp}{heap}",
           str(job_file), "--bootstrap", bootstrap, "--topic", topic, "--alerts-topic", alerts,
           "--postgres-url", url, "--checkpoint", str(checkpoint), "--status", str(work / "status.json"),
           "--stomp-host", notices.host, "--stomp-port", str(notices.port), "--stomp-user", notices.user,
           "--notices-queue", notices.destination]
    count = int(args.rate * args.minutes * 60)
    print(f"soak {run_id}: {count:,} payments at {args.rate:g}/s for {args.minutes:g} min to {topic}; "
          f"job kill -9 at {list(plan.job_kills)} min, a worker's at {list(plan.worker_kills)} min; "
          f"samples and logs in {work}", flush=True)

    vis = probes.Visibility(url, LEDGER, args.seed, count)
    reader = probes.Notices(notices.host, notices.port, notices.user, notices.password, notices.destination)
    batches = probes.Batches()
    rid = routing_id(str(checkpoint))
    sink_id = f"{rid}{SEPARATOR}notices"
    sent: list[int] = []
    gen_error: list[Exception] = []

    def send() -> None:
        try:
            sent.append(generator.send(bootstrap, topic, vis.track(generator.events(count, seed=args.seed)),
                                       args.rate))
        except Exception as e:  # noqa: BLE001 - reported by the main loop at once
            gen_error.append(e)

    gen = threading.Thread(target=send, name="soak-generator", daemon=True)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    tps = [TopicPartition(topic, p) for p in range(demo.PARTITIONS)]
    runs = 1
    job = demo.Job(cmd, env, work / "status.json", work / "job-1.log", work)
    sampler: Sampler | None = None
    t0 = time.monotonic()
    counts: dict[str, int] = {}
    verified = goals = False
    try:
        deadline = time.monotonic() + 300
        while job.status() is None:
            job.check_alive()
            demo.wait(deadline, "the job to start its query")
        t0 = time.monotonic()
        gen.start()
        vis.start()
        reader.start()
        sampler = Sampler(url, checkpoint, local, lambda: staged_messages(notices, sink_id), vis, batches, t0,
                          rid, work / "samples.csv")
        deadline = t0 + args.minutes * 60 + 900
        job_kills, worker_kills = list(plan.job_kills), list(plan.worker_kills)
        next_sample, worker_tries = t0 + args.sample_s, 0
        restarted: float | None = None  # when the job was last started again, until it caught up
        caught_up_lag = max(1000, int(args.rate * 4))  # two 2 s triggers' worth
        while True:
            job.check_alive()
            demo.wait(deadline, "the job to read every payment")
            if gen_error:
                raise DemoError(f"the payment generator failed: {gen_error[0]!r}")
            if reader.error:
                raise DemoError(f"reading the notices: {reader.error}")
            status = job.status()
            batches.update(runs, status, QUERY)
            now = time.monotonic()
            minute = sampler.minute(now)
            if restarted is not None and status is None and now - restarted > 300:
                raise DemoError(f"the job started again at minute {sampler.minute(restarted):.1f} wrote no "
                                f"status in 300 s (log: {job.log})")
            if job_kills and minute >= job_kills[0] and demo.committed(engine)[1] > 0:
                job_kills.pop(0)
                job.kill9()
                sampler.mark("kill -9 of the job")
                runs += 1
                job = demo.Job(cmd, env, work / "status.json", work / f"job-{runs}.log", work)
                restarted = time.monotonic()
                continue
            if worker_kills and minute >= worker_kills[0]:
                w = probes.busy_executor_worker(job.proc.pid)
                worker_tries += 1
                if w is not None or worker_tries >= 100:
                    worker_kills.pop(0)
                    if w is not None:
                        w.kill()
                        sampler.mark(f"kill -9 of an executor's Python worker (pid {w.pid})")
                    else:
                        sampler.mark("no executor Python worker ran a task in 100 looks: none killed")
                    worker_tries = 0
            end = sum(consumer.end_offsets(tps).values())
            q = ((status or {}).get("queries") or {}).get(QUERY) or {}
            read = demo.read_total(q.get("end_offset"))
            if restarted is not None and q and end - read <= caught_up_lag:
                sampler.caught_up.append(now)
                sampler.mark(f"caught up after the restart (lag {max(0, end - read):,})")
                restarted = None
            if now >= next_sample:
                next_sample += args.sample_s
                sampler.sample(runs, job.proc.pid, args.sample_s, max(0, end - read) if q else None)
            if sent and read >= end:
                break
        sampler.mark(f"the query read all {end:,} events; stopping the job (SIGTERM)")
        job.stop()
        vis.stop()
        reader.stop()
        if reader.error:
            raise DemoError(f"reading the notices: {reader.error}")
        rep = verify(bootstrap, topic, alerts, url, 5000.0, str(checkpoint), notices, reader.ids)
        print("\n".join(rep.lines))
        print("verification: " + ("passed" if rep.ok else "FAILED"))
        counts, verified = rep.counts, rep.ok
    except BaseException:
        job.kill9()
        raise
    finally:
        vis.stop()
        reader.stop()
        consumer.close()
        engine.dispose()
        batches.write_csv(work / "batches.csv", t0)
        if sampler is not None:
            sampler.close()
            _chart(sampler, work / "soak.png", plan)
            goals = summarise(plan, sampler, batches, vis, t0, counts)
        if vis.error:
            print(f"visibility poller stopped early: {vis.error}", file=sys.stderr)
        shutil.rmtree(local, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)
    if verified:  # an hour of payments is a gigabyte or two; a failed run keeps them to look at
        _delete_topics(bootstrap, [topic, alerts])
    return 0 if verified and goals else 1


def _delete_topics(bootstrap: str, topics: list[str]) -> None:
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.delete_topics(topics)
    except KafkaError as e:
        print(f"the soak's topics {topics} were not deleted: {e}", file=sys.stderr)
    finally:
        admin.close()


def _chart(sampler: Sampler, out: Path, plan: Plan) -> None:
    from bench.soak.chart import draw

    try:
        print(f"chart: {draw(sampler.rows, sampler.marks, out, plan.minutes, plan.ref)}")
    except ImportError as e:
        print(f"no chart: {e} (pip install -e '.[docs]')", file=sys.stderr)


def _at(rows: list[dict[str, Any]], minute: float) -> dict[str, Any]:
    """The last sample taken at or before ``minute`` (the first when none was)."""
    before = [r for r in rows if float(r["minute"]) <= minute + 0.05]
    return before[-1] if before else rows[0]


def summarise(plan: Plan, sampler: Sampler, batches: probes.Batches, vis: probes.Visibility, t0: float,
              counts: dict[str, int]) -> bool:
    """Print the ``SOAK`` line (every key, -1 for a figure not measured) and the
    ``SOAK_GOALS`` line; whether every goal held. A p99 is taken over the ``window``
    minutes before the mark, started no earlier than the job caught up after its last
    restart: the catch-up batches measure the crash, not the drift the goals are about."""
    rows = sampler.rows
    ref = _at(rows, plan.ref) if rows else {}
    end = _at(rows, plan.minutes) if rows else {}

    def p99(upto: float, of: str) -> float | None:
        until = t0 + upto * 60
        since = max([t0 + (upto - plan.window) * 60, *(t for t in sampler.caught_up if t <= until)])
        xs = batches.durations(since, until) if of == "batch" else vis.latencies_ms(since, until)
        return probes.percentile(xs, 0.99)

    def n(row: dict[str, Any], key: str) -> int:
        v = row.get(key)
        return -1 if v in (None, "") else round(float(v))

    p_ref, p_end = p99(plan.ref, "batch"), p99(plan.minutes, "batch")
    v_ref, v_end = p99(plan.ref, "visible"), p99(plan.minutes, "visible")
    num = {"p_ref": _n(p_ref), "p_end": _n(p_end)}
    print(f"SOAK minutes={plan.minutes:g} batches={len(batches)} rss_mb_10min={n(ref, 'rss_mb')} "
          f"rss_mb_end={n(end, 'rss_mb')} fds_10min={n(ref, 'fds')} fds_end={n(end, 'fds')} "
          f"p99_ms_10min={num['p_ref']} p99_ms_end={num['p_end']} duplicates={counts.get('duplicates', -1)} "
          f"lost={counts.get('lost', -1)} in_doubt={counts.get('in_doubt', -1)}", flush=True)
    print(f"SOAK_LATENCY visible_p99_ms_10min={_n(v_ref)} visible_p99_ms_end={_n(v_end)} "
          f"checkpoint_files_10min={n(ref, 'checkpoint_files')} "
          f"checkpoint_files_end={n(end, 'checkpoint_files')} "
          f"commit_rows_10min={n(ref, 'commit_rows')} commit_rows_end={n(end, 'commit_rows')} "
          f"visibility_unseen={vis.skipped}", flush=True)
    goals = {
        "rss": rows != [] and n(end, "rss_mb") <= 1.10 * n(ref, "rss_mb"),
        "fds": rows != [] and n(end, "fds") <= 1.10 * n(ref, "fds"),
        "p99": p_ref is not None and p_end is not None and p_end <= 1.20 * p_ref,
        "checkpoint": rows != [] and n(end, "checkpoint_files") <= 1.10 * n(ref, "checkpoint_files") + 50,
        "bookkeeping": rows != [] and n(end, "commit_rows") <= 1.10 * n(ref, "commit_rows") + 20,
        "verified": counts.get("duplicates") == 0 and counts.get("lost") == 0 and counts.get("in_doubt") == 0,
    }
    print("SOAK_GOALS " + " ".join(f"{k}={'held' if v else 'MISSED'}" for k, v in goals.items()), flush=True)
    return all(goals.values())


def _n(x: float | None) -> int:
    return -1 if x is None else round(x)
