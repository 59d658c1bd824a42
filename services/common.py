"""What every local service shares: paths, versions and ports, pid files, readiness waits."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCAL = ROOT / ".local"
CACHE = Path(os.environ.get("SPARK_EXT_CACHE", Path.home() / ".cache" / "spark-ext"))

HOST = "127.0.0.1"
# Versions and ports: keep docker-compose.yml in step (tests/test_services.py checks it).
KAFKA_VERSION = "4.1.1"
KAFKA_PORT = 9092
KAFKA_CONTROLLER_PORT = 9093
KAFKA_SASL_SSL_PORT = 9094  # SCRAM-SHA-512 (and -256) over TLS, certificate made at start-up
KAFKA_SASL_PLAINTEXT_PORT = 9095  # PLAIN over plain text
KAFKA_SASL_USER = "sparkext"
KAFKA_SASL_PASSWORD = "sparkext-secret"
KAFKA_TLS_STORE_PASSWORD = "sparkext-tls"  # the broker's local key store; not a client secret
POSTGRES_PORT = 5432
POSTGRES_TLS_PORT = 5433  # a second server that takes TLS only (services/postgres_tls.py)
POSTGRES_USER = "postgres"
POSTGRES_PASSWORD = "postgres"
POSTGRES_DB = "postgres"
MAX_PREPARED_TRANSACTIONS = 256
MARIADB_PORT = 3306
MARIADB_USER = "sparkext"  # its password is made at the first start (services/mariadb.py)
MARIADB_DB = "sparkext"
ARTEMIS_VERSION = "2.40.0"
STOMP_PORT = 61613
STOMP_TLS_PORT = 61614  # STOMP over TLS (the local CA's server certificate)
STOMP_MTLS_PORT = 61615  # STOMP over TLS that also asks for a client certificate
ARTEMIS_CORE_PORT = 61616
REGISTRY_VERSION = "3.0.9"  # Apicurio; 3.3 needs Java 21
REGISTRY_PORT = 8081  # Confluent's usual port; the API under /apis/ccompat/v7
STOMP_USER = "artemis"
STOMP_PASSWORD = "artemis"

READY_TIMEOUT_S = 120.0


class ServiceError(Exception):
    """A local service could not be installed, started or reached."""


class ServiceDiedError(ServiceError):
    """The service's process exited while we waited for it to answer."""


def log(msg: str) -> None:
    print(f"[services] {msg}", flush=True)


# --------------------------------------------------------------------------- helpers


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); look at its state.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        return state != "Z"
    except OSError:
        return False


def _read_pid(name: str) -> int | None:
    f = LOCAL / f"{name}.pid"
    try:
        pid = int(f.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if _pid_alive(pid) else None


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((HOST, port)) == 0


def _wait(what: str, check: Callable[[], bool], pid: int | None, logfile: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    last: Exception | None = None
    while time.monotonic() < deadline:
        if pid is not None and not _pid_alive(pid):
            raise ServiceDiedError(f"{what} exited during start; see {logfile}:\n{_tail(logfile)}")
        try:
            if check():
                return
        except Exception as e:  # noqa: BLE001 - any failure means "not ready yet"
            last = e
        time.sleep(0.5)
    raise ServiceError(
        f"{what} did not answer a round trip within {READY_TIMEOUT_S:.0f}s (last error: {last}); "
        f"see {logfile}:\n{_tail(logfile)}"
    )


def _tail(path: Path, n: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def _spawn(name: str, argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None,
           user: str | None = None) -> int:
    logfile = LOCAL / "logs" / f"{name}.log"
    logfile.parent.mkdir(parents=True, exist_ok=True)
    with open(logfile, "ab") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})}, cwd=cwd, start_new_session=True, user=user,
        )
    (LOCAL / f"{name}.pid").write_text(str(proc.pid))
    return proc.pid


def _group_alive(pgid: int) -> bool:
    """Is any process of group ``pgid`` still running? A process whose main thread is a
    zombie still runs while another of its threads has not exited (a JVM tearing down
    keeps its sockets and files open then), so a zombie counts as gone only once every
    thread of it is."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgid:
                continue
            if fields[0] != "Z":
                return True
            for task in (stat.parent / "task").glob("*/stat"):
                if task.read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    return True
        except OSError:
            continue  # exited while we looked
    return False


def _stop_pid(name: str, timeout: float = 30.0, port: int | None = None) -> None:
    """Stop the service's whole process group and return only once every process of it is
    gone: a restart must not start a new server on the data directory while the old one
    still writes to it (a killed process takes a moment to go)."""
    # PostgreSQL treats SIGTERM as "smart" shutdown (waits for clients); SIGINT is "fast".
    sig = signal.SIGINT if name.startswith("postgres") else signal.SIGTERM
    pid = _read_pid(name)
    pidfile = LOCAL / f"{name}.pid"
    if pid is None:
        pidfile.unlink(missing_ok=True)
        return
    log(f"stopping {name} (pid {pid})")
    started = time.monotonic()
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        os.kill(pid, sig)
    deadline = started + timeout
    while time.monotonic() < deadline and (_pid_alive(pid) or _group_alive(pid)):
        time.sleep(0.2)
    if _pid_alive(pid) or _group_alive(pid):
        log(f"{name} did not stop within {timeout:.0f} s: killing it")
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        gone = time.monotonic() + 30
        while (_pid_alive(pid) or _group_alive(pid)) and time.monotonic() < gone:
            time.sleep(0.1)
        if _pid_alive(pid) or _group_alive(pid):
            raise ServiceError(f"{name} (process group {pid}) still runs 30 s after SIGKILL")
    if port is not None:  # the listening socket goes with the last thread; be sure of it
        closed = time.monotonic() + 30
        while _port_open(port) and time.monotonic() < closed:
            time.sleep(0.1)
    log(f"{name} stopped in {time.monotonic() - started:.1f} s")
    pidfile.unlink(missing_ok=True)


def _adopt(name: str, port: int, ready: Callable[[], bool], settings: Callable[[], list[str]]) -> None:
    """Use a service started elsewhere (e.g. docker compose) if it answers a round trip and
    has the settings the sinks and tests rely on (``settings`` lists what differs)."""
    try:
        ok = ready()
    except Exception as e:  # noqa: BLE001 - report whatever the probe hit
        ok, why = False, str(e)
    else:
        why = "no answer"
    if not ok:
        raise ServiceError(f"port {port} is taken by a process that is not a working {name} ({why}); "
                           "stop it or free the port")
    wrong = settings()
    if wrong:
        raise ServiceError(f"{name} at {HOST}:{port} was started elsewhere with other settings than "
                           f"`make services` uses: {'; '.join(wrong)}. Start it with docker-compose.yml's "
                           "settings, or stop it so `make services` starts its own")
    log(f"{name} at {HOST}:{port} was started elsewhere, answers and has our settings; using it")


def _mvn(*args: str) -> None:
    cmd = ["mvn", "-q", "-B", *args]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise ServiceError(f"maven failed: {' '.join(cmd)}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java:
        raise ServiceError("java not found: install OpenJDK 17+ or set JAVA_HOME")
    return java


# --------------------------------------------------------------------------- Kafka


