"""Start, check and stop the local Kafka, PostgreSQL (a TLS-only one too), ActiveMQ Artemis,
MariaDB and the schema registry (Apicurio, Confluent's API).

Usage: ``python -m services up|down|status|baseline-jars`` (the Makefile calls it).

Everything a run creates lives under ``.local/`` in the repository (pid files, logs,
data); downloaded broker jars live in a cache outside git (``$SPARK_EXT_CACHE`` or
``~/.cache/spark-ext``). ``up`` is idempotent: a service whose pid file names a live
process and which answers a round trip is left alone. Readiness is a real round trip
(produce + consume, ``SELECT 1`` plus a prepared transaction, STOMP send + receive).
The addresses are written to ``.local/services.env`` as shell ``KEY=VALUE`` lines.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from services import mariadb, registry
from services.artemis import (
    _artemis_settings,
    _stomp_ready,
    artemis_home,
    artemis_up,
)
from services.common import (
    HOST,
    KAFKA_PORT,
    KAFKA_SASL_PASSWORD,
    KAFKA_SASL_PLAINTEXT_PORT,
    KAFKA_SASL_SSL_PORT,
    KAFKA_SASL_USER,
    LOCAL,
    MARIADB_DB,
    MARIADB_PORT,
    MARIADB_USER,
    POSTGRES_DB,
    POSTGRES_PASSWORD,
    POSTGRES_PORT,
    POSTGRES_TLS_PORT,
    POSTGRES_USER,
    REGISTRY_PORT,
    STOMP_MTLS_PORT,
    STOMP_PASSWORD,
    STOMP_PORT,
    STOMP_TLS_PORT,
    STOMP_USER,
    ServiceDiedError,
    ServiceError,
    _adopt,
    _port_open,
    _read_pid,
    _stop_pid,
    log,
)
from services.kafka import (
    TLS_DIR,
    _kafka_ready,
    _kafka_settings,
    baseline_jars,
    kafka_libs,
    kafka_up,
)
from services.kafka_tls import PLAINTEXT_MECHANISM, SSL_MECHANISM
from services.pki import CERT_USER, PKI, make_pki
from services.postgres import (
    _pg_ready,
    _pg_settings,
    _pg_user,
    postgres_up,
)
from services.postgres_tls import postgres_tls_up, tls_ready, tls_settings


def write_env() -> Path:
    env = LOCAL / "services.env"
    env.write_text("\n".join([
        f"KAFKA_BOOTSTRAP_SERVERS={HOST}:{KAFKA_PORT}",
        f"KAFKA_SASL_SSL_BOOTSTRAP_SERVERS={HOST}:{KAFKA_SASL_SSL_PORT}",
        f"KAFKA_SASL_PLAINTEXT_BOOTSTRAP_SERVERS={HOST}:{KAFKA_SASL_PLAINTEXT_PORT}",
        f"KAFKA_SASL_USER={KAFKA_SASL_USER}",
        f"KAFKA_SASL_PASSWORD={KAFKA_SASL_PASSWORD}",
        f"KAFKA_SASL_MECHANISM_SSL={SSL_MECHANISM}",
        f"KAFKA_SASL_MECHANISM_PLAINTEXT={PLAINTEXT_MECHANISM}",
        f"KAFKA_SSL_CA_LOCATION={TLS_DIR / 'ca.pem'}",
        f"POSTGRES_URL=postgresql+psycopg2://{POSTGRES_USER}:{POSTGRES_PASSWORD}"
        f"@{HOST}:{POSTGRES_PORT}/{POSTGRES_DB}",
        # The TLS-only server: the certificate login, and the password user, both verify-full.
        f"POSTGRES_TLS_URL=postgresql+psycopg2://{CERT_USER}@{HOST}:{POSTGRES_TLS_PORT}/{POSTGRES_DB}"
        f"?sslmode=verify-full&sslrootcert={PKI / 'ca.pem'}&sslcert={PKI / (CERT_USER + '.pem')}"
        f"&sslkey={PKI / (CERT_USER + '.key')}",
        f"POSTGRES_TLS_ADMIN_URL=postgresql+psycopg2://{POSTGRES_USER}:{POSTGRES_PASSWORD}"
        f"@{HOST}:{POSTGRES_TLS_PORT}/{POSTGRES_DB}?sslmode=verify-full&sslrootcert={PKI / 'ca.pem'}",
        f"MARIADB_URL=mysql+pymysql://{MARIADB_USER}:{mariadb.password()}@{HOST}:{MARIADB_PORT}/{MARIADB_DB}",
        f"PKI_DIR={PKI}",
        f"STOMP_HOST={HOST}",
        f"STOMP_TLS_URL=stomp+ssl://{HOST}:{STOMP_TLS_PORT}",  # the CA: PKI_DIR/ca.pem
        f"STOMP_MTLS_URL=stomp+ssl://{HOST}:{STOMP_MTLS_PORT}",  # wants a client certificate
        f"STOMP_PORT={STOMP_PORT}",
        f"STOMP_USER={STOMP_USER}",
        f"STOMP_PASSWORD={STOMP_PASSWORD}",
        f"SCHEMA_REGISTRY_URL={registry.URL}",
        "",
    ]))
    return env


# name -> (port that answers, round-trip check, start function)
SERVICES: dict[str, tuple[int, Callable[[], bool], Callable[[], list[str]], Callable[[], None]]] = {
    "kafka": (KAFKA_PORT, _kafka_ready, _kafka_settings, kafka_up),
    "postgres": (POSTGRES_PORT, _pg_ready, _pg_settings, postgres_up),
    "postgres-tls": (POSTGRES_TLS_PORT, tls_ready, tls_settings, postgres_tls_up),
    "artemis": (STOMP_PORT, _stomp_ready, _artemis_settings, artemis_up),
    "mariadb": (MARIADB_PORT, mariadb.ready, mariadb.settings, mariadb.mariadb_up),
    "registry": (REGISTRY_PORT, registry.ready, registry.settings, registry.registry_up),
}


# What a service's start downloads, unpacks or creates the first time (both PostgreSQL
# servers run as one system user under root).
_PREPARE: dict[str, Callable[[], object]] = {
    "kafka": kafka_libs, "artemis": artemis_home, "mariadb": mariadb.install,
    "registry": registry.registry_home, "postgres": _pg_user, "postgres-tls": _pg_user,
}


def _ensure(name: str) -> None:
    """Start ``name`` unless ours is running or another process already serves its port."""
    port, ready, settings, start = SERVICES[name]
    if _read_pid(name) and _port_open(port):
        log(f"{name} already running at {HOST}:{port}")
    elif _port_open(port):
        _adopt(name, port, ready, settings)
    else:
        try:
            start()
        except ServiceDiedError as first:
            # Seen: a Kafka broker restarted under load came up, then died on its metadata
            # log. Once more, from a clean stop; a second death is reported with its log.
            log(f"{name} died while starting; starting it once more. {str(first).splitlines()[0]}")
            _stop_pid(name)
            try:
                start()
            except ServiceDiedError as second:
                raise ServiceError(f"{name} died twice while starting: {second}") from None


def up(names: list[str]) -> None:
    LOCAL.mkdir(exist_ok=True)
    # What services share (the local CA, a system user) or download (Maven, Debian's
    # packages) is made one at a time; then they start side by side, as each start is
    # mostly waiting for a JVM or a server to answer (all six: 40 s one after another, 32 s
    # side by side).
    make_pki()
    for name in names:
        if not _port_open(SERVICES[name][0]):
            _PREPARE[name]()
    with ThreadPoolExecutor(max_workers=len(names) or 1) as pool:
        for started in [pool.submit(_ensure, name) for name in names]:
            started.result()
    env = write_env()
    # Print the addresses, never the passwords.
    text = env.read_text().replace(f":{POSTGRES_PASSWORD}@", ":***@")  # both PostgreSQL URLs
    text = text.replace(f"STOMP_PASSWORD={STOMP_PASSWORD}", "STOMP_PASSWORD=***")
    text = text.replace(f":{mariadb.password()}@", ":***@")
    print(text.replace(f"KAFKA_SASL_PASSWORD={KAFKA_SASL_PASSWORD}", "KAFKA_SASL_PASSWORD=***"), end="")
    log(f"addresses written to {env}")


def down(names: list[str]) -> None:
    for name in reversed(names):
        # A broker killed before it finished shutting down leaves logs it must recover;
        # give a loaded Kafka (a CPU-starved JVM closing many transactions) time first.
        _stop_pid(name, timeout=90.0 if name == "kafka" else 30.0, port=SERVICES[name][0])


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


