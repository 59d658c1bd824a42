"""What ``make soak`` samples: the job's processes, its checkpoint, the sinks' bookkeeping,
each batch's duration and each payment's visibility.

Processes are the job's whole tree (``spark-submit``'s JVM, the job's Python, Spark's
Python daemons and the workers they fork). Resident memory is each process's RSS summed:
forked workers share pages with their daemon, so the sum counts those twice, the same way
at every sample, which is what a trend needs.
"""

from __future__ import annotations

import math
import os
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

MB = 1024 * 1024


@dataclass(frozen=True)
class Procs:
    """One look at the job's process tree."""

    rss_jvm_mb: float
    rss_python_mb: float  # the job's own Python and every PySpark daemon and worker
    python_procs: int
    fds: int  # open descriptors of every process in the tree
    threads_jvm: int

    @property
    def rss_mb(self) -> float:
        return self.rss_jvm_mb + self.rss_python_mb


def tree(root_pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(root_pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def role(p: psutil.Process) -> str:
    """``jvm``, ``executor`` (a daemon or worker running Spark tasks' Python: module
    ``pyspark.daemon`` alone or with ``pyspark.worker``), ``driver-worker`` (a daemon or
    worker of another module: data source planning, the streaming sink's commit, the
    streaming source's runner), ``job``
    (the job's own Python) or ``other``."""
    try:
        cmd = p.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return "other"
    if cmd and os.path.basename(cmd[0]) == "java":
        return "jvm"
    if "pyspark.daemon" in cmd:
        rest = cmd[cmd.index("pyspark.daemon") + 1:]
        return "executor" if not rest or rest[0] == "pyspark.worker" else "driver-worker"
    if any(c.startswith("pyspark.") for c in cmd):  # a runner without a daemon (a streaming source's)
        return "driver-worker"
    if any(c.endswith("job.py") for c in cmd):
        return "job"
    return "other"


def look(root_pid: int) -> Procs:
    jvm = py = 0.0
    n_py = fds = threads = 0
    for p in tree(root_pid):
        try:
            rss = p.memory_info().rss / MB
            fds += p.num_fds()
            r = role(p)
            if r == "jvm":
                jvm += rss
                threads += p.num_threads()
            elif r != "other":
                py += rss
                n_py += 1
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue  # a worker that ended between the listing and the look
    return Procs(round(jvm, 1), round(py, 1), n_py, fds, threads)


def heap_mb(root_pid: int) -> tuple[float, float] | None:
    """The driver JVM's heap in use and its old generation in use (``jstat -gc``), in MB:
    what the JVM holds, apart from what it has committed (with a fixed heap its resident
    memory is flat whether the live set grows or not, so a leak shows here)."""
    jvm = next((p for p in tree(root_pid) if role(p) == "jvm"), None)
    if jvm is None:
        return None
    try:
        out = subprocess.run(["jstat", "-gc", str(jvm.pid)], capture_output=True, text=True,
                             timeout=20).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return None
    half = len(out) // 2
    if half == 0 or len(out) != 2 * half:
        return None
    gc = dict(zip(out[:half], out[half:], strict=True))
    try:
        used = sum(float(gc[k]) for k in ("S0U", "S1U", "EU", "OU"))
        return round(used / 1024, 1), round(float(gc["OU"]) / 1024, 1)
    except (KeyError, ValueError):
        return None


def steady_look(root_pid: int, looks: int = 5, every_s: float = 0.4) -> Procs:
    """The median of a few looks: a batch's commit briefly opens hundreds of descriptors
    (connections, pipes), and a single look that lands in one reads as a step."""
    seen = []
    for i in range(looks):
        if i:
            time.sleep(every_s)  # spacing between looks: a measurement, not a wait
        seen.append(look(root_pid))
    mid = len(seen) // 2

    def med(key: str) -> Any:
        return sorted(getattr(p, key) for p in seen)[mid]

    return Procs(med("rss_jvm_mb"), med("rss_python_mb"), med("python_procs"), med("fds"), med("threads_jvm"))


def busy_executor_worker(root_pid: int, probe_s: float = 0.3) -> psutil.Process | None:
    """A forked executor worker that used CPU in the last ``probe_s`` (one running a task),
    else None. Daemons themselves are left alone: killing one is not a task failure."""
    workers = []
    for p in tree(root_pid):
        try:
            if role(p) == "executor" and role(p.parent()) == "executor":
                workers.append((p, p.cpu_times()))
        except (psutil.NoSuchProcess, psutil.AccessDenied, AttributeError):
            continue
    time.sleep(probe_s)  # the CPU each worker uses in this interval: a measurement, not a wait
    best, used = None, 0.0
    for p, before in workers:
        try:
            now = p.cpu_times()
        except psutil.NoSuchProcess:
            continue
        d = (now.user + now.system) - (before.user + before.system)
        if d > used:
            best, used = p, d
    return best


def dir_size(path: Path) -> tuple[float, int]:
    """(MB, files) under ``path``; (0, 0) when it does not exist."""
    total, files = 0, 0
    for dirpath, _dirs, names in os.walk(path):
        for n in names:
            try:
                total += os.lstat(os.path.join(dirpath, n)).st_size
                files += 1
            except FileNotFoundError:
                continue  # Spark renamed or deleted it meanwhile
    return round(total / MB, 2), files


def percentile(values: Iterable[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) by nearest rank; None for no values."""
    xs = sorted(values)
    if not xs:
        return None
    return xs[min(len(xs) - 1, max(0, math.ceil(q * len(xs)) - 1))]


class Batches:
    """Every batch the job's status file reported, once, with when it was first seen."""

    def __init__(self) -> None:
        self.seen: dict[tuple[int, int], tuple[float, int, float]] = {}  # (run, id) -> (t, rows, ms)

    def update(self, run: int, status: dict[str, Any] | None, query: str) -> None:
        now = time.monotonic()
        q = ((status or {}).get("queries") or {}).get(query) or {}
        for batch_id, rows, ms in q.get("batches") or ():
            if ms is not None:
                self.seen.setdefault((run, int(batch_id)), (now, int(rows), float(ms)))

    def write_csv(self, path: Path, t0: float) -> None:
        """Every batch: run, batch id, minute first seen, input rows, trigger ms."""
        with path.open("w") as f:
            f.write("run,batch_id,minute,rows,trigger_ms\n")
            for (run, batch_id), (t, rows, ms) in sorted(self.seen.items(), key=lambda kv: kv[1][0]):
                f.write(f"{run},{batch_id},{(t - t0) / 60:.3f},{rows},{ms:.0f}\n")

    def durations(self, since: float, until: float) -> list[float]:
        return [ms for t, _rows, ms in self.seen.values() if since < t <= until]

    def __len__(self) -> int:
        return len(self.seen)


class Visibility:
    """When each payment became visible in the ledger, against when it was sent.

    Payment ``i`` has id ``pay-<seed>-<i:07d>`` and ids sort as their index, so a poller
    keeps a frontier (every payment below it seen) and each poll reads only the ledger's
    ids at or above it: a batch's worth of rows, not the table. Visibility is measured to
    the poll that first saw a row, so it is late by up to ``period_s``. A payment sent more
    than ``HOLE_S`` ago and still not seen is passed over (counted in ``skipped``), so one
    missing row cannot make every poll read the ledger from there on; the verification
    names it if it never arrives.
    """

    HOLE_S = 300.0

    def __init__(self, url: str, table: str, seed: int, count: int, period_s: float = 0.5) -> None:
        import numpy as np

        self.url, self.table, self.seed, self.period_s = url, table, seed, period_s
        self.sent = np.full(count + 1, np.nan)
        self.visible = np.full(count + 1, np.nan)
        self.frontier = 0
        self.skipped = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-visibility", daemon=True)
        self.error: str | None = None

    def track(self, payments: Iterable[Any]) -> Iterator[Any]:
        """``payments`` as they go to the producer, each first send's time noted."""
        prefix = len(f"pay-{self.seed}-")
        for p in payments:
            i = int(p.payment_id[prefix:])
            if i < len(self.sent) and self.sent[i] != self.sent[i]:  # NaN: not sent before
                self.sent[i] = time.monotonic()
            yield p

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        import sqlalchemy as sa

        engine = sa.create_engine(self.url, pool_pre_ping=True)
        prefix = f"pay-{self.seed}-"
        try:
            while not self._stop.wait(self.period_s):
                try:
                    with engine.connect() as conn:
                        rows = conn.execute(
                            sa.text(f"SELECT payment_id FROM {self.table} WHERE payment_id >= :lo"),
                            {"lo": f"{prefix}{self.frontier:07d}"}).scalars().all()
                except sa.exc.DBAPIError:
                    continue  # the job has not created the table yet
                now = time.monotonic()
                for pid in rows:
                    i = int(pid[len(prefix):])
                    if i < len(self.visible) and self.visible[i] != self.visible[i]:
                        self.visible[i] = now
                seen = self.visible == self.visible  # False where NaN (not seen yet)
                while self.frontier < len(seen):
                    if not seen[self.frontier]:
                        sent = self.sent[self.frontier]
                        if sent != sent or now - sent < self.HOLE_S:  # not sent yet, or recently
                            break
                        self.skipped += 1
                    self.frontier += 1
        except Exception as e:  # noqa: BLE001 - reported with the figures, never a silent gap
            self.error = f"{type(e).__name__}: {e}"
        finally:
            engine.dispose()

    def latencies_ms(self, since: float, until: float) -> list[float]:
        """Sent-to-visible of the payments first seen in (since, until]."""
        import numpy as np

        v, s = self.visible, self.sent
        mask = (v > since) & (v <= until) & ~np.isnan(s)
        return [float(x) for x in (v[mask] - s[mask]) * 1000]


class Notices:
    """The notices queue read as the account holders' service would read it, while the job
    runs: an unread queue of an hour's notices (1.4M at 400/s) outgrows the broker's heap.
    The payment ids read go to the verification, which reads what is left."""

    def __init__(self, host: str, port: int, user: str, password: str, destination: str) -> None:
        import stomp

        self.ids: list[str] = []
        self.error: str | None = None
        outer = self

        class Listener(stomp.ConnectionListener):
            def on_message(self, frame: Any) -> None:
                import json

                try:
                    outer.ids.append(json.loads(frame.body)["payment_id"])
                except (ValueError, KeyError) as e:
                    outer.error = f"a notice that is no payment's: {e}: {frame.body[:100]!r}"

            def on_error(self, frame: Any) -> None:
                outer.error = f"the broker sent ERROR: {frame.body[:200]!r}"

            def on_disconnected(self) -> None:
                if not outer.stopping:
                    outer.error = "the broker closed the notices reader's connection"

        # Heartbeats both ways: a consumer acking automatically sends nothing, and the broker
        # ends a connection it has heard nothing from within its TTL (seen: the reader went
        # quiet after a minute and an hour's notices piled up until the broker ran out of heap).
        self.stopping = False
        self._conn = stomp.Connection12([(host, port)], heartbeats=(10_000, 10_000))
        self._conn.set_listener("notices", Listener())
        self._creds = (user, password)
        self.destination = destination

    def start(self) -> None:
        self._conn.connect(*self._creds, wait=True)
        self._conn.subscribe(self.destination, id="soak-notices", ack="auto")

    def stop(self) -> None:
        """Unsubscribe and disconnect with a receipt: every message delivered before is in ``ids``."""
        self.stopping = True
        if self._conn.is_connected():
            self._conn.unsubscribe("soak-notices")
            self._conn.disconnect(receipt="soak-notices-bye")
