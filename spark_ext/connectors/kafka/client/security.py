"""How a Kafka connection authenticates: TLS from Python's ``ssl``, SASL from kafka-python.

Users configure security as they do for Spark's Kafka connector (Java client names:
``kafka.security.protocol``, ``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``,
``kafka.ssl.truststore.*``) or with librdkafka's names (``sasl.username``,
``ssl.ca.location``). ``normalize`` turns both into librdkafka's spelling, which the source's
librdkafka paths take as they are; ``KafkaSecurity.from_client`` reads that spelling into a
frozen, picklable value the raw-protocol paths (the sink, the ``wire`` fetcher) use to open
every connection. The password travels inside it to the executors (they authenticate too)
but never appears in its ``repr`` or in an error.
"""

from __future__ import annotations

import functools
import re
import ssl
from dataclasses import dataclass, field
from pathlib import Path

from spark_ext.errors import InvalidOptionError
from spark_ext.secrets import Secret

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: Mechanisms whose handshake kafka-python implements and the raw-protocol paths speak.
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

_JAAS = re.compile(r'(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')

# Java spellings -> librdkafka spellings (the same meaning).
_RENAMED = {"sasl.mechanisms": "sasl.mechanism"}

#: librdkafka names of the settings ``KafkaSecurity`` covers.
SECURITY_KEYS = frozenset({
    "security.protocol", "sasl.mechanism", "sasl.username", "sasl.password", "ssl.ca.location",
    "ssl.endpoint.identification.algorithm", "ssl.certificate.location", "ssl.key.location",
    "ssl.key.password",
})


def normalize(client: dict[str, str]) -> dict[str, str]:
    """Java security settings -> librdkafka's; other settings unchanged. Driver, at query start.

    Raises ``InvalidOptionError`` naming the setting and the fix for what Python cannot
    use (a JKS or PKCS12 trust store, a JAAS config without username and password).
    """
    out: dict[str, str] = {}
    stores = ("ssl.truststore.", "ssl.keystore.")
    java_store = {k: v for k, v in client.items() if k.startswith(stores)}
    if "ssl.key.password" in client and "ssl.keystore.location" in client:
        java_store["ssl.key.password"] = client["ssl.key.password"]
    for name, value in client.items():
        if name.startswith(stores):
            continue
        if name == "sasl.jaas.config":
            creds = dict(_JAAS.findall(value))
            if "username" not in creds or "password" not in creds:
                raise InvalidOptionError(
                    "option 'kafka.sasl.jaas.config' has no username=\"...\" password=\"...\" pair; "
                    "set 'kafka.sasl.username' and 'kafka.sasl.password' instead"
                )
            out["sasl.username"], out["sasl.password"] = creds["username"], creds["password"]
        elif name == "ssl.endpoint.identification.algorithm":
            # Java turns host name checking off with an empty value, librdkafka with "none".
            out[name] = "none" if value.strip().lower() in ("", "none") else value.strip().lower()
        else:
            out[_RENAMED.get(name, name)] = value
    out.update(_java_stores(java_store))
    return out


def _java_stores(store: dict[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for kind, target in (("truststore", "ssl.ca.location"), ("keystore", "ssl.certificate.location")):
        location = store.get(f"ssl.{kind}.location")
        if location is None:
            continue
        default = "PEM" if location.lower().endswith((".pem", ".crt", ".cer")) else "JKS"
        typ = store.get(f"ssl.{kind}.type", default).upper()
        if typ != "PEM":
            raise InvalidOptionError(
                f"option 'kafka.ssl.{kind}.location' is a {typ} store, which the Python Kafka clients "
                f"cannot read; convert it to PEM (for example `keytool -exportcert -rfc -keystore "
                f"{location} -alias <ca> -file ca.pem`) and set kafka.ssl.{kind}.type=PEM and "
                f"kafka.ssl.{kind}.location to the PEM file"
            )
        out[target] = location
        if kind == "keystore":
            out["ssl.key.location"] = location  # a PEM key store holds the key and the chain
            if "ssl.key.password" in store:
                out["ssl.key.password"] = store["ssl.key.password"]
    return out


@dataclass(frozen=True)
class KafkaSecurity:
    """One cluster's security settings. Picklable; the secrets stay out of ``repr``."""

    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    check_hostname: bool = True
    cert_file: str | None = None
    key_file: str | None = None
    key_password: str | None = field(default=None, repr=False)
    password_ref: Secret | None = None  # passwordFile / passwordEnv: read at each login

    def sasl_password(self) -> str | None:
        """The SASL password, read now when it is given by reference."""
        return self.password if self.password_ref is None else self.password_ref.reveal()

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def describe(self) -> str:
        """For messages: the protocol, mechanism and user, never the password."""
        if not self.sasl:
            return self.protocol
        return f"{self.protocol} {self.mechanism} as user {self.username!r}"

    @staticmethod
    def from_client(client: dict[str, str], ref: Secret | None = None) -> KafkaSecurity:
        """Read librdkafka-spelled settings (see ``normalize``). Driver, at query start.

        Raises ``InvalidOptionError`` for a protocol or mechanism the raw-protocol paths do
        not speak, missing credentials, or a certificate file that does not exist.
        """
        protocol = client.get("security.protocol", "PLAINTEXT").upper()
        if protocol not in PROTOCOLS:
            raise InvalidOptionError(f"option 'kafka.security.protocol' is {protocol!r}; expected one of "
                                     f"{', '.join(PROTOCOLS)}")
        sec = KafkaSecurity(protocol=protocol)
        if sec.sasl:
            mechanism = client.get("sasl.mechanism", "GSSAPI").upper()  # Kafka's default mechanism
            if mechanism not in MECHANISMS:
                raise InvalidOptionError(
                    f"option 'kafka.sasl.mechanism' is {mechanism!r}; this connector speaks "
                    f"{', '.join(MECHANISMS)} (set kafka.sasl.mechanism to the one your cluster offers)"
                )
            user, password = client.get("sasl.username"), client.get("sasl.password")
            refuse_second_password(client, ref)
            if not user or (password is None and ref is None):
                raise InvalidOptionError(
                    f"{protocol} with {mechanism} needs a user name and password: set "
                    "'kafka.sasl.jaas.config' (… username=\"…\" password=\"…\";) or 'kafka.sasl.username' "
                    "and 'kafka.sasl.password' (or, better, 'passwordFile')"
                )
            sec = KafkaSecurity(protocol=protocol, mechanism=mechanism, username=user, password=password,
                                password_ref=ref)
        if sec.tls:
            names = ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location")
            files = {k: client.get(k) for k in names}
            for name, path in files.items():
                if path and not Path(path).is_file():
                    raise InvalidOptionError(f"option 'kafka.{name}' names {path!r}, which is not a file")
            algorithm = client.get("ssl.endpoint.identification.algorithm", "https")
            sec = KafkaSecurity(
                protocol=sec.protocol, mechanism=sec.mechanism, username=sec.username, password=sec.password,
                password_ref=sec.password_ref,
                ca_file=files["ssl.ca.location"], check_hostname=algorithm != "none",
                cert_file=files["ssl.certificate.location"],
                key_file=files["ssl.key.location"] or files["ssl.certificate.location"],
                key_password=client.get("ssl.key.password"),
            )
        return sec

    def sasl_config(self) -> dict[str, str | None]:
        """The settings kafka-python's SASL mechanism classes take."""
        return {"security_protocol": self.protocol, "sasl_mechanism": self.mechanism,
                "sasl_plain_username": self.username, "sasl_plain_password": self.sasl_password()}


PLAINTEXT = KafkaSecurity()


def refuse_second_password(client: dict[str, str], ref: Secret | None) -> None:
    """A SASL password inline and by reference as well: one source of truth."""
    if ref is not None and "sasl.password" in client:
        raise InvalidOptionError("the SASL password is given twice (in kafka.sasl.jaas.config or "
                                 "kafka.sasl.password, and by passwordFile / passwordEnv); keep one")


@functools.lru_cache(maxsize=8)
def ssl_context(sec: KafkaSecurity) -> ssl.SSLContext:
    """One TLS context per settings and process (loading a CA file costs milliseconds)."""
    ctx = ssl.create_default_context(cafile=sec.ca_file)
    ctx.check_hostname = sec.check_hostname
    if sec.cert_file:
        ctx.load_cert_chain(sec.cert_file, sec.key_file, password=sec.key_password)
    return ctx
