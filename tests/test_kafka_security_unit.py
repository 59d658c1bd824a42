"""Parsing of Kafka security settings (no broker): Java and librdkafka spellings, what
Python cannot use, and secrets kept out of every repr and message."""

from __future__ import annotations

import pickle

import pytest

from spark_ext.connectors.kafka.client.security import KafkaSecurity, normalize
from spark_ext.connectors.kafka.sink.config import KafkaSinkConfig
from spark_ext.connectors.kafka.source.config import KafkaSourceConfig
from spark_ext.errors import InvalidOptionError
from spark_ext.guarantees import Guarantee
from spark_ext.options import Options

JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="s3cret";'


def parse(**client: str) -> KafkaSecurity:
    return KafkaSecurity.from_client(normalize(client))


def test_java_settings_become_one_security_value(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    sec = parse(**{"security.protocol": "sasl_ssl", "sasl.mechanism": "SCRAM-SHA-512",
                   "sasl.jaas.config": JAAS, "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca),
                   "ssl.endpoint.identification.algorithm": ""})
    assert (sec.protocol, sec.mechanism, sec.username, sec.password) == (
        "SASL_SSL", "SCRAM-SHA-512", "u", "s3cret")
    assert sec.ca_file == str(ca) and not sec.check_hostname and sec.tls and sec.sasl
    assert "s3cret" not in repr(sec) and "s3cret" not in sec.describe()
    assert pickle.loads(pickle.dumps(sec)) == sec  # shipped to executors as it is


def test_librdkafka_spellings_are_accepted_too():
    sec = parse(**{"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN", "sasl.username": "u",
                   "sasl.password": "p"})
    assert (sec.protocol, sec.mechanism, sec.username, sec.password, sec.tls) == (
        "SASL_PLAINTEXT", "PLAIN", "u", "p", False)


@pytest.mark.parametrize(("client", "needle"), [
    ({"security.protocol": "SASL_SSL", "ssl.truststore.location": "/x/truststore.jks"},
     "convert it to PEM"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI", "sasl.jaas.config": JAAS},
     "kafka.sasl.mechanism' is 'GSSAPI'"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}, "needs a user name and password"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.jaas.config": "x required;"},
     "no username"),
    ({"security.protocol": "SSL", "ssl.ca.location": "/no/such/ca.pem"}, "is not a file"),
    ({"security.protocol": "TLS"}, "expected one of PLAINTEXT, SSL"),
])
def test_what_python_cannot_use_is_refused_naming_the_fix(client, needle):
    with pytest.raises(InvalidOptionError, match=needle) as info:
        parse(**client)
    assert "s3cret" not in str(info.value)


def test_the_sink_takes_security_settings_and_keeps_refusing_unknown_ones():
    opts = {"kafka.bootstrap.servers": "h:1", "topic": "t", "transactionalidprefix": "p",
            "kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "SCRAM-SHA-256",
            "kafka.sasl.jaas.config": JAAS}
    cfg = KafkaSinkConfig.parse(Options(opts, "hzsink"), Guarantee.EXACTLY_ONCE)
    assert cfg.security.mechanism == "SCRAM-SHA-256" and "s3cret" not in repr(cfg)
    with pytest.raises(InvalidOptionError, match=r"kafka\.sasl\.typo"):
        KafkaSinkConfig.parse(Options({**opts, "kafka.sasl.typo": "1"}, "hzsink"), Guarantee.EXACTLY_ONCE)


def test_the_source_uses_the_wire_fetcher_where_it_speaks_the_security_and_librdkafka_elsewhere():
    base = {"kafka.bootstrap.servers": "h:1", "subscribe": "t"}
    scram = {**base, "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-256",
             "kafka.sasl.jaas.config": JAAS}
    assert KafkaSourceConfig.parse(Options(scram, "hzsource")).fetcher == "wire"
    oauth = {**base, "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "OAUTHBEARER"}
    assert KafkaSourceConfig.parse(Options(oauth, "hzsource")).fetcher == "librdkafka"
    with pytest.raises(InvalidOptionError, match="OAUTHBEARER"):
        KafkaSourceConfig.parse(Options({**oauth, "fetcher": "wire"}, "hzsource"))
