"""``python -m bench.faults.restarts [--times N]``: stop and start the local Kafka broker N
times (default 20) while a producer writes transactions to it, and check after each
start that the broker stays up and its log shows no corrupt record.

Why: in a ``make faults`` run a broker restarted under load came back, then died on
``CorruptRecordException`` in ``__cluster_metadata-0`` (KRaft's metadata log). Each line
says how long the stop took, whether it needed SIGKILL, and how long the start took.
``--kill``: kill -9 the broker instead (a crash), to see whether Kafka recovers its logs.
Exit 0 when every restart was clean. Bounded: at most 120 s per stop and start.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

from bench.common import ROOT, services_env
from services.common import KAFKA_PORT, LOCAL, _group_alive, _pid_alive, _port_open, _read_pid

STABLE_S = 5.0  # how long a started broker must stay up (it died about 3 s after its start)
_BAD = ("CorruptRecordException", "Found record size", "ERROR Exiting", "Shutdown broker because")


def _load(bootstrap: str, topic: str, stop: threading.Event, sent: list[int]) -> None:
    """Transactions of 100 records, again and again, riding out the restarts."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    while not stop.is_set():
        try:
            prod = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"restarts-{topic}",
                                 acks="all", max_block_ms=10_000)
            prod.init_transactions()
            while not stop.is_set():
                prod.begin_transaction()
                for i in range(100):
                    prod.send(topic, f"{i}".encode())
                prod.commit_transaction()
                sent[0] += 100
        except (KafkaError, OSError):
            time.sleep(0.5)  # the broker is restarting


def _services(verb: str) -> tuple[float, str]:
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "services", verb, "kafka"], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"services {verb} kafka failed: {r.stdout[-1500:]}{r.stderr[-1500:]}")
    return time.monotonic() - t0, r.stdout + r.stderr


def _kill() -> tuple[float, str]:
    """kill -9 of the broker's process group (a crash, not a stop); returns once it is gone."""
    t0 = time.monotonic()
    pid = _read_pid("kafka")
    if pid is None:
        raise RuntimeError("kafka is not running")
    os.killpg(pid, signal.SIGKILL)
    while _pid_alive(pid) or _group_alive(pid) or _port_open(KAFKA_PORT):
        if time.monotonic() - t0 > 30:
            raise RuntimeError("kafka still runs 30 s after SIGKILL")
        time.sleep(0.1)
    (LOCAL / "kafka.pid").unlink(missing_ok=True)
    return time.monotonic() - t0, "killing it"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.faults.restarts")
    ap.add_argument("--times", type=int, default=20)
    ap.add_argument("--kill", action="store_true", help="kill -9 the broker instead of stopping it")
    args = ap.parse_args(argv)
    bootstrap = services_env()["KAFKA_BOOTSTRAP_SERVERS"]
    topic = f"restarts-{uuid.uuid4().hex[:8]}"
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, 3, 1)])
    admin.close()
    stop, sent = threading.Event(), [0]
    loader = threading.Thread(target=_load, args=(bootstrap, topic, stop, sent), daemon=True)
    loader.start()
    logfile = LOCAL / "logs" / "kafka.log"
    bad = 0
    try:
        for n in range(1, args.times + 1):
            time.sleep(2.0)  # let the load reach the broker
            before = sent[0]
            down_s, out = _kill() if args.kill else _services("down")
            killed = "killing it" in out
            mark = logfile.stat().st_size
            up_s, _ = _services("up")
            pid = _read_pid("kafka")
            time.sleep(STABLE_S)
            alive = pid is not None and _read_pid("kafka") == pid
            with open(logfile, errors="replace") as f:
                f.seek(mark)
                since = f.read()
            hits = [line for line in since.splitlines() if any(b in line for b in _BAD)]
            clean = alive and not hits
            bad += not clean
            error = f" first_error={hits[0][:200]!r}" if hits else ""
            print(f"RESTART {n} stop={down_s:.1f}s killed={killed} start={up_s:.1f}s alive={alive} "
                  f"records_before={before} clean={clean}{error}", flush=True)
    finally:
        stop.set()
        loader.join(15)
    print(f"{args.times - bad} of {args.times} restarts clean; {sent[0]} records written in transactions")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
