"""The local broker's secured listeners: a CA and a broker certificate made with the JDK's
``keytool``, SCRAM users added through Kafka's own ``ConfigCommand``, and a readiness
check through kafka-python (a second client library, so our handshake is not checking
itself)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from services.common import (
    HOST,
    KAFKA_PORT,
    KAFKA_SASL_PASSWORD,
    KAFKA_SASL_PLAINTEXT_PORT,
    KAFKA_SASL_SSL_PORT,
    KAFKA_SASL_USER,
    KAFKA_TLS_STORE_PASSWORD,
    ServiceError,
    _java,
    log,
)

SSL_MECHANISM = "SCRAM-SHA-512"
PLAINTEXT_MECHANISM = "PLAIN"


def keytool() -> str:
    return str(Path(_java()).resolve().parent / "keytool")


def keytool_steps() -> list[list[str]]:
    """keytool's arguments, step by step, run in the TLS directory (docker-compose.yml's
    ``kafka-tls`` service runs the same steps; a test keeps the two in step)."""
    pw = KAFKA_TLS_STORE_PASSWORD
    common = ["-storepass", pw, "-keypass", pw, "-noprompt"]
    steps = [
        ["-genkeypair", "-keystore", "ca.p12", "-storetype", "PKCS12", "-alias", "ca", "-keyalg", "RSA",
         "-keysize", "2048", "-validity", "3650", "-dname", "CN=spark-ext local CA", "-ext", "bc:c"],
        ["-exportcert", "-keystore", "ca.p12", "-alias", "ca", "-rfc", "-file", "ca.pem"],
        ["-genkeypair", "-keystore", "broker.p12", "-storetype", "PKCS12", "-alias", "broker",
         "-keyalg", "RSA", "-keysize", "2048", "-validity", "3650", "-dname", "CN=localhost"],
        ["-certreq", "-keystore", "broker.p12", "-alias", "broker", "-file", "broker.csr"],
        ["-gencert", "-keystore", "ca.p12", "-alias", "ca", "-infile", "broker.csr", "-outfile", "broker.pem",
         "-rfc", "-validity", "3650", "-ext", f"SAN=dns:localhost,ip:{HOST}"],
        ["-importcert", "-keystore", "broker.p12", "-alias", "ca", "-file", "ca.pem"],
        ["-importcert", "-keystore", "broker.p12", "-alias", "broker", "-file", "broker.pem"],
    ]
    return [[*step, *common] for step in steps]


def make_certificates(tls: Path) -> Path:
    """``ca.pem`` (for clients) and ``broker.p12`` (key + chain for the broker). Idempotent."""
    ca_pem, store = tls / "ca.pem", tls / "broker.p12"
    if ca_pem.exists() and store.exists():
        return ca_pem
    tls.mkdir(parents=True, exist_ok=True)
    for f in tls.iterdir():
        f.unlink()
    for step in keytool_steps():
        res = subprocess.run([keytool(), *step], cwd=tls, capture_output=True, text=True)
        if res.returncode != 0:
            raise ServiceError(f"keytool {step[0]} failed:\n{res.stdout}\n{res.stderr}")
    (tls / "ca.p12").unlink()  # the CA key is not needed again; clients get ca.pem
    log(f"made a local CA and broker certificate in {tls}")
    return ca_pem


def listener_settings(tls: Path) -> list[str]:
    """server.properties lines for the two secured listeners (appended to the plain ones)."""
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    plain = (f'org.apache.kafka.common.security.plain.PlainLoginModule required '
             f'user_{KAFKA_SASL_USER}="{KAFKA_SASL_PASSWORD}";')
    return [
        "listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256",
        f"listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config={scram}",
        f"listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config={scram}",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={plain}",
        f"ssl.keystore.location={tls / 'broker.p12'}",
        "ssl.keystore.type=PKCS12",
        f"ssl.keystore.password={KAFKA_TLS_STORE_PASSWORD}",
        f"ssl.key.password={KAFKA_TLS_STORE_PASSWORD}",
    ]


def add_scram_user() -> None:
    """Create (or reset) the SCRAM user through the plain listener (kafka-python's admin
    client; one request per mechanism, as the broker refuses two changes of one user)."""
    from kafka.admin import KafkaAdminClient, UserScramCredentialUpsertion

    admin = KafkaAdminClient(bootstrap_servers=f"{HOST}:{KAFKA_PORT}", request_timeout_ms=10000)
    try:
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            up = UserScramCredentialUpsertion(KAFKA_SASL_USER, mechanism, KAFKA_SASL_PASSWORD)
            errors = {u: e for u, e in admin.alter_user_scram_credentials([up]).items() if e}
            if errors:
                raise ServiceError(f"adding the SCRAM user {KAFKA_SASL_USER} ({mechanism}) failed: {errors}")
    finally:
        admin.close()


def secured_ready(ca_file: str) -> bool:
    """A metadata round trip on each secured listener through kafka-python."""
    from kafka.admin import KafkaAdminClient

    for port, protocol, mechanism in ((KAFKA_SASL_SSL_PORT, "SASL_SSL", SSL_MECHANISM),
                                      (KAFKA_SASL_PLAINTEXT_PORT, "SASL_PLAINTEXT", PLAINTEXT_MECHANISM)):
        admin = KafkaAdminClient(
            bootstrap_servers=f"{HOST}:{port}", security_protocol=protocol, sasl_mechanism=mechanism,
            sasl_plain_username=KAFKA_SASL_USER, sasl_plain_password=KAFKA_SASL_PASSWORD,
            ssl_cafile=ca_file, request_timeout_ms=5000,
        )
        try:
            admin.list_topics()
        finally:
            admin.close()
    return True
