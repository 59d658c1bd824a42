"""A local MariaDB server from Debian's packages, unpacked under ``.local/mariadb`` (no root
install, no system service): ``apt-get download`` fetches the server's package and the two
libraries a bare machine lacks, ``dpkg -x`` unpacks them, ``mariadb-install-db`` makes the
data directory once.

Loopback only, the binary log on (as a replicated production server has it: ``XA
PREPARE`` is logged, and prepared transactions survive a restart through it). ``root``
logs in over the data directory's socket alone; the tests' user ``sparkext`` gets a
password made at the first start and kept in ``.local/mariadb/password``: none is in the
repository. Run as root (as ``make services`` is here): the socket login maps the OS
user ``root``.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path

from services.common import (
    HOST,
    LOCAL,
    MARIADB_DB,
    MARIADB_PORT,
    MARIADB_USER,
    ServiceError,
    _spawn,
    _wait,
    log,
)
from services.pki import make_pki

HOME = LOCAL / "mariadb"
ROOT = HOME / "root"  # the unpacked packages
DATA = HOME / "data"
SOCKET = HOME / "mariadb.sock"
PASSWORD_FILE = HOME / "password"
# The server and client packages, and the libraries the server links that a bare Debian
# machine does not have.
PACKAGES = ("mariadb-server-core", "mariadb-client-core", "libaio1", "liburing2")


def _libs() -> dict[str, str]:
    """The unpacked libraries (Debian's multiarch directory, e.g. ``x86_64-linux-gnu``)."""
    dirs = sorted(str(p) for p in (ROOT / "usr" / "lib").glob("*-linux-gnu*"))
    return {"LD_LIBRARY_PATH": ":".join(dirs)}


def install() -> Path:
    """The unpacked server binary, fetched once."""
    server = ROOT / "usr" / "sbin" / "mariadbd"
    if server.exists():
        return server
    debs = HOME / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    log("fetching MariaDB from Debian's packages")
    res = subprocess.run(["apt-get", "download", *PACKAGES], cwd=debs, capture_output=True, text=True)
    if res.returncode != 0:  # a machine whose package lists were never fetched: once more after that
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, text=True)
        res = subprocess.run(["apt-get", "download", *PACKAGES], cwd=debs, capture_output=True, text=True)
    if res.returncode != 0:
        raise ServiceError(f"apt-get download {' '.join(PACKAGES)} failed:\n{res.stderr[-2000:]}")
    for deb in sorted(debs.glob("*.deb")):
        res = subprocess.run(["dpkg", "-x", str(deb), str(ROOT)], capture_output=True, text=True)
        if res.returncode != 0:
            raise ServiceError(f"dpkg -x {deb.name} failed: {res.stderr}")
    if not server.exists():
        raise ServiceError(f"no mariadbd in the unpacked packages under {ROOT}")
    return server


def password() -> str:
    """The tests' user's password, made once per data directory."""
    if not PASSWORD_FILE.exists():
        HOME.mkdir(parents=True, exist_ok=True)
        PASSWORD_FILE.write_text(secrets.token_urlsafe(18))
        PASSWORD_FILE.chmod(0o600)
    return PASSWORD_FILE.read_text().strip()


def _args(server: Path) -> list[str]:
    user = ["--user=root"] if os.geteuid() == 0 else []
    # TLS on the same port for whoever asks (the local CA's server certificate), as a
    # production server offers it; clear text stays allowed for the tests' own URL.
    pki = make_pki()
    tls = [f"--ssl-ca={pki / 'ca.pem'}", f"--ssl-cert={pki / 'server.pem'}",
           f"--ssl-key={pki / 'server.key'}"]
    return [str(server), "--no-defaults", f"--basedir={ROOT / 'usr'}", f"--datadir={DATA}", *user,
            f"--bind-address={HOST}", f"--port={MARIADB_PORT}", f"--socket={SOCKET}",
            f"--pid-file={HOME / 'mariadbd.pid'}", f"--lc-messages-dir={ROOT / 'usr/share/mysql'}",
            "--log-bin=binlog", "--binlog-format=ROW", "--server-id=1", "--max-connections=400",
            "--innodb-buffer-pool-size=256M", "--innodb-flush-log-at-trx-commit=1", "--sync-binlog=1",
            "--skip-name-resolve", "--local-infile=1", "--character-set-server=utf8mb4",
            "--collation-server=utf8mb4_bin", *tls]


def root_connect() -> object:
    import pymysql

    return pymysql.connect(unix_socket=str(SOCKET), user="root", autocommit=True, connect_timeout=3)


def ready() -> bool:
    """A round trip as the tests' user over TCP."""
    import pymysql

    conn = pymysql.connect(host=HOST, port=MARIADB_PORT, user=MARIADB_USER, password=password(),
                           database=MARIADB_DB, connect_timeout=3)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@log_bin")
            row = cur.fetchone()
            if row is None or int(row[0]) != 1:
                raise ServiceError("the binary log is off")
            return True
    finally:
        conn.close()


def settings() -> list[str]:
    return []


def _first_start(server: Path) -> None:
    """The data directory, and the tests' user and database (over the socket, as root)."""
    res = subprocess.run(
        [str(ROOT / "usr/bin/mariadb-install-db"), "--no-defaults", f"--basedir={ROOT / 'usr'}",
         f"--datadir={DATA}", *(["--user=root"] if os.geteuid() == 0 else []), "--skip-test-db",
         "--skip-name-resolve",
         "--auth-root-authentication-method=socket"],
        capture_output=True, text=True, env={**os.environ, **_libs()})
    if res.returncode != 0:
        raise ServiceError(f"mariadb-install-db failed:\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")


def _grant() -> None:
    conn = root_connect()
    try:
        with conn.cursor() as cur:  # type: ignore[attr-defined]
            cur.execute(f"CREATE DATABASE IF NOT EXISTS `{MARIADB_DB}`")
            who = f"'{MARIADB_USER}'@'{HOST}'"
            cur.execute(f"CREATE USER IF NOT EXISTS {who} IDENTIFIED BY %s", (password(),))
            cur.execute(f"ALTER USER {who} IDENTIFIED BY %s", (password(),))
            # The tests create users, kill sessions and read every XA transaction.
            cur.execute(f"GRANT ALL PRIVILEGES ON *.* TO '{MARIADB_USER}'@'{HOST}' WITH GRANT OPTION")
    finally:
        conn.close()  # type: ignore[attr-defined]


def mariadb_up() -> None:
    server = install()
    fresh = not (DATA / "mysql").exists()
    if fresh:
        _first_start(server)
    pid = _spawn("mariadb", _args(server), env=_libs())
    log(f"starting mariadb (pid {pid})")

    def socket_up() -> bool:
        root_connect().close()  # type: ignore[attr-defined]
        return True

    _wait("mariadb", socket_up, pid, LOCAL / "logs" / "mariadb.log")
    _grant()
    _wait("mariadb", ready, pid, LOCAL / "logs" / "mariadb.log")
    log(f"mariadb ready at {HOST}:{MARIADB_PORT}")
