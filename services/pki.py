"""A local certificate authority for the databases' and queue broker's TLS listeners, made
with the system's ``openssl`` (PEM files, which libpq and Python's ``ssl`` read as they
are). Kafka keeps its own keytool-made store (``services/kafka_tls.py``): the JVM wants
PKCS12.

Everything lives in ``.local/pki``: ``ca.pem`` for clients to trust, and per name a
certificate ``<name>.pem`` and its key ``<name>.key`` (mode 0600: libpq refuses a client
key others can read). ``expired`` is the certificate login's certificate with its validity
ended, signed by the same CA, for the tests of a refused handshake; ``other-ca.pem`` a CA
nobody signed with; ``server.p12`` and ``ca-trust.p12`` the server's key and the CA as
PKCS12 stores for the JVM (Artemis).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from services.common import HOST, LOCAL, ServiceError, log

PKI = LOCAL / "pki"
SERVER_SANS = f"subjectAltName=DNS:localhost,IP:{HOST}"
CERT_USER = "sparkext_cert"  # PostgreSQL's certificate-only login (its CN is the role name)
STORE_PASSWORD = "sparkext-pki"  # the JVM broker's key and trust stores; not a client secret


def _openssl(*args: str, cwd: Path) -> None:
    res = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if res.returncode != 0:
        raise ServiceError(f"openssl {args[0]} failed:\n{res.stdout}\n{res.stderr}")


def _ca(cwd: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
             f"{name}.pem", "-days", "3650", "-subj", f"/CN=spark-ext {name}",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign",
             cwd=cwd)


def _issue(cwd: Path, name: str, cn: str, ext: str | None, days: str = "3650",
           start: str | None = None) -> None:
    """``name.pem`` / ``name.key`` signed by ``ca``; ``start`` backdates the validity
    (``openssl x509 -not_before`` needs 3.4, so an expired one is made with ``ca``)."""
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
             "-subj", f"/CN={cn}", cwd=cwd)
    if start is None:
        extra = ["-extfile", f"{name}.ext"] if ext else []
        if ext:
            (cwd / f"{name}.ext").write_text(ext + "\n")
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", f"{name}.pem", "-days", days, *extra, cwd=cwd)
    else:
        (cwd / "ca.cnf").write_text(
            "[ca]\ndefault_ca=local\n[local]\ndatabase=index.txt\nnew_certs_dir=.\nserial=serial\n"
            "default_md=sha256\npolicy=any\ncopy_extensions=none\n[any]\ncommonName=supplied\n"
            f"[ext]\n{ext or ''}\n")
        (cwd / "index.txt").write_text("")
        (cwd / "serial").write_text("1000\n")
        _openssl("ca", "-batch", "-config", "ca.cnf", "-cert", "ca.pem", "-keyfile", "ca.key", "-in",
                 f"{name}.csr", "-out", f"{name}.pem", "-startdate", start, "-enddate", "20200102000000Z",
                 "-extensions", "ext", "-notext", cwd=cwd)
        for f in cwd.glob("*"):  # openssl ca's database and its copy of the certificate
            if f.name.startswith(("index.txt", "serial", "ca.cnf")) or f.name == "1000.pem":
                f.unlink()
    (cwd / f"{name}.key").chmod(0o600)
    (cwd / f"{name}.csr").unlink()


def make_pki() -> Path:
    """The CA, a server certificate for loopback, the certificate login's client
    certificate (and an expired one) and a stranger CA. Idempotent."""
    want = ("ca.pem", "server.pem", "server.key", f"{CERT_USER}.pem", f"{CERT_USER}.key", "expired.pem",
            "other-ca.pem", "server.p12", "ca-trust.p12")
    if all((PKI / f).exists() for f in want):
        return PKI
    PKI.mkdir(parents=True, exist_ok=True)
    for f in PKI.iterdir():
        f.unlink()
    _ca(PKI, "ca")
    _issue(PKI, "server", "localhost", SERVER_SANS)
    _issue(PKI, CERT_USER, CERT_USER, None)
    _issue(PKI, "expired", CERT_USER, None, start="20200101000000Z")
    _ca(PKI, "other-ca")
    (PKI / "other-ca.key").unlink()
    # For the JVM (Artemis): the server's key and chain, and a trust store of the CA.
    _openssl("pkcs12", "-export", "-in", "server.pem", "-inkey", "server.key", "-certfile", "ca.pem",
             "-name", "server", "-out", "server.p12", "-passout", f"pass:{STORE_PASSWORD}", cwd=PKI)
    from services.kafka_tls import keytool

    res = subprocess.run([keytool(), "-importcert", "-noprompt", "-alias", "ca", "-file", "ca.pem",
                          "-keystore", "ca-trust.p12", "-storetype", "PKCS12", "-storepass", STORE_PASSWORD],
                         cwd=PKI, capture_output=True, text=True)
    if res.returncode != 0:
        raise ServiceError(f"keytool -importcert failed:\n{res.stdout}\n{res.stderr}")
    os.chmod(PKI, 0o755)
    log(f"made a local CA, server and client certificates in {PKI}")
    return PKI
