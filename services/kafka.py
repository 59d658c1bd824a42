"""The local Kafka broker (KRaft, one node) and the jars it and the Spark baseline need."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

from services.common import (
    CACHE,
    HOST,
    KAFKA_CONTROLLER_PORT,
    KAFKA_PORT,
    KAFKA_SASL_PLAINTEXT_PORT,
    KAFKA_SASL_SSL_PORT,
    KAFKA_VERSION,
    LOCAL,
    ROOT,
    ServiceError,
    _java,
    _mvn,
    _spawn,
    _wait,
    log,
)
from services.kafka_tls import add_scram_user, listener_settings, make_certificates, secured_ready

#: Where the local CA's certificate is written for clients (KAFKA_SSL_CA_LOCATION).
TLS_DIR = LOCAL / "kafka" / "tls"


def kafka_libs() -> Path:
    libs = CACHE / f"kafka-{KAFKA_VERSION}" / "libs"
    if not (libs / f"kafka_2.13-{KAFKA_VERSION}.jar").exists():
        log(f"resolving Kafka {KAFKA_VERSION} jars from Maven Central into {libs}")
        _mvn("-f", str(ROOT / "services" / "kafka-pom.xml"), f"-Dkafka.version={KAFKA_VERSION}",
             "dependency:copy-dependencies", f"-DoutputDirectory={libs}", "-DincludeScope=runtime")
    return libs


# Spark's Kafka connector per PySpark line where the default (4.2.0) does not run: (connector,
# token provider), both from Maven Central.
_BASELINE_FOR = {"4.0": ("4.0.1", "4.0.0")}


def baseline_jars() -> list[str]:
    """Jars of Spark's own Kafka connector and spark-avro (built for the installed PySpark's
    line) and the PostgreSQL and MariaDB JDBC drivers, for ``spark.jars``."""
    import pyspark

    line = ".".join(pyspark.__version__.split(".")[:2])
    pinned = _BASELINE_FOR.get(line)
    libs = CACHE / ("spark-baseline-1" if pinned is None else f"spark-baseline-1-spark{line}")
    wanted = ("spark-sql-kafka", "spark-avro", "postgresql", "mariadb-java-client")
    if not all(list(libs.glob(f"{jar}-*.jar")) for jar in wanted):
        log(f"resolving Spark's Kafka connector, spark-avro and the PostgreSQL and MariaDB JDBC drivers "
            f"into {libs}")
        versions = [] if pinned is None else [f"-Dspark.kafka.version={pinned[0]}",
                                              f"-Dspark.token.version={pinned[1]}"]
        _mvn("-f", str(ROOT / "services" / "spark-baseline-pom.xml"), "dependency:copy-dependencies",
             f"-DoutputDirectory={libs}", "-DincludeScope=runtime", *versions)
    return sorted(str(p) for p in libs.glob("*.jar"))


def _kafka_ready() -> bool:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import TopicAlreadyExistsError

    boot = f"{HOST}:{KAFKA_PORT}"
    topic = "_spark_ext_ready"
    admin = KafkaAdminClient(bootstrap_servers=boot, request_timeout_ms=5000)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
    except TopicAlreadyExistsError:
        pass
    finally:
        admin.close()
    token = uuid.uuid4().hex.encode()
    producer = KafkaProducer(bootstrap_servers=boot, acks="all", request_timeout_ms=5000)
    try:
        md = producer.send(topic, token).get(timeout=10)
    finally:
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=boot, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, md.offset)
        for batch in (consumer.poll(timeout_ms=2000) for _ in range(5)):
            for rec in batch.get(tp, []):
                if rec.value == token:
                    return True
    finally:
        consumer.close()
    return False


#: Broker settings the sink and the tests rely on (one broker: transactions need these).
EXPECTED = {
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "auto.create.topics.enable": "false",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}


def _kafka_settings() -> list[str]:
    """What differs from ``EXPECTED`` on the broker at the Kafka port."""
    from spark_ext.connectors.kafka.client.transactions import (
        KafkaTxnClient,  # DescribeConfigs, as the sink asks
    )

    client = KafkaTxnClient(f"{HOST}:{KAFKA_PORT}", 10.0)
    try:
        got = {k: client.broker_config(k) for k in EXPECTED}
    finally:
        client.close()
    wrong = [f"{k}={got[k]} (want {v})" for k, v in EXPECTED.items() if got[k] != v]
    try:
        secured_ready(str(TLS_DIR / "ca.pem"))
    except Exception as e:  # noqa: BLE001 - any failure: the secured listeners are not as expected
        wrong.append(f"SASL_SSL {KAFKA_SASL_SSL_PORT} / SASL_PLAINTEXT {KAFKA_SASL_PLAINTEXT_PORT} listeners "
                     f"({type(e).__name__}: {e})")
    return wrong


def kafka_up() -> None:
    libs = kafka_libs()
    home = LOCAL / "kafka"
    data = home / "data"
    home.mkdir(parents=True, exist_ok=True)
    props = home / "server.properties"
    ca_pem = make_certificates(TLS_DIR)
    secured = f"SASL_SSL://{HOST}:{KAFKA_SASL_SSL_PORT},SASL_PLAINTEXT://{HOST}:{KAFKA_SASL_PLAINTEXT_PORT}"
    props.write_text("\n".join([
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.voters=1@{HOST}:{KAFKA_CONTROLLER_PORT}",
        f"listeners=PLAINTEXT://{HOST}:{KAFKA_PORT},CONTROLLER://{HOST}:{KAFKA_CONTROLLER_PORT},{secured}",
        f"advertised.listeners=PLAINTEXT://{HOST}:{KAFKA_PORT},{secured}",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=PLAINTEXT",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,"
        "SASL_PLAINTEXT:SASL_PLAINTEXT",
        *listener_settings(TLS_DIR),
        f"log.dirs={data}",
        "num.partitions=1",
        # One broker: every internal topic must live with replication 1, and
        # transactions need the transaction log's min ISR at 1 too.
        "offsets.topic.replication.factor=1",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "share.coordinator.state.topic.replication.factor=1",
        "share.coordinator.state.topic.min.isr=1",
        "group.initial.rebalance.delay.ms=0",
        # Topics are created on purpose; a typo must not silently make a new topic.
        "auto.create.topics.enable=false",
        "transaction.max.timeout.ms=900000",
        # Abort timed-out transactions within a second (default 10 s), so the sink's
        # transaction-timeout guard is tested without long waits.
        "transaction.abort.timed.out.transaction.cleanup.interval.ms=1000",
        "",
    ]))
    log4j = home / "log4j2.properties"
    log4j.write_text("\n".join([
        "status = warn",
        "appender.out.type = Console",
        "appender.out.name = OUT",
        "appender.out.layout.type = PatternLayout",
        "appender.out.layout.pattern = [%d] %p %m (%c)%n",
        "rootLogger.level = WARN",
        "rootLogger.appenderRef.out.ref = OUT",
        "logger.server.name = kafka.server.KafkaRaftServer",
        "logger.server.level = INFO",
        "",
    ]))
    java = _java()
    cp = f"{libs}/*"
    jvm = ["-Xms256m", "-Xmx1g", f"-Dlog4j2.configurationFile={log4j}"]
    if not (data / "meta.properties").exists():
        cluster_id = "c3BhcmstZXh0LWxvY2Fs"  # fixed: data dir and config always agree
        res = subprocess.run([java, *jvm, "-cp", cp, "kafka.tools.StorageTool", "format",
                              "-t", cluster_id, "-c", str(props)], capture_output=True, text=True)
        if res.returncode != 0:
            raise ServiceError(f"kafka storage format failed:\n{res.stdout}\n{res.stderr}")
    pid = _spawn("kafka", [java, *jvm, "-cp", cp, "kafka.Kafka", str(props)])
    log(f"starting kafka (pid {pid})")
    _wait("kafka", _kafka_ready, pid, LOCAL / "logs" / "kafka.log")
    add_scram_user()
    _wait("kafka secured listeners", lambda: secured_ready(str(ca_pem)), pid, LOCAL / "logs" / "kafka.log")
    log(f"kafka ready at {HOST}:{KAFKA_PORT} (SASL_SSL {KAFKA_SASL_SSL_PORT}, "
        f"SASL_PLAINTEXT {KAFKA_SASL_PLAINTEXT_PORT})")


# --------------------------------------------------------------------------- PostgreSQL


