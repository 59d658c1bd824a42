"""The local broker's listeners as the tests see them: addresses and each client's credentials."""

from __future__ import annotations

from dataclasses import dataclass

from spark_ext.connectors.kafka.client.security import KafkaSecurity, normalize

# What make services writes to .local/services.env, and the tests read.
SERVICE_KEYS = ("KAFKA_BOOTSTRAP_SERVERS", "POSTGRES_URL", "STOMP_HOST", "STOMP_PORT",
                "STOMP_USER", "STOMP_PASSWORD", "POSTGRES_TLS_URL",
                "POSTGRES_TLS_ADMIN_URL", "PKI_DIR", "STOMP_TLS_URL", "STOMP_MTLS_URL", "MARIADB_URL",
                "SCHEMA_REGISTRY_URL")
SECURED_KEYS = ("KAFKA_SASL_SSL_BOOTSTRAP_SERVERS", "KAFKA_SASL_PLAINTEXT_BOOTSTRAP_SERVERS",
                "KAFKA_SASL_USER", "KAFKA_SASL_PASSWORD", "KAFKA_SASL_MECHANISM_SSL",
                "KAFKA_SASL_MECHANISM_PLAINTEXT",
                "KAFKA_SSL_CA_LOCATION")


@dataclass(frozen=True)
class Listener:
    """One listener of the local broker, and how each client authenticates on it."""

    name: str
    bootstrap: str
    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    user: str | None = None
    password: str | None = None
    ca_file: str | None = None

    def spark_options(self) -> dict[str, str]:
        """``kafka.*`` options as a Spark user copies them from a Java job (JAAS, PEM trust store)."""
        if self.protocol == "PLAINTEXT":
            return {}
        module = "plain.PlainLoginModule" if self.mechanism == "PLAIN" else "scram.ScramLoginModule"
        out = {"kafka.security.protocol": self.protocol, "kafka.sasl.mechanism": str(self.mechanism),
               "kafka.sasl.jaas.config": f"org.apache.kafka.common.security.{module} required "
                                         f'username="{self.user}" password="{self.password}";'}
        if self.ca_file:
            out.update({"kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": self.ca_file})
        return out

    def security(self) -> KafkaSecurity:
        """The same settings as the connectors parse them (for direct protocol clients)."""
        client = {k[len("kafka."):]: v for k, v in self.spark_options().items()}
        return KafkaSecurity.from_client(normalize(client))

    def kafka_python(self) -> dict[str, object]:
        """The same credentials for kafka-python clients (the tests' independent reader)."""
        if self.protocol == "PLAINTEXT":
            return {"bootstrap_servers": self.bootstrap}
        return {"bootstrap_servers": self.bootstrap, "security_protocol": self.protocol,
                "sasl_mechanism": self.mechanism, "sasl_plain_username": self.user,
                "sasl_plain_password": self.password, "ssl_cafile": self.ca_file}
