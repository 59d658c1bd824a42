"""What every bench case shares: the result line, the services' addresses, a Spark session,
and ``Rounds``, the way the write cases and ``peer_kafka_eo`` time their variants."""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import services as local_services
from services.env import ServicesEnvError, load_env

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "bench" / "results"

#: Rounds of a case timed with ``Rounds`` (``BENCH_ROUNDS``): round 0 is the cold one, the
#: figure is the median of the others, so at least 4 warm rounds.
DEFAULT_ROUNDS = 6
MIN_ROUNDS = 5


def rounds() -> int:
    """Rounds of each point of a scaling curve (``bench.scaling``), best of each
    (``BENCH_ROUNDS``, default 2: the first pays JVM and worker warm-up). The ``BENCH``
    cases that compare variants use ``round_count`` and ``Rounds`` instead."""
    return max(1, int(os.environ.get("BENCH_ROUNDS", "2")))


class BenchError(Exception):
    """A bench case could not run (a query failed, a service is missing)."""


def round_count(*names: str) -> int:
    """Rounds of a case timed with ``Rounds``: the first of the environment variables
    ``names`` (then ``BENCH_ROUNDS``) that is set, default ``DEFAULT_ROUNDS``. Fewer than
    ``MIN_ROUNDS`` is an error, raised before anything is staged: the cold round plus a
    median of fewer than four warm rounds would be the single-round figure again."""
    for name in (*names, "BENCH_ROUNDS"):
        value = os.environ.get(name)
        if value:
            break
    else:
        name, value = "BENCH_ROUNDS", str(DEFAULT_ROUNDS)
    try:
        n = int(value)
    except ValueError:
        raise BenchError(f"{name}={value!r} is not a number of rounds") from None
    if n < MIN_ROUNDS:
        raise BenchError(f"{name}={n}: a case timed in rounds needs at least {MIN_ROUNDS} (round 0 is the "
                         f"cold figure, the median is of the rest; default {DEFAULT_ROUNDS})")
    return n


@dataclass(frozen=True)
class Result:
    """One case's figures. ``ours`` and ``baseline`` are rows/s (or what the case says);
    ``ratio`` = ours / baseline. Cases timed with ``Rounds`` also carry the cold round's
    ratio, the spread of the warm rounds' ratios (paired round by round) and the number
    of rounds; ``figures`` are more ratios for the line (``name=value``), ``detail`` goes
    to the JSON only (every round's seconds of every variant)."""

    case: str
    ours: float
    baseline: float
    equal: bool
    cold_ratio: float | None = None
    spread: tuple[float, float] | None = None
    rounds: int | None = None
    figures: dict[str, float] = field(default_factory=dict)
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        return self.ours / self.baseline if self.baseline else float("nan")

    def line(self) -> str:
        """``BENCH <case> ours= baseline= ratio= equal=`` and, when measured, ``cold_ratio=``
        ``spread=<min>-<max>`` ``rounds=`` and the case's ``figures``: space-separated
        ``key=value`` pairs after the case name."""
        out = (f"BENCH {self.case} ours={self.ours:.0f} baseline={self.baseline:.0f} "
               f"ratio={self.ratio:.2f} equal={str(self.equal).lower()}")
        if self.cold_ratio is not None:
            out += f" cold_ratio={self.cold_ratio:.2f}"
        if self.spread is not None:
            out += f" spread={self.spread[0]:.2f}-{self.spread[1]:.2f}"
        if self.rounds is not None:
            out += f" rounds={self.rounds}"
        return out + "".join(f" {k}={v:.2f}" for k, v in self.figures.items())

    def doc(self) -> dict[str, Any]:
        """The results file's content: every field, ``ratio``, the figures and the detail
        at the top level."""
        d = asdict(self)
        d.pop("figures")
        d.pop("detail")
        return {**d, "ratio": self.ratio, **self.figures, **self.detail}


class Rounds:
    """Every round's seconds of several variants of one case, run in turn within a round
    (so drift in the machine's load falls on all alike).

    Round 0 is the cold round (a query's first batch in the session pays Python workers'
    and the JVM's start-up): its figures are kept apart. A variant's figure is the MEDIAN
    of the warm rounds' seconds (rounds 1..n-1), rows/s = rows / that median. The spread
    of two variants is the lowest and highest ratio of their paired warm rounds (round i
    of one against round i of the other, rows/s over rows/s): the warm-median ratio
    always lies inside it.
    """

    def __init__(self, case: str, n: int) -> None:
        self.case = case
        self.n = n
        self.seconds: dict[str, list[float]] = {}
        self.rows: dict[str, int] = {}

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.n))

    def add(self, variant: str, rnd: int, rows: int, seconds: float, what: str = "rows") -> None:
        """Round ``rnd`` of ``variant``: ``rows`` in ``seconds``; printed to stderr."""
        got = self.seconds.setdefault(variant, [])
        if len(got) != rnd:
            raise BenchError(f"{self.case} {variant}: round {rnd} added after {len(got)} rounds")
        if self.rows.setdefault(variant, rows) != rows:
            raise BenchError(f"{self.case} {variant}: {rows} {what} in round {rnd}, "
                             f"{self.rows[variant]} before")
        got.append(seconds)
        kind = "cold" if rnd == 0 else "warm"
        print(f"[bench] {self.case} {variant} round {rnd} ({kind}): {rows} {what} in {seconds:.2f} s "
              f"({rows / seconds:.0f}/s)", file=sys.stderr)

    def _warm(self, variant: str) -> list[float]:
        warm = self.seconds[variant][1:]
        if not warm:
            raise BenchError(f"{self.case} {variant}: no warm round")
        return warm

    def median_s(self, variant: str) -> float:
        return float(statistics.median(self._warm(variant)))

    def rate(self, variant: str) -> float:
        """Rows/s from the median of the warm rounds' seconds."""
        return self.rows[variant] / self.median_s(variant)

    def cold_rate(self, variant: str) -> float:
        return self.rows[variant] / self.seconds[variant][0]

    def ratio(self, a: str, b: str) -> float:
        return self.rate(a) / self.rate(b)

    def cold_ratio(self, a: str, b: str) -> float:
        return self.cold_rate(a) / self.cold_rate(b)

    def spread(self, a: str, b: str) -> tuple[float, float]:
        """(lowest, highest) of ``a``'s rows/s over ``b``'s, warm round by warm round."""
        pairs = zip(self._warm(a), self._warm(b), strict=True)
        per = [(self.rows[a] / sa) / (self.rows[b] / sb) for sa, sb in pairs]
        return min(per), max(per)

    def detail(self) -> dict[str, Any]:
        """For the results file: the method and, per variant, every round's seconds."""
        return {"method": f"median of warm rounds 1..{self.n - 1}; round 0 (cold) apart; "
                          "spread = min-max of paired warm rounds' ratios",
                "variants": {v: {"rows": self.rows[v], "seconds": s, "median_s": self.median_s(v),
                                 "rows_per_s": self.rate(v), "cold_rows_per_s": self.cold_rate(v),
                                 "warm_min_s": min(s[1:]), "warm_max_s": max(s[1:])}
                             for v, s in self.seconds.items()}}

    def result(self, ours: str, baselines: Sequence[str], equal: bool, case: str | None = None) -> Result:
        """``ours`` against the best of ``baselines`` by warm median (one, usually)."""
        base = max(baselines, key=self.rate)
        return Result(case or self.case, self.rate(ours), self.rate(base), equal,
                      cold_ratio=self.cold_ratio(ours, base), spread=self.spread(ours, base), rounds=self.n,
                      detail={"ours_variant": ours, "baseline_variant": base, **self.detail()})


def machine_cpu_s() -> float:
    """Busy CPU seconds of the whole machine since boot (every state but idle and iowait)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid``."""
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")


def server_cpu_s(pid: int) -> float:
    """CPU seconds of server process ``pid`` and of every child it has had: its own time,
    its exited children's (added to it when it reaps them, as PostgreSQL's postmaster does
    with a session's backend) and its living children's."""
    def fields(p: int | str) -> list[str]:
        return Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()

    own = fields(pid)
    ticks = sum(int(v) for v in own[11:15])  # utime, stime, cutime, cstime
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            f = fields(p.name)
        except OSError:  # ended while read
            continue
        if int(f[1]) == pid:
            ticks += int(f[11]) + int(f[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def task_workers_cpu() -> dict[int, float]:
    """CPU seconds of each PySpark daemon that forks the Python workers running tasks
    (``pyspark.daemon pyspark.worker``; planning and commit workers have daemons of their
    own), with its workers' (``server_cpu_s``), by daemon pid. ``cpu_since`` turns two such
    readings into the seconds spent between them."""
    found: dict[int, float] = {}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().split(b"\0")
            if b"pyspark.daemon" in cmd and cmd[-2:] == [b"pyspark.worker", b""]:
                found[int(p.name)] = server_cpu_s(int(p.name))
        except OSError:  # ended while read
            continue
    return found


def cpu_since(before: dict[int, float], after: dict[int, float]) -> float:
    """The CPU seconds between two ``task_workers_cpu`` readings (a daemon started between
    them counts from zero)."""
    return sum(c - before.get(pid, 0.0) for pid, c in after.items())


def postgres_pid(case: str) -> int:
    """The local PostgreSQL server's postmaster (its data directory's ``postmaster.pid``)."""
    path = ROOT / ".local" / "postgres" / "data" / "postmaster.pid"
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError) as e:
        raise BenchError(f"{case}: no PostgreSQL pid in {path} ({e}): run `make services` first") from None


def broker_pid(case: str) -> int:
    """The local Kafka broker's process id (``make services`` writes it)."""
    path = ROOT / ".local" / "kafka.pid"
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError) as e:
        raise BenchError(f"{case}: no broker pid in {path} ({e}): run `make services` first") from None


def run_sql(url: str, stmt: str) -> list[tuple[Any, ...]]:
    """One statement in its own transaction on a throwaway engine; the rows, if any."""
    import sqlalchemy as sa

    eng = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with eng.begin() as c:
            res = c.execute(sa.text(stmt))
            return [tuple(r) for r in res] if res.returns_rows else []
    finally:
        eng.dispose()


def services_env() -> dict[str, str]:
    """Addresses ``make services`` wrote; environment variables of the same name win."""
    try:
        return load_env()
    except ServicesEnvError as e:
        raise BenchError(str(e)) from None


def spark_session() -> Any:
    """local[2] (the machine's two cores) with Spark's own Kafka connector on the classpath."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import spark_ext

    builder = (
        SparkSession.builder.master("local[2]").appName("spark-ext-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.memory", "4g")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.jars", ",".join(local_services.baseline_jars()))
    )
    session = spark_ext.configure(builder).getOrCreate()  # with the JVM companion jar (make jvm)
    session.sparkContext.setLogLevel("ERROR")
    return session


def timed_parquet_stream(spark: Any, case: str, src: str, ckpt: str, sink: Any,
                         shape: Any = None) -> tuple[int, float]:
    """Stream the Parquet files at ``src`` (through ``shape(df)`` if given) into
    ``sink(writeStream)`` in one AvailableNow run; (rows read, wall-clock seconds from
    ``start()`` to termination)."""
    df = spark.readStream.schema(spark.read.parquet(src).schema).parquet(src)
    if shape is not None:
        df = shape(df)
    t0 = time.monotonic()
    q = sink(df.writeStream).option("checkpointLocation", ckpt).trigger(availableNow=True).start()
    q.awaitTermination()
    dt = time.monotonic() - t0
    if q.exception() is not None:
        raise BenchError(f"{case} query failed: {q.exception()}")
    return sum(p["numInputRows"] for p in q.recentProgress), dt


def timed_parquet_write(case: str, df: Any, out: str, ckpt: str) -> tuple[int, float]:
    """The streaming frame ``df`` into Parquet at ``out`` in one AvailableNow run; (rows read,
    wall-clock seconds from ``start()`` to termination)."""
    t0 = time.monotonic()
    q = (df.writeStream.format("parquet").option("path", out).option("checkpointLocation", ckpt)
         .trigger(availableNow=True).start())
    q.awaitTermination()
    dt = time.monotonic() - t0
    if q.exception() is not None:
        raise BenchError(f"{case} query failed: {q.exception()}")
    return sum(p["numInputRows"] for p in q.recentProgress), dt


def same_parquet_rows(spark: Any, a: str, b: str, rows: int, maps: tuple[str, ...] = ()) -> bool:
    """The Parquet outputs at ``a`` and ``b`` hold the same rows, each as often, ``rows`` of
    them (``exceptAll`` both ways); the map columns ``maps`` compared as their sorted entries,
    as set operations refuse maps."""
    from pyspark.sql.functions import col, map_entries, sort_array

    da, db = spark.read.parquet(a), spark.read.parquet(b)
    for m in maps:
        da, db = (d.withColumn(m, sort_array(map_entries(col(m)))) for d in (da, db))
    same = da.count() == db.count() == rows
    return bool(same and da.exceptAll(db).isEmpty() and db.exceptAll(da).isEmpty())


def committed_records(spark: Any, bootstrap: str, topic: str) -> Any:
    """``topic``'s (key, value) rows as Spark's kafka source reads them, read_committed."""
    return (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("kafka.isolation.level", "read_committed")
            .option("startingOffsets", "earliest").load().selectExpr("key", "value"))


def read_to_end(consumer: Any, topic: str, timeout_s: float = 120) -> list[Any]:
    """Every record of ``topic`` up to its end offsets (the last stable offsets when
    ``consumer`` reads ``read_committed``), read until each position reaches its end: never
    "stop after some silence". ``consumer``: an unassigned kafka-python ``KafkaConsumer``."""
    return list(iter_to_end(consumer, topic, timeout_s))


def iter_to_end(consumer: Any, topic: str, timeout_s: float = 120) -> Iterator[Any]:
    """``read_to_end`` one record at a time, for topics too large to hold as a list."""
    from kafka import TopicPartition

    parts = consumer.partitions_for_topic(topic)
    if not parts:
        raise LookupError(f"no metadata for topic {topic}")
    tps = [TopicPartition(topic, p) for p in sorted(parts)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    end = consumer.end_offsets(tps)
    deadline = time.monotonic() + timeout_s
    while any(consumer.position(tp) < end[tp] for tp in tps):
        if time.monotonic() > deadline:
            raise TimeoutError(f"could not read {topic} to its end {end}")
        for tp, recs in consumer.poll(timeout_ms=500).items():
            yield from (r for r in recs if r.offset < end[tp])


def kafka_sink_prefix(checkpoint: object) -> str:
    """The transactional-id prefix the Kafka sink derives from ``checkpoint`` by default."""
    from spark_ext.connectors.kafka.sink.config import KafkaSinkConfig
    from spark_ext.guarantees import Guarantee
    from spark_ext.options import Options

    o = Options({"kafka.bootstrap.servers": "x:1", "topic": "t", "checkpointlocation": str(checkpoint)},
                "hzsink")
    return KafkaSinkConfig.parse(o, Guarantee.EXACTLY_ONCE).txn_prefix


def drain_queue(env: dict[str, str], queue: str, timeout_s: float = 120) -> list[str]:
    """Every message body on STOMP destination ``queue``, consumed by an independent
    stomp.py client up to a sentinel sent now (``services.queue_drain``)."""
    from services import queue_drain

    try:
        return [body for _, body in queue_drain.drain(env["STOMP_HOST"], int(env["STOMP_PORT"]),
                                                      env["STOMP_USER"], env["STOMP_PASSWORD"], queue,
                                                      timeout_s)]
    except TimeoutError:
        raise BenchError(f"{queue} not drained within {timeout_s:.0f} s") from None
