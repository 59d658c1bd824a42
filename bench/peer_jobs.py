"""The peer engines of the ``peer_*`` bench cases: Kafka Streams (``exactly_once_v2``) and
Flink's ``KafkaSink`` (``EXACTLY_ONCE``), from the Maven project in ``bench/peers/``.

The fat jar is built on first use into the cache outside git (``$SPARK_EXT_CACHE/peers``,
like the Kafka jars), keyed by a digest of the project's files, so an edited job is
rebuilt and an unchanged one never is. Each peer runs in its own JVM, stops by itself
once a ``read_committed`` consumer has counted the expected records on its output, and
prints one ``PEER engine=... records=... seconds=... rate=...`` line.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.common import BenchError
from services.common import CACHE, _java, _mvn

PROJECT = Path(__file__).resolve().parent / "peers"
MAIN = {"kafka_streams": "dev.sparkext.peers.StreamsCopy", "flink": "dev.sparkext.peers.FlinkCopy"}
ENGINES = tuple(MAIN)
_LINE = re.compile(r"^PEER engine=(\S+) records=(\d+) seconds=([\d.]+) rate=([\d.]+)", re.M)


@dataclass(frozen=True)
class PeerTiming:
    engine: str
    records: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.records / self.seconds


def _digest() -> str:
    h = hashlib.sha256()
    for f in [PROJECT / "pom.xml", *sorted(p for p in (PROJECT / "src").rglob("*") if p.is_file())]:
        h.update(str(f.relative_to(PROJECT)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def peers_jar() -> Path:
    """The built fat jar; built (a minute or two, Maven Central) when this project version
    has none yet. Built in a copy, so nothing lands in the repository."""
    jar = CACHE / "peers" / f"bench-peers-{_digest()}.jar"
    if jar.exists():
        return jar
    print(f"[bench] building the peer jobs (Kafka Streams, Flink) into {jar}", file=sys.stderr)
    jar.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=jar.parent) as tmp:
        work = Path(tmp) / "peers"
        shutil.copytree(PROJECT, work, ignore=shutil.ignore_patterns("target"))
        _mvn("-f", str(work / "pom.xml"), "package", "-DskipTests")
        (work / "target" / "bench-peers-1.jar").replace(jar)
    return jar


def start_peer(engine: str, bootstrap: str, source: str, sink: str, expected: int, interval_ms: int,
               prefix: str, log: Path, timeout_s: int = 600) -> subprocess.Popen[str]:
    """Start ``engine`` copying ``source`` to ``sink``; its stderr goes to ``log``."""
    argv = [_java(), "-Xms512m", "-Xmx2g", "-cp", str(peers_jar()), MAIN[engine],
            bootstrap, source, sink, str(expected), str(interval_ms), prefix, str(timeout_s)]
    with open(log, "w") as err:
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, text=True)


def finish_peer(engine: str, proc: subprocess.Popen[str], log: Path, timeout_s: float = 660) -> PeerTiming:
    """Wait for the peer to stop by itself; its own timing (submission to all visible)."""
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise BenchError(f"peer {engine} did not stop within {timeout_s:.0f} s; see {log}") from None
    m = _LINE.search(out)
    if proc.returncode != 0 or m is None:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise BenchError(f"peer {engine} failed (exit {proc.returncode}):\n{out[-2000:]}\n{tail}")
    return PeerTiming(m.group(1), int(m.group(2)), float(m.group(3)))


def run_peer(engine: str, bootstrap: str, source: str, sink: str, expected: int, interval_ms: int,
             prefix: str, log: Path) -> PeerTiming:
    proc = start_peer(engine, bootstrap, source, sink, expected, interval_ms, prefix, log)
    return finish_peer(engine, proc, log)
