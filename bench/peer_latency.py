"""Bench case ``peer_latency_eo``: how long a record takes to become visible to a
``read_committed`` consumer, at a steady rate, for ours and the exactly-once peers.

For each engine in turn (Spark's native at-least-once Kafka -> Kafka, ours
``exactly_once``, the floor, Kafka Streams ``exactly_once_v2``, Flink ``KafkaSink``
``EXACTLY_ONCE``; settings as in ``bench.peer_kafka``), on fresh 4-partition topics: the
pipeline is started, one warm-up record is sent and awaited on the output (start-up is
not latency), then ``BENCH_PEER_LATENCY_RATE`` records/s (default 2,000) are produced for
``BENCH_PEER_LATENCY_S`` seconds (default 20), each value carrying its produce time. A
``read_committed`` consumer in this process (the same for every engine) notes when each
record arrives; latency = arrival - produce time, same clock. Interval:
``BENCH_PEER_INTERVAL_MS`` (default 1000). Then ours and Spark's native pipeline again
with ``processingTime="0 seconds"`` (batches back to back: latency is then about one and a
half batch durations, so it shows per-batch cost without the interval's wait).
``BENCH_PEER_SPLIT=1`` also runs our source with Spark's sink and Spark's source with our
sink, to split our batch time between the two.

The floor is our source into a Python sink that writes nothing (``bench.floor_sink``):
the same ``hzsource`` read, trigger, rate and duration as ours, through the Python sink
machinery ours pays (planning worker, Arrow writer workers, commit runner), without a
write. It has no output to consume, so a record's latency there is the time its batch's
``commit`` ran minus its produce time (its batch found by offset, from the query's
progress); ours' figure also holds the broker's commit and the consumer's fetch, so the
floor is, if anything, flattered. It runs right after ours. What that part costs any
exactly-once Kafka sink is measured in the same run: Kafka's own transactional producer
(librdkafka) commits one interval's records a transaction, and a record's figure is its
arrival at the same consumer minus the moment the commit returned (``kafka_commit``).

The ``BENCH`` line's figures for this case are p99 latencies in milliseconds (lower is
better): ``ours`` = our exactly-once p99, ``baseline`` = the best exactly-once peer's p99,
``ratio`` = ours / baseline (the issue's goal: at most 1.25), ``ratio_floor`` = ours /
the floor's p99, ``ratio_native`` = ours / Spark's native pipeline's p99,
``commit_p99_ms`` = ``kafka_commit``'s p99 (the part of what ours pays over the floor that
no sink's work causes; its p99 is not what it adds to ours' p99, since the floor's slowest
records meet a commit of typical length), ``bound_floor`` = the p99 of the floor's figures
each plus a ``kafka_commit`` figure drawn at random (``bound_p99``), over the floor's p99:
the lowest ``ratio_floor`` an exactly-once Kafka sink reading from our source can show in
this run.
``equal``:
every engine's output held every produced record exactly once (the floor: every record
in exactly one committed batch). p50 / p99 of every engine go to stderr and
``bench/results/peer_latency_eo_extra.json``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from bench import floor_sink
from bench.common import RESULTS_DIR, BenchError, Result, iter_to_end, services_env, spark_session
from bench.peer_jobs import ENGINES, finish_peer, peers_jar, start_peer
from bench.peer_kafka import (
    SETTINGS,
    delete_topics,
    interval_ms,
    make_topics,
    parse,
    producer,
    record,
    spark_copy,
)

WARMUP = 10**12 - 1  # the warm-up record's sequence number (12 digits), outside the measured 0..n-1


class Arrivals(threading.Thread):
    """Reads ``topic`` ``read_committed`` from the start, noting each record's latency."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        from kafka import KafkaConsumer, TopicPartition

        # A short fetch wait: the broker answers as soon as committed data is there anyway.
        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                                      enable_auto_commit=False, fetch_max_wait_ms=20)
        deadline = time.monotonic() + 60
        while not (parts := self.consumer.partitions_for_topic(topic)):  # a new topic's metadata lags
            if time.monotonic() > deadline:
                raise BenchError(f"no metadata for topic {topic}")
            time.sleep(0.2)
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        self.consumer.assign(tps)
        self.consumer.seek_to_beginning(*tps)
        self.latency_ns: dict[int, list[int]] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                batch = self.consumer.poll(timeout_ms=100)
                now = time.time_ns()
                with self.lock:
                    for recs in batch.values():
                        for r in recs:
                            seq, stamp = parse(r.value)
                            self.latency_ns.setdefault(seq, []).append(now - stamp)
        except BaseException as e:  # noqa: BLE001 - reported by the waiting thread
            self.error = e
        finally:
            self.consumer.close()

    def wait_for(self, seqs: range | list[int], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        want = len(seqs)
        while True:
            with self.lock:
                have = sum(s in self.latency_ns for s in seqs)
            if have == want:
                return
            if self.error is not None:
                raise BenchError(f"latency consumer failed: {self.error!r}")
            if time.monotonic() > deadline:
                raise BenchError(f"{what}: {have} of {want} records visible after {timeout_s:.0f} s")
            time.sleep(0.1)


def _steady(bootstrap: str, topic: str, rate: int, n: int) -> None:
    """Produce records 0..n-1 at ``rate`` per second, paced against the start time."""
    p = producer(bootstrap, 1)
    t0 = time.monotonic()
    for i in range(n):
        due = t0 + i / rate
        if (ahead := due - time.monotonic()) > 0.001:
            time.sleep(ahead)
        key, value = record(i, time.time_ns())
        p.produce(topic, value=value, key=key)
        p.poll(0)
    if p.flush(60) != 0:
        raise BenchError(f"could not produce {n} records to {topic}")
    lag = time.monotonic() - t0 - n / rate
    if lag > 1:  # the harness itself fell behind: the rate was not steady
        print(f"[bench] peer_latency_eo: producing took {lag:.1f} s longer than planned", file=sys.stderr)


def _percentile(sorted_ms: list[float], q: float) -> float:
    return sorted_ms[min(len(sorted_ms) - 1, int(q * len(sorted_ms)))]


def batch_profile(query: Any) -> dict[str, float]:
    """Median of each phase of the query's batches that carried rows (Spark's
    ``durationMs``: latestOffset, queryPlanning, walCommit, addBatch, commitOffsets,
    triggerExecution), plus rows per batch: where a batch's time goes."""
    import statistics

    batches = [p for p in query.recentProgress if p["numInputRows"] > 0][1:]  # [0]: warm-up
    if not batches:
        return {}
    keys = set.intersection(*(set(p["durationMs"]) for p in batches))
    out = {k: float(statistics.median(p["durationMs"][k] for p in batches)) for k in sorted(keys)}
    out["rows"] = float(statistics.median(p["numInputRows"] for p in batches))
    return out


def _measure(engine: str, spark: Any, bootstrap: str, tmp: str, run_id: str, rate: int, seconds: int,
             interval: int) -> tuple[float, float, bool, dict[str, float]]:
    """(p50 ms, p99 ms, every record once, Spark's batch phases) for one engine on fresh
    topics."""
    n = rate * seconds
    source, sink = (f"peer-lat-{engine.replace('_', '-')}-{run_id}-{d}" for d in ("in", "out"))
    make_topics(bootstrap, [source, sink])
    arrivals = Arrivals(bootstrap, sink)
    arrivals.start()
    log = Path(tmp) / f"{engine}.log"
    proc: subprocess.Popen[str] | None = None
    query = None
    if engine in ENGINES:  # a peer stops by itself once it counted the warm-up and all n
        prefix = f"peer-lat-{run_id}-{engine}"
        proc = start_peer(engine, bootstrap, source, sink, n + 1, interval, prefix, log)
    else:
        query = spark_copy(spark, engine, bootstrap, source, sink, f"{tmp}/ck-{engine}-{run_id}", interval)
    try:
        warm = producer(bootstrap, 0)
        key, value = record(WARMUP, time.time_ns())
        warm.produce(source, value=value, key=key)
        warm.flush(30)
        arrivals.wait_for([WARMUP], 300, f"{engine} warm-up")
        _steady(bootstrap, source, rate, n)
        arrivals.wait_for(range(n), 120, engine)
        if proc is not None:
            finish_peer(engine, proc, log)
        profile = batch_profile(query) if query is not None else {}
    finally:
        if query is not None:
            query.stop()
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        arrivals.stop.set()
        arrivals.join()
    delete_topics(bootstrap, [source, sink])
    lat = arrivals.latency_ns
    once = len(lat) == n + 1 and all(len(v) == 1 for v in lat.values())
    if not once:
        dup = sum(len(v) > 1 for v in lat.values())
        print(f"[bench] peer_latency_eo {engine}: {len(lat)} distinct of {n + 1}, {dup} seen more than once",
              file=sys.stderr)
    ms = sorted(lat[s][0] / 1e6 for s in range(n))
    return _percentile(ms, 0.5), _percentile(ms, 0.99), once, profile


class Batches:
    """A query's progress reports with rows, kept by batch id."""

    def __init__(self, query: Any) -> None:
        self.query = query
        self.by_id: dict[int, dict[str, Any]] = {}

    def rows(self) -> int:
        if self.query.exception() is not None:
            raise BenchError(f"query failed: {self.query.exception()}")
        for p in self.query.recentProgress:
            if p["numInputRows"] > 0:
                self.by_id[p["batchId"]] = p
        return sum(p["numInputRows"] for p in self.by_id.values())

    def wait_rows(self, want: int, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while (have := self.rows()) < want:
            if time.monotonic() > deadline:
                raise BenchError(f"{what}: {have} of {want} records committed after {timeout_s:.0f} s")
            time.sleep(0.5)


def _offsets(doc: Any) -> dict[int, int]:
    """Partition -> offset of a progress report's source offset (one topic; none: 0)."""
    if isinstance(doc, str):
        doc = json.loads(doc)  # may be "null": the first batch of a query has no start
    if not doc:
        return {}
    return {int(p): int(o) for parts in doc.values() for p, o in parts.items()}


def _measure_floor(spark: Any, bootstrap: str, tmp: str, run_id: str, rate: int, seconds: int,
                   interval: int) -> tuple[float, float, bool, dict[str, float], list[float]]:
    """``_measure`` for the floor: our source into ``bench.floor_sink``; a record's latency is
    its batch's commit time minus its produce time. Also returns every record's figure
    (ms, sorted), for ``bound_p99``."""
    import bisect

    from kafka import KafkaConsumer

    n = rate * seconds
    source = f"peer-lat-floor-{run_id}-in"
    make_topics(bootstrap, [source])
    commits = f"{tmp}/floor-commits-{run_id}"
    df = (spark.readStream.format("hzsource").option("connector", "kafka")
          .option("kafka.bootstrap.servers", bootstrap).option("subscribe", source)
          .option("startingOffsets", "earliest").load().select("key", "value"))
    # Every batch's report is needed to place each record (the query's copy of the session
    # keeps the setting; the session's own is put back at once).
    retention = "spark.sql.streaming.numRecentProgressUpdates"
    before = spark.conf.get(retention)
    spark.conf.set(retention, "100000")
    try:
        query = (df.writeStream.format(floor_sink.NAME).option("commits", commits)
                 .option("checkpointLocation", f"{tmp}/ck-floor-{run_id}")
                 .trigger(processingTime=f"{interval} milliseconds").start())
    finally:
        spark.conf.set(retention, before)
    batches = Batches(query)
    try:
        warm = producer(bootstrap, 0)
        key, value = record(WARMUP, time.time_ns())
        warm.produce(source, value=value, key=key)
        warm.flush(30)
        batches.wait_rows(1, 300, "floor warm-up")
        _steady(bootstrap, source, rate, n)
        batches.wait_rows(n + 1, 120, "floor")
        profile = batch_profile(query)
    finally:
        query.stop()
    batches.rows()
    committed = floor_sink.commit_times(commits)
    # Per partition: the batches' end offsets in batch order, to find each record's batch.
    ends: dict[int, list[tuple[int, int, int]]] = {}  # partition -> [(end, start, batch id)]
    for bid in sorted(batches.by_id):
        src = batches.by_id[bid]["sources"][0]
        start, end = _offsets(src.get("startOffset")), _offsets(src.get("endOffset"))
        for part, e in end.items():
            if e > start.get(part, 0):
                ends.setdefault(part, []).append((e, start.get(part, 0), bid))
    lat_ms: dict[int, float] = {}
    once = sum(p["numInputRows"] for p in batches.by_id.values()) == n + 1
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        for r in iter_to_end(c, source, timeout_s=120):
            seq, stamp = parse(r.value)
            marks = ends.get(r.partition, [])
            i = bisect.bisect_right(marks, (r.offset, float("inf"), 0))
            if i == len(marks) or marks[i][1] > r.offset or marks[i][2] not in committed or seq in lat_ms:
                once = False
                continue
            lat_ms[seq] = (committed[marks[i][2]] - stamp) / 1e6
    finally:
        c.close()
    delete_topics(bootstrap, [source])
    if len(lat_ms) != n + 1 or not all(s in lat_ms for s in range(n)):
        print(f"[bench] peer_latency_eo floor: {len(lat_ms)} of {n + 1} records placed in a committed batch",
              file=sys.stderr)
        once = False
    ms = sorted(lat_ms[s] for s in range(n) if s in lat_ms)
    if not ms:
        raise BenchError("peer_latency_eo floor: no record placed in a committed batch")
    return _percentile(ms, 0.5), _percentile(ms, 0.99), once, profile, ms


def _measure_commit_lag(bootstrap: str, run_id: str, rate: int, seconds: int,
                        interval: int) -> tuple[float, float, bool, list[float]]:
    """(p50 ms, p99 ms, every record once, every record's ms sorted) of what Kafka itself
    adds after a transaction's commit: librdkafka's transactional producer commits
    ``rate * interval`` records a transaction, once an interval, and a record's figure is
    its arrival at ``Arrivals`` minus the moment ``commit_transaction()`` returned. Every
    exactly-once Kafka sink pays this after its commit (the brokers write the commit
    markers, then the consumer's fetch sees them); the floor, which has no output, does not."""
    from confluent_kafka import Producer

    n = rate * seconds
    every_ms = interval or 1000  # back to back: one second's records a transaction
    per_txn = max(1, rate * every_ms // 1000)
    topic = f"peer-lat-commit-{run_id}"
    make_topics(bootstrap, [topic])
    arrivals = Arrivals(bootstrap, topic)
    arrivals.start()
    stamps: dict[int, int] = {}
    committed: dict[int, int] = {}
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": topic, "linger.ms": 5})
    try:
        p.init_transactions(30)
        t0 = time.monotonic()
        for k, first in enumerate(range(0, n, per_txn)):
            if (ahead := t0 + k * every_ms / 1000 - time.monotonic()) > 0:
                time.sleep(ahead)
            p.begin_transaction()
            seqs = range(first, min(n, first + per_txn))
            for seq in seqs:
                stamps[seq] = time.time_ns()
                key, value = record(seq, stamps[seq])
                p.produce(topic, value=value, key=key)
            p.commit_transaction(30)
            done = time.time_ns()
            committed.update(dict.fromkeys(seqs, done))
        arrivals.wait_for(range(n), 120, "Kafka's own commit")
    finally:
        arrivals.stop.set()
        arrivals.join()
    delete_topics(bootstrap, [topic])
    lat = arrivals.latency_ns
    once = len(lat) == n and all(len(v) == 1 for v in lat.values())
    ms = sorted((lat[s][0] + stamps[s] - committed[s]) / 1e6 for s in range(n))
    return _percentile(ms, 0.5), _percentile(ms, 0.99), once, ms


def bound_p99(floor_ms: list[float], commit_ms: list[float], pairings: int = 9) -> float:
    """The p99 of a sink that does the floor's work and then Kafka's own commit, nothing
    more: each floor figure plus a commit-to-visible figure drawn at random (the two are
    measured apart, so independent), the median over ``pairings`` random pairings. No
    exactly-once Kafka sink behind this source can show a lower p99 here."""
    import random

    rng = random.Random(0)  # the same pairings for the same figures
    p99s = []
    for _ in range(pairings):
        drawn = rng.choices(commit_ms, k=len(floor_ms))
        p99s.append(_percentile(sorted(f + c for f, c in zip(floor_ms, drawn, strict=True)), 0.99))
    return sorted(p99s)[len(p99s) // 2]


def run() -> Result:
    rate = int(os.environ.get("BENCH_PEER_LATENCY_RATE", "2000"))
    seconds = int(os.environ.get("BENCH_PEER_LATENCY_S", "20"))
    interval = interval_ms()
    bootstrap = services_env()["KAFKA_BOOTSTRAP_SERVERS"]
    peers_jar()
    spark = spark_session()
    floor_sink.register(spark)
    run_id = uuid.uuid4().hex[:8]
    figures: dict[str, dict[str, float]] = {}
    batches: dict[str, dict[str, float]] = {}
    equal = True
    with tempfile.TemporaryDirectory() as tmp:
        # BENCH_PEER_SPLIT=1 adds ours_source and ours_sink (bench.peer_kafka.SPARK_PIPELINES).
        split = ("ours_source", "ours_sink") if os.environ.get("BENCH_PEER_SPLIT") == "1" else ()
        floor_ms: list[float] = []
        for engine in ("spark", "ours", "floor", *ENGINES, *split):
            args = (spark, bootstrap, tmp, run_id, rate, seconds, interval)
            if engine == "floor":
                p50, p99, once, profile, floor_ms = _measure_floor(*args)
            else:
                p50, p99, once, profile = _measure(engine, *args)
            figures[engine] = {"p50_ms": p50, "p99_ms": p99}
            if profile:
                batches[engine] = profile
                print(f"[bench] peer_latency_eo {engine} batch phases (median ms): {json.dumps(profile)}",
                      file=sys.stderr)
            equal = equal and once
            print(f"[bench] peer_latency_eo {engine}: p50={p50:.0f} ms p99={p99:.0f} ms "
                  f"({rate} rec/s for {seconds} s, interval {interval} ms, once={str(once).lower()})",
                  file=sys.stderr)
        p50, p99, once, commit_ms = _measure_commit_lag(bootstrap, run_id, rate, seconds, interval)
        figures["kafka_commit"] = {"p50_ms": p50, "p99_ms": p99}
        equal = equal and once
        print(f"[bench] peer_latency_eo Kafka's own commit to visible (librdkafka, one interval's records a "
              f"transaction): p50={p50:.0f} ms p99={p99:.0f} ms, once={str(once).lower()}",
              file=sys.stderr)
        bound = bound_p99(floor_ms, commit_ms)
        print(f"[bench] peer_latency_eo the floor then Kafka's own commit (the lowest p99 an exactly-once "
              f"Kafka sink can show here): p99={bound:.0f} ms, "
              f"{bound / figures['floor']['p99_ms']:.2f} of the floor's", file=sys.stderr)
        back_to_back: dict[str, dict[str, float]] = {}
        for engine in ("spark", "ours"):
            p50, p99, once, profile = _measure(engine, spark, bootstrap, tmp, run_id + "b", rate, seconds, 0)
            phases = {f"batch_{k}": v for k, v in profile.items()}
            back_to_back[engine] = {"p50_ms": p50, "p99_ms": p99, **phases}
            equal = equal and once
            print(f"[bench] peer_latency_eo {engine} back to back (processingTime 0): p50={p50:.0f} ms "
                  f"p99={p99:.0f} ms, batch phases (median ms): {json.dumps(profile)}, "
                  f"once={str(once).lower()}",
                  file=sys.stderr)
    ours_p99 = figures["ours"]["p99_ms"]
    ratios = {"ratio_floor": ours_p99 / figures["floor"]["p99_ms"],
              "ratio_native": ours_p99 / figures["spark"]["p99_ms"],
              "commit_p99_ms": figures["kafka_commit"]["p99_ms"],
              "bound_floor": bound / figures["floor"]["p99_ms"]}
    extra = {"rate": rate, "seconds": seconds, "interval_ms": interval, "latency": figures, **ratios,
             "spark_batch_phases_ms": batches, "back_to_back": back_to_back,
             "settings": {**SETTINGS, "floor": FLOOR_SETTINGS}}
    RESULTS_DIR.mkdir(exist_ok=True)
    (Path(RESULTS_DIR) / "peer_latency_eo_extra.json").write_text(json.dumps(extra, indent=2))
    best_peer = min(figures[e]["p99_ms"] for e in ENGINES)
    return Result("peer_latency_eo", ours_p99, best_peer, equal, figures=ratios,
                  detail={"latency": figures})


FLOOR_SETTINGS = ("hzsource kafka -> a Python sink writing nothing (bench.floor_sink: Arrow stream writer, "
                  "rows drained, commit notes its time), local[2], ProcessingTime(interval); latency = "
                  "batch commit time - produce time")
