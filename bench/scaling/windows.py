"""Curve ``scale_windows``: our sliding windows against Spark's ``window()`` as keys and batches grow.

The ratio cases (``bench/windows.py``) hold the input at 1,000 keys and 500k-event batches;
this curve asks where the advantage goes when either grows. Both pipelines are
``bench.windows._pipelines`` (60 s windows sliding by 5 s, k = 12; count, sum and max;
``withWatermark(ts, 5 s)``; into Parquet, append), ours with its state in files unless
``BENCH_WINDOW_STATE=store``, and both run in turn (ours, then Spark's) on the same staged
Parquet files (one file per micro-batch, ``Trigger.AvailableNow``) in one Spark session
(local[2]).

One chart, one y unit (events/s), two sweeps as two pairs of series:

- ``ours`` / ``spark``: x = distinct keys K (1k, 100k, 1M), each the same
  ``SCALE_WINDOWS_EVENTS`` events (default 1M, in 4 micro-batches of 250k:
  ``bench.windows._stage`` with K keys) at ``BENCH_WINDOW_RATE`` events per second of
  event time (default 10,000): events / wall-clock seconds from ``start()`` to
  termination. More keys means fewer events per key and window, so more output windows
  (at 1M keys each event is its key's only one: events x 12 windows); both pipelines pay
  that, it is what many keys cost sliding windows.
- ``ours by batch size`` / ``spark by batch size``: x = events per micro-batch B (10k,
  100k, 1M) at 10,000 keys, 4 to 16 batches: B / the mean ``triggerExecution`` of the
  steady-state batches (every data batch after the first; a last batch holds the flush
  event alone and is left out). The median ms a batch, the per-batch cost, is printed,
  in ``notes`` and in the ``SCALE`` line; the rate takes the mean since at small B only
  some batches close windows (the watermark crosses a 5 s slide every few batches) and
  a median would leave their cost out.

``equal``: at every point both outputs hold the same windows (``_same_windows``). First,
untimed, both pipelines run on 20k events and on the whole first input (Python workers,
JIT). A query still running after ``SCALE_WINDOWS_TIMEOUT`` seconds (default 240), or
past the case's ``SCALE_WINDOWS_BUDGET`` (default 360 s from the start), is stopped and the
rest of its sweep skipped, so the case keeps to its time on a busy machine (``equal`` is
then false, the SCALE lines name the points measured). ``SCALE_QUICK=1``: 50k events, the
first two x values of each sweep, 3 batches a batch size, no warm-up on the whole input: a
smoke test.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from unittest import mock

from bench import windows as wb
from bench.common import BenchError, spark_session
from bench.scaling.curves import Curve, scale_quick

CASE = "scale_windows"
K_FRAMES = 12  # size / slide: 60 s windows sliding by 5 s
SLIDE = f"{60 // K_FRAMES} seconds"
BATCH_KEYS = 10_000


@dataclass(frozen=True)
class Sizes:
    """What one invocation runs (``SCALE_QUICK=1``: a smoke test's worth)."""

    events: int  # keys sweep: events per point
    keys: tuple[int, ...]
    batches: tuple[int, ...]  # events per micro-batch
    batch_total: int  # batch sweep: about this many events per point, at least min_batches
    min_batches: int
    warm_full: bool  # warm up on the first keys point's whole input too
    timeout_s: float  # a query's
    deadline: float  # time.monotonic() after which no query runs on

    @classmethod
    def from_env(cls) -> Sizes:
        quick = scale_quick()
        events = int(os.environ.get("SCALE_WINDOWS_EVENTS", "50000" if quick else "1000000"))
        keys = (1_000, 100_000, 1_000_000)
        batches = (10_000, 100_000, 1_000_000)
        return cls(events, keys[:2] if quick else keys, batches[:2] if quick else batches,
                   0 if quick else 1_600_000, 3 if quick else 4, not quick,
                   float(os.environ.get("SCALE_WINDOWS_TIMEOUT", "240")),
                   time.monotonic() + float(os.environ.get("SCALE_WINDOWS_BUDGET", "360")))

    def time_left(self) -> float:
        """Seconds the next query may run: its timeout, or what is left of the case's budget."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TooSlow(f"{CASE}: the case's {os.environ.get('SCALE_WINDOWS_BUDGET', '360')} s are spent")
        return min(self.timeout_s, left)

    def batch_count(self, batch: int) -> int:
        return max(self.min_batches, min(16, self.batch_total // batch))


@dataclass(frozen=True)
class Run:
    """One query's run: wall-clock seconds, and (input rows, triggerExecution ms) per batch."""

    seconds: float
    batches: list[tuple[int, int]]


class TooSlow(BenchError):
    """A query ran past the case's timeout and was stopped."""


def _fmt(n: int) -> str:
    return f"{n // 1_000_000}M" if n >= 1_000_000 and n % 1_000_000 == 0 else (
        f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else str(n))


@contextmanager
def _keys(n: int) -> Iterator[None]:
    """``bench.windows._stage`` with ``n`` keys instead of its 1,000."""
    with mock.patch.object(wb, "KEYS", n):
        yield


def _stage_batches(spark: Any, events: int, keys: int, batch: int, rate: int, path: str) -> int:
    """``events`` events over ``keys`` keys as files of ``batch`` events, one micro-batch each
    (``bench.windows._stage`` with any number of files), then a file with the far-future
    flush event alone, so steady-state batches are all alike. The number of data files."""
    from pyspark.sql import functions as F

    base, step = 1_700_000_000 * 1_000_000, 1_000_000 // rate
    n = -(-events // batch)
    df = spark.range(events).select(
        F.concat(F.lit("acct-"), ((F.col("id") * 7919) % keys).cast("string")).alias("account"),
        F.timestamp_micros(F.lit(base) + F.col("id") * step).alias("ts"),
        ((F.col("id") * 31) % 1000).alias("amount"),
        (F.col("id") / batch).cast("int").alias("file"))
    flush = spark.createDataFrame([("~flush", n)], "account string, file int").select(
        "account", F.timestamp_micros(F.lit(base + events * step + 3_600_000_000)).alias("ts"),
        F.lit(0).cast("long").alias("amount"), "file")
    df.unionByName(flush).repartition(n + 1, "file").sortWithinPartitions("ts").write.partitionBy("file") \
        .mode("overwrite").parquet(path)
    # File order is modification time; number order, not the names' ("file=10" < "file=2").
    for d in os.listdir(path):
        full = os.path.join(path, d)
        if os.path.isdir(full) and d.startswith("file="):
            i = int(d.split("=", 1)[1])
            for f in os.listdir(full):
                os.utime(os.path.join(full, f), (1_000_000 + i, 1_000_000 + i))
    return n


def _stream(spark: Any, path: str) -> Any:
    schema = spark.read.parquet(path).schema
    return (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(path)
            .select("account", "ts", "amount"))


def _pair(spark: Any, path: str, where: str) -> dict[str, Any]:
    """Spark's and ours over the Parquet files at ``path``; ours keeps state under ``where``."""
    files = os.environ.get("BENCH_WINDOW_STATE", "files") != "store"
    spark_df, ours_df = wb._pipelines("sliding", SLIDE, _stream(spark, path),
                                      f"{where}/state" if files else None)
    # Ours first: at 1M keys Spark's runs out of heap (4g) and may leave the JVM unusable.
    return {"ours": ours_df, "spark": spark_df}


def _run(df: Any, expected: int, where: str, label: str, timeout_s: float) -> Run:
    """``df`` into Parquet at ``where/out-<label>`` in one AvailableNow run, waited on to its end
    (or stopped at ``timeout_s``: TooSlow)."""
    t0 = time.monotonic()
    q = (df.writeStream.format("parquet").option("path", f"{where}/out-{label}")
         .option("checkpointLocation", f"{where}/ck-{label}").outputMode("append")
         .trigger(availableNow=True).start())
    if not q.awaitTermination(timeout_s):
        q.stop()
        raise TooSlow(f"{CASE} {label}: not done within {timeout_s:.0f} s (stopped)")
    dt = time.monotonic() - t0
    if q.exception() is not None:
        raise BenchError(f"{CASE} {label} failed: {q.exception()}")
    batches = [(int(p["numInputRows"]), int(p["durationMs"].get("triggerExecution", 0)))
               for p in sorted(q.recentProgress, key=lambda p: p["batchId"]) if p["numInputRows"]]
    n = sum(rows for rows, _ in batches)
    if n != expected:
        raise BenchError(f"{CASE} {label}: read {n} events, expected {expected}")
    return Run(dt, batches)


def _same_windows(spark: Any, where: str) -> tuple[bool, int, str]:
    """(equal, Spark's windows, why not): the check of ``bench/windows.py`` (the same rows, as
    many times each, the flush key left out). At 1M keys the outputs hold tens of millions of
    windows, too many to shuffle twice (``exceptAll`` both ways) inside the case's time, so
    each side is read once into (rows, sum of two 64-bit row hashes); only when those differ
    are the rows compared, to say how they differ."""
    from pyspark.sql import functions as F

    a = spark.read.parquet(f"{where}/out-ours").where("account != '~flush'")
    b = spark.read.parquet(f"{where}/out-spark").where("account != '~flush'")
    cols = b.columns
    a = a.select(*[F.col(c).cast(b.schema[c].dataType) for c in cols])

    def fingerprint(df: Any) -> tuple[int, int, int]:
        h = [F.xxhash64(*cols), F.xxhash64(F.lit("salt"), *cols)]
        got = df.agg(F.count("*"), *[F.sum(x.cast("decimal(38,0)")) for x in h]).first()
        return int(got[0]), int(got[1] or 0), int(got[2] or 0)

    fa, fb = fingerprint(a), fingerprint(b)
    if fb[0] and fa == fb:
        return True, fb[0], ""
    extra, missing = a.exceptAll(b), b.exceptAll(a)
    sample = extra.limit(1).collect() or missing.limit(1).collect()
    return False, fb[0], (f"ours has {extra.count()} windows Spark's has not, lacks {missing.count()} of "
                          f"Spark's {fb[0]}; e.g. {sample[0] if sample else '-'}")


def _fold() -> str:
    """Which stage 1 ours runs: the JVM fold needs the companion jar (``make jvm``)."""
    from spark_ext import release
    from spark_ext.windows import native

    jar = release.jar_path().exists()
    return f"fold {native.mode()}, companion jar {'present' if jar else 'missing (Python fold)'}"


def _log(msg: str) -> None:
    print(f"[bench] {CASE} {msg}", file=sys.stderr, flush=True)


def run() -> Curve:
    """Both sweeps in one session; see the module doc for what each point is."""
    sizes = Sizes.from_env()
    rate = int(os.environ.get("BENCH_WINDOW_RATE", "10000"))
    state = "Spark's state store" if os.environ.get("BENCH_WINDOW_STATE", "files") == "store" else "files"
    curve = Curve(
        CASE, f"Sliding windows (60 s / 5 s, k = {K_FRAMES}), ours against Spark's window(), local[2]",
        "distinct keys (ours, spark); events per micro-batch (... by batch size)", "events/s",
        log_y=True,
        notes=[f"ours: spark_ext.windows.sliding, state in {state}, {_fold()}; Spark's: "
               "groupBy(window(ts, 60 s, 5 s)) with withWatermark(ts, 5 s); count, sum, max into Parquet",
               f"keys sweep: {sizes.events} events in 4 micro-batches per point at {rate} events/s of event "
               "time; events/s = events / wall-clock seconds from start() to termination",
               f"batch-size sweep: {BATCH_KEYS} keys; events/s = B / mean triggerExecution of the "
               "steady-state batches (every data batch after the first)"])
    spark = spark_session()
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    _log(_fold())
    # Spark's state-store maintenance may still write under a stopped query's checkpoint.
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        try:
            _warm_up(spark, sizes, rate, tmp)
        except TooSlow as e:
            _stopped(curve, f"warm-up: {e}")
        ratios_k = _keys_sweep(spark, sizes, rate, tmp, curve)
        ratios_b, ms = _batch_sweep(spark, sizes, rate, tmp, curve)
    ms_line = "; ".join(f"{_fmt(b)}: ours {o:.0f}, spark {s:.0f}" for b, (o, s) in ms.items())
    print(f"SCALE windows keys ours/spark at {_points(ratios_k)}", flush=True)
    print(f"SCALE windows batch size ours/spark at {_points(ratios_b)} (K={_fmt(BATCH_KEYS)}; median "
          f"ms/batch {ms_line})", flush=True)
    return curve


def _points(ratios: dict[int, float]) -> str:
    """``1k,100k: 1.72 2.23``: the x values measured, then their ratios."""
    if not ratios:
        return "no point: none measured"
    return f"{','.join(_fmt(x) for x in ratios)}: {' '.join(f'{r:.2f}' for r in ratios.values())}"


def _warm_up(spark: Any, sizes: Sizes, rate: int, tmp: str) -> None:
    """Untimed: both on 20k events (workers started), then on the first keys point's input
    (the JIT; not in a quick run)."""
    with _keys(sizes.keys[0]):
        wb._stage(spark, 20_000, rate, f"{tmp}/warm-src")
        wb._stage(spark, sizes.events, rate, f"{tmp}/src-0")
    inputs = [(f"{tmp}/warm-src", 20_001), (f"{tmp}/src-0", sizes.events + 1)]
    for i, (path, n) in enumerate(inputs if sizes.warm_full else inputs[:1]):
        for label, df in _pair(spark, path, f"{tmp}/warm{i}").items():
            t = _run(df, n, f"{tmp}/warm{i}", label, sizes.time_left()).seconds
            _log(f"warm-up {label}: {n} events in {t:.2f} s")


def _keys_sweep(spark: Any, sizes: Sizes, rate: int, tmp: str, curve: Curve) -> dict[int, float]:
    """Events/s of both at each K; the ratios ours/spark by K."""
    ratios = {}
    for i, keys in enumerate(sizes.keys):
        src, where = f"{tmp}/src-{i}", f"{tmp}/keys-{keys}"
        try:
            sizes.time_left()
            if i:  # src-0 was staged by the warm-up
                with _keys(keys):
                    wb._stage(spark, sizes.events, rate, src)
        except TooSlow as e:
            _stopped(curve, str(e))
            break
        runs: dict[str, Run] = {}
        # Each pipeline on its own: one that runs out of time (or memory) keeps the other's point.
        for label, df in _pair(spark, src, where).items():
            try:
                runs[label] = r = _run(df, sizes.events + 1, where, label, sizes.time_left())
            except TooSlow as e:
                _stopped(curve, f"K={_fmt(keys)}: {e}")
                continue
            curve.add(label, keys, (sizes.events + 1) / r.seconds)
            _log(f"K={_fmt(keys)} {label}: {r.seconds:.2f} s, ms per batch {[ms for _, ms in r.batches]}")
        if len(runs) < 2:
            break
        ratios[keys] = runs["spark"].seconds / runs["ours"].seconds
        _check(spark, curve, where, f"K={_fmt(keys)}")
    return ratios


def _batch_sweep(spark: Any, sizes: Sizes, rate: int, tmp: str,
                 curve: Curve) -> tuple[dict[int, float], dict[int, tuple[float, float]]]:
    """Steady-state events/s of both at each batch size; ({B: ratio}, {B: median ms ours, spark})."""
    ratios, medians = {}, {}
    for batch in sizes.batches:
        src, where = f"{tmp}/batch-src-{batch}", f"{tmp}/batch-{batch}"
        n = sizes.batch_count(batch)
        try:
            sizes.time_left()
            files = _stage_batches(spark, n * batch, BATCH_KEYS, batch, rate, src)
            runs = {label: _run(df, n * batch + 1, where, label, sizes.time_left())
                    for label, df in _pair(spark, src, where).items()}
        except TooSlow as e:
            _stopped(curve, str(e))
            break
        per_s, med = {}, {}
        for label, r in runs.items():
            steady = [ms for rows, ms in r.batches[1:files] if rows == batch]
            if len(steady) != files - 1:
                raise BenchError(f"{CASE} B={batch} {label}: batches {r.batches}, expected {files} of "
                                 f"{batch} events and the flush")
            med[label] = statistics.median(steady)
            per_s[label] = batch * len(steady) / (sum(steady) / 1000)
            _log(f"B={_fmt(batch)} {label}: {r.seconds:.2f} s, ms per batch {[ms for _, ms in r.batches]}")
        for label in ("ours", "spark"):
            curve.add(f"{label} by batch size", batch, per_s[label])
            _log(f"B={_fmt(batch)} {label}: median {med[label]:.0f} ms a batch (of {files - 1} steady-state "
                 f"batches), {per_s[label]:.0f} events/s")
        curve.notes.append(f"B={_fmt(batch)} ({files} batches): median ms/batch ours {med['ours']:.0f}, "
                           f"spark {med['spark']:.0f}")
        medians[batch] = (med["ours"], med["spark"])
        ratios[batch] = per_s["ours"] / per_s["spark"]
        _check(spark, curve, where, f"B={_fmt(batch)}")
    return ratios, medians


def _check(spark: Any, curve: Curve, where: str, point: str) -> None:
    t0 = time.monotonic()
    equal, rows, why = _same_windows(spark, where)
    curve.notes.append(f"{point}: {rows} windows, {'equal' if equal else 'DIFFERENT: ' + why}")
    _log(f"{point}: {rows} windows, equal={equal} (checked in {time.monotonic() - t0:.1f} s)")
    if not equal:
        curve.equal = False
        print(f"{CASE} {point}: outputs differ: {why}", file=sys.stderr, flush=True)


def _stopped(curve: Curve, why: str) -> None:
    """A sweep cut short: no figure for the point, so the curve is not complete (what was
    measured stays equal or not on its own account)."""
    curve.complete = False
    curve.notes.append(why)
    print(why, file=sys.stderr, flush=True)
