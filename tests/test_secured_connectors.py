"""PostgreSQL over TLS and passwords given by reference, against the real servers.

The second local PostgreSQL takes TLS only (``services/postgres_tls.py``); the sink
conformance suite already writes to it with ``verify-full`` and a client certificate
(``tests/support/sinks.py``). Here: each wrong TLS setting fails at start naming the
server and the fix; passwords come from a file or an environment variable; and no secret,
inline or by reference, reaches Spark's event log, the UI, a checkpoint, a log line or an
error message.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from pyspark.sql.types import LongType, StructField, StructType
from sqlalchemy.engine import make_url

from spark_ext.connectors.jdbc.config import JdbcSinkConfig
from spark_ext.connectors.jdbc.tables import prepare_tables
from spark_ext.connectors.jms.session import BrokerSession
from spark_ext.errors import ConnectorError, InvalidOptionError
from spark_ext.guarantees import Guarantee
from spark_ext.options import Options
from tests.support import pg_util, stomp_util
from tests.support.kafka_sink import consume
from tests.support.kafka_util import create_topic, numbered, produce
from tests.support.processes import driver_report

pytestmark = [pytest.mark.services]

SCHEMA = StructType([StructField("id", LongType())])


def _config(url: str, **opts: str) -> JdbcSinkConfig:
    return JdbcSinkConfig.parse(Options({"url": url, "dbtable": "tls_t", "sinkId": "tls-check", **opts},
                                        "hzsink"), Guarantee.EXACTLY_ONCE)


def _with(url: str, **query: str | None) -> str:
    u = make_url(url)
    q = {**u.query, **query}
    return u.set(query={k: v for k, v in q.items() if v is not None}).render_as_string(hide_password=False)


# (case, how the URL is spoiled, libpq's words, the fix ours adds)
WRONG_TLS = [
    ("clear text", lambda s, u: _with(s.postgres_tls_admin_url, sslmode="disable", sslrootcert=None),
     "no encryption", "refuses clear text"),
    ("a CA that did not sign the server", lambda s, u: _with(u, sslrootcert=str(s.pki / "other-ca.pem")),
     "certificate verify failed", "not signed by the CA"),
    ("a host name the certificate lacks", lambda s, u: _with(u.replace("@127.0.0.1:", "@db.invalid:"),
                                                             hostaddr="127.0.0.1"),
     "does not match host name", "does not name the URL's host"),
    ("an expired client certificate", lambda s, u: _with(u, sslcert=str(s.pki / "expired.pem"),
                                                         sslkey=str(s.pki / "expired.key")),
     "certificate expired", "renew it"),
    ("no client certificate", lambda s, u: _with(u, sslcert=None, sslkey=None),
     "requires a valid client certificate", "add sslcert and sslkey"),
]


@pytest.mark.parametrize("case", WRONG_TLS, ids=[c[0] for c in WRONG_TLS])
def test_a_wrong_tls_setting_fails_at_start_naming_the_server_and_the_fix(services, case):
    _, spoil, words, fix = case
    url = spoil(services, services.postgres_tls_url)
    with pytest.raises(ConnectorError) as e:
        prepare_tables(_config(url), SCHEMA, need_2pc=True)  # what the sink runs at query start
    msg = str(e.value)
    assert "cannot use PostgreSQL at " in msg and ":5433/" in msg, msg
    assert words in msg and fix in msg, msg
    assert make_url(url).password is None or ":***@" in msg, msg  # the URL shown without its password


@pytest.mark.parametrize("case", WRONG_TLS[1:3], ids=[c[0] for c in WRONG_TLS[1:3]])
def test_status_and_doctor_say_what_the_sink_says_of_a_wrong_tls_setting(services, case, capsys):
    """``spark-ext status jdbc`` and ``doctor jdbc list`` name the fix, as the sink does at
    start, not libpq's text alone."""
    from spark_ext import cli

    _, spoil, words, fix = case
    url = spoil(services, services.postgres_tls_url)
    for argv in (["status", "jdbc", "--url", url], ["doctor", "jdbc", "list", "--url", url]):
        assert cli.main(argv) == 1
        err = capsys.readouterr().err
        assert "cannot use PostgreSQL at " in err and words in err and fix in err, (argv[:2], err)


def test_a_password_user_connects_over_verified_tls_with_its_password_from_a_file(services, tmp_path):
    role, pw = f"tls_pw_{uuid.uuid4().hex[:8]}", f"Pg-{uuid.uuid4().hex}"
    pg_util.execute(services.postgres_tls_admin_url, f"CREATE ROLE {role} LOGIN SUPERUSER PASSWORD '{pw}'")
    try:
        secret_file = tmp_path / "pg-password"
        secret_file.write_text(f"{pw}\n")
        admin = make_url(services.postgres_tls_admin_url)
        url = admin._replace(username=role, password=None).render_as_string(hide_password=False)
        cfg = _config(url, passwordFile=str(secret_file), createTable="true")
        assert pw not in repr(cfg) and pw.encode() not in pickle.dumps(cfg)  # the file's name travels
        prepare_tables(cfg, SCHEMA, need_2pc=True)  # connects: verify-full, the password from the file
        assert pg_util.query(services.postgres_tls_admin_url, "SELECT count(*) FROM tls_t") == [(0,)]
        secret_file.write_text("not-the-password\n")  # read again at each connect: a rotated file counts
        with pytest.raises(ConnectorError, match="password authentication failed"):
            prepare_tables(cfg, SCHEMA, need_2pc=True)
    finally:
        pg_util.execute(services.postgres_tls_admin_url, f"DROP TABLE IF EXISTS tls_t; DROP ROLE {role}")


@pytest.mark.parametrize(("opts", "said"), [
    ({"passwordFile": "/nonexistent/pg-password"}, "option 'passwordFile' names '/nonexistent/pg-password'"),
    ({"passwordEnv": "SPARK_EXT_TEST_UNSET_PASSWORD"},
     "option 'passwordEnv' names environment variable 'SPARK_EXT_TEST_UNSET_PASSWORD', which is not set"),
    ({"password": "x", "passwordFile": "/tmp/x"},
     "options 'password', 'passwordFile' each give the password"),
])
def test_a_password_reference_that_leads_nowhere_fails_at_start_naming_the_option(services, opts, said):
    os.environ.pop("SPARK_EXT_TEST_UNSET_PASSWORD", None)
    with pytest.raises(InvalidOptionError) as e:
        _config(services.postgres_url, **opts)
    assert said in str(e.value), str(e.value)


@pytest.mark.spark
def test_no_secret_reaches_the_event_log_the_ui_a_checkpoint_a_log_or_an_error(services, sasl_ssl,
                                                                            tmp_path):
    """Queries from the SASL_SSL Kafka listener (its password by passwordFile, and for one
    inline, as Spark's own Kafka users write it): into PostgreSQL with passwordFile,
    with password as an option, into the queue with passwordEnv and from there back into
    Kafka (both by reference), and into PostgreSQL with a wrong passwordFile. Each secret is unique
    to this run; none may appear in the event log, the UI's SQL, jobs and environment pages,
    the checkpoints, the driver's INFO log and output, or the failing query's error."""
    tag = uuid.uuid4().hex[:8]
    roles = {name: (f"leak_{name}_{tag}", f"Pg-{name}-{uuid.uuid4().hex}") for name in ("file", "inline")}
    for role, pw in roles.values():
        pg_util.execute(services.postgres_url, f"CREATE ROLE {role} LOGIN SUPERUSER PASSWORD '{pw}'")
    stomp_user, stomp_pw = f"leak_{tag}", f"Stomp-{uuid.uuid4().hex}"
    with BrokerSession(services.stomp_host, services.stomp_port, services.stomp_user, services.stomp_password,
                       10) as s:
        s.call("broker", "addUser", stomp_user, stomp_pw, "amq", True)
    wrong_pw = f"Wrong-{uuid.uuid4().hex}"
    try:
        topic = create_topic(services.kafka_bootstrap, 2, "leak")
        out_topic = create_topic(services.kafka_bootstrap, 2, "leak-back")
        produce(services.kafka_bootstrap, topic, numbered(2, 200))
        tables = {n: pg_util.table_name(f"leak_{n}") for n in roles}
        for t in tables.values():
            pg_util.execute(services.postgres_url, f"CREATE TABLE {t} (p int, o bigint, v text)")
        (tmp_path / "pw").write_text(roles["file"][1] + "\n")
        (tmp_path / "kafka-pw").write_text(f"{sasl_ssl.password}\n")
        # The SASL login by reference: the JAAS config gives way to a user name and passwordFile.
        by_file = {"kafka.sasl.jaas.config": None, "kafka.sasl.username": str(sasl_ssl.user),
                   "passwordFile": str(tmp_path / "kafka-pw")}
        (tmp_path / "wrong").write_text(wrong_pw + "\n")
        base = make_url(services.postgres_url)._replace(password=None)
        queue = stomp_util.queue_name("leak")
        spec = {
            "bootstrap": sasl_ssl.bootstrap, "kafka_options": sasl_ssl.spark_options(), "topic": topic,
            "kafka_by_file": by_file, "out_topic": out_topic,
            "by_file": {"url": base.set(username=roles["file"][0]).render_as_string(hide_password=False),
                        "password_file": str(tmp_path / "pw"), "table": tables["file"]},
            "inline": {"url": base.set(username=roles["inline"][0]).render_as_string(hide_password=False),
                       "password": roles["inline"][1], "table": tables["inline"]},
            "stomp": {"host": services.stomp_host, "port": services.stomp_port, "user": stomp_user,
                      "password_env": "LEAK_STOMP_PASSWORD", "queue": queue},
            "wrong_file": str(tmp_path / "wrong"),
            "marker": f"leak-marker-{uuid.uuid4().hex}",  # not a secret: shows the search can find
        }
        (tmp_path / "spec.json").write_text(json.dumps(spec))
        out = tmp_path / "out"
        env = {**os.environ, "LEAK_STOMP_PASSWORD": stomp_pw}
        res = subprocess.run([sys.executable, "-m", "tests.drivers.secrets_leak", str(tmp_path / "spec.json"),
                              str(out)], env=env, capture_output=True, text=True, timeout=400,
                             cwd=Path(__file__).resolve().parent.parent)
        assert res.returncode == 0, driver_report(res)
        for t in tables.values():  # the secrets worked: every record landed
            assert pg_util.query(services.postgres_url, f"SELECT count(*) FROM {t}") == [(200,)]
        # through the queue and back into Kafka: the sink's and the source's logins by reference
        assert sorted(v for _, _, v in consume(services.kafka_bootstrap, out_topic)) == sorted(
            f"v-{i}".encode() for i in range(200))
        error = (out / "errors.txt").read_text()
        assert "password authentication failed" in error and "passwordFile" in error, error[-2000:]

        secrets = [pw for _, pw in roles.values()] + [stomp_pw, wrong_pw, str(sasl_ssl.password)]
        places = {"stdout": res.stdout, "stderr": res.stderr, "error": error,
                  "ui": (out / "ui.json").read_text()}
        for f in out.rglob("*"):  # the event log and the checkpoints
            if f.is_file():
                places[str(f.relative_to(tmp_path))] = _readable(f)
        assert any(k.startswith("out/events/") for k in places) and any("/ck-by-file/" in k for k in places)
        # The event log is searched as text: a value the job set (not a secret) is found there.
        events = "".join(text for where, text in places.items() if where.startswith("out/events/"))
        assert spec["marker"] in events, "the event log was not read as text (compressed?)"
        assert len(res.stderr) > 10_000  # an INFO log worth searching
        leaks = [(where, s[:8]) for where, text in places.items() for s in secrets if s in text]
        assert leaks == [], leaks
    finally:
        with BrokerSession(services.stomp_host, services.stomp_port, services.stomp_user,
                           services.stomp_password, 10) as s:
            s.call("broker", "removeUser", stomp_user)
        for role, _ in roles.values():
            pg_util.execute(services.postgres_url, f"DROP OWNED BY {role}; DROP ROLE IF EXISTS {role}")


def _readable(f: Path) -> str:
    """A file's text as a reader of it would see it: Spark 4 compresses its event log with
    zstd (``spark.eventLog.compress``), so a raw byte search would find nothing there."""
    data = f.read_bytes()
    if ".zstd" in f.name:
        import zstandard

        with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True) as r:
            data = b"".join(iter(lambda: r.read(1 << 20), b""))
    return data.decode("utf-8", "replace")


def _queue_sink(services, **opts: str | None):
    """The queue sink's config over the TLS acceptor; an option given as None is dropped."""
    from spark_ext.connectors.jms.sink.config import JmsSinkConfig

    base = {"destination": "/queue/tls-check", "sinkId": "tls-check", "reconnectTimeoutMs": "0",
            "connectTimeoutMs": "2000", **services.stomp_tls()}
    merged = {k: v for k, v in {**base, **opts}.items() if v is not None}
    return JmsSinkConfig.parse(Options(merged, "hzsink"), Guarantee.EXACTLY_ONCE)


# (case, options over the TLS acceptor's, what ours must say, fails at once?) A wrong port
# looks like a broker away (a frozen one too takes the connection and never answers), so
# those two are waited out as one would be; the error then names the likely cause.
WRONG_STOMP_TLS = [
    ("a CA that did not sign the broker", lambda s: {"tlsCaFile": str(s.pki / "other-ca.pem")},
     "point tlsCaFile at the CA that signed it", True),
    ("no client certificate for a broker that wants one", lambda s: {"brokerUrl": s.stomp_mtls_url},
     "set tlsCertFile and tlsKeyFile", True),
    ("an expired client certificate", lambda s: {"brokerUrl": s.stomp_mtls_url,
                                                 "tlsCertFile": str(s.pki / "expired.pem"),
                                                 "tlsKeyFile": str(s.pki / "expired.key")},
     "does not accept tlsCertFile", True),
    ("clear text against the TLS acceptor", lambda s: {"brokerUrl": s.stomp_tls_url.replace("+ssl", ""),
                                                        "tlsCaFile": None},
     "use brokerUrl=stomp+ssl://", False),
    ("TLS against the clear-text acceptor", lambda s: {"brokerUrl": f"stomp+ssl://{s.stomp_host}:{s.stomp_port}"},
     "TLS acceptor port", False),
]


@pytest.mark.parametrize("case", WRONG_STOMP_TLS, ids=[c[0] for c in WRONG_STOMP_TLS])
def test_a_wrong_queue_tls_setting_fails_naming_the_broker_and_the_fix(services, case):
    from spark_ext.connectors.jms.sink.writer import open_session

    _, spoil, fix, at_once = case
    # A handshake the settings doom must not be waited out for the minute a broker away would be.
    cfg = _queue_sink(services, **spoil(services), reconnectTimeoutMs="60000" if at_once else "0")
    t0 = time.monotonic()
    with pytest.raises(ConnectorError) as e:
        open_session(cfg).close()
    msg = str(e.value)
    assert f"{services.stomp_host}:" in msg and fix in msg, msg
    assert time.monotonic() - t0 < 15, "waited as for a broker away"


def test_the_queue_connectors_log_in_over_mutual_tls_and_read_what_they_wrote(services):
    """A client certificate the broker's CA signed: the sink's session sends, the source's
    client receives, both over the acceptor that demands the certificate."""
    from spark_ext.connectors.jms.client import StompReceiver
    from spark_ext.connectors.jms.config import JmsSourceConfig
    from spark_ext.connectors.jms.sink.writer import open_session

    queue = stomp_util.queue_name("mtls")
    cfg = _queue_sink(services, **services.stomp_tls(mutual=True), destination=queue)
    assert cfg.tls is not None and cfg.tls.cert_file is not None
    with open_session(cfg) as s:
        assert s.attribute("broker", "Version")
    src = JmsSourceConfig.parse(Options({**services.stomp_tls(mutual=True), "destination": queue},
                                        "hzsource"))
    assert src.tls == cfg.tls
    stomp_util.send(services, queue, ["over-mtls"])
    receiver = StompReceiver(src)
    try:
        receiver.connect()  # the source's subscription, the certificate presented
        assert receiver.await_arrival(30)
        got = receiver.take(10, set())
        assert len(got) == 1 and got[0].frame.endswith(b"\n\nover-mtls"), got
        assert receiver.ack([m.message_id for m in got]) == []
    finally:
        receiver.close()


def test_kafka_takes_its_sasl_password_from_a_file_in_the_sink_and_both_source_fetchers(services, sasl_ssl,
                                                                                      tmp_path):
    """The sink's own protocol client and the source's librdkafka metadata both log in over
    SASL_SSL with the password read from passwordFile; a wrong one is refused; a password
    given inline as well is refused whichever fetcher would read it."""
    from spark_ext.connectors.kafka.client.connection import metadata
    from spark_ext.connectors.kafka.sink.config import KafkaSinkConfig
    from spark_ext.connectors.kafka.source.admin import KafkaMetadata
    from spark_ext.connectors.kafka.source.config import KafkaSourceConfig
    from spark_ext.errors import AuthenticationError

    pw_file = tmp_path / "kafka-pw"
    pw_file.write_text(f"{sasl_ssl.password}\n")
    login = {k: v for k, v in sasl_ssl.spark_options().items() if k != "kafka.sasl.jaas.config"}
    login.update({"kafka.bootstrap.servers": sasl_ssl.bootstrap, "kafka.sasl.username": str(sasl_ssl.user),
                  "passwordFile": str(pw_file)})
    sink_opts = {**login, "topic": "t", "transactionalIdPrefix": "pw-file"}
    sink = KafkaSinkConfig.parse(Options(sink_opts, "hzsink"), Guarantee.EXACTLY_ONCE)
    assert str(sasl_ssl.password).encode() not in pickle.dumps(sink)
    assert metadata(sink.bootstrap, [], 10, sink.security).brokers  # our client's SCRAM login
    topic = create_topic(services.kafka_bootstrap, 2, "pw-file")
    source = KafkaSourceConfig.parse(Options({**login, "subscribe": topic, "fetcher": "librdkafka"},
                                            "hzsource"))
    assert str(sasl_ssl.password).encode() not in pickle.dumps(source)
    assert KafkaMetadata(source).partitions(strict=True) == [(topic, 0), (topic, 1)]  # librdkafka's login
    pw_file.write_text("not-the-password\n")
    with pytest.raises(AuthenticationError):
        metadata(sink.bootstrap, [], 10, sink.security)
    twice = {**login, "kafka.sasl.password": "inline", "subscribe": topic}
    with pytest.raises(InvalidOptionError, match="given twice"):
        KafkaSourceConfig.parse(Options(twice, "hzsource"))  # fetcher auto would fall back otherwise
