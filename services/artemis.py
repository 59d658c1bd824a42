"""The local ActiveMQ Artemis broker with its STOMP acceptor."""

from __future__ import annotations

import re
import subprocess
import tarfile
import time
import uuid
from pathlib import Path

from services.common import (
    ARTEMIS_VERSION,
    CACHE,
    HOST,
    LOCAL,
    STOMP_MTLS_PORT,
    STOMP_PASSWORD,
    STOMP_PORT,
    STOMP_TLS_PORT,
    STOMP_USER,
    ServiceError,
    _mvn,
    _port_open,
    _spawn,
    _wait,
    log,
)


def artemis_home() -> Path:
    home = CACHE / f"apache-artemis-{ARTEMIS_VERSION}"
    if not (home / "bin" / "artemis").exists():
        tgz = CACHE / f"apache-artemis-{ARTEMIS_VERSION}-bin.tar.gz"
        if not tgz.exists():
            log(f"resolving ActiveMQ Artemis {ARTEMIS_VERSION} from Maven Central")
            _mvn("dependency:copy",
                 f"-Dartifact=org.apache.activemq:apache-artemis:{ARTEMIS_VERSION}:tar.gz:bin",
                 f"-DoutputDirectory={CACHE}")
        with tarfile.open(tgz) as tf:
            tf.extractall(CACHE, filter="tar")
    return home


def _round_trip(dest: str, send_first: bool) -> bool:
    """Send a token to ``dest`` and receive it within 5 s; ``send_first``: before subscribing."""
    import stomp

    token = uuid.uuid4().hex
    got: list[str] = []

    class L(stomp.ConnectionListener):
        def on_message(self, frame: stomp.utils.Frame) -> None:
            got.append(frame.body)

    conn = stomp.Connection12([(HOST, STOMP_PORT)], heartbeats=(0, 0))
    conn.set_listener("probe", L())
    conn.connect(STOMP_USER, STOMP_PASSWORD, wait=True)
    try:
        if send_first:
            conn.send(dest, token, headers={"persistent": "true"}, receipt="sent")
        conn.subscribe(dest, id="probe", ack="auto")
        if not send_first:
            conn.send(dest, token)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and token not in got:
            time.sleep(0.05)
        return token in got
    finally:
        conn.disconnect()


def _stomp_ready() -> bool:
    if not _port_open(STOMP_PORT):
        return False  # stomp.py logs every refused connect; skip the noise while starting
    return _round_trip("/queue/_spark_ext_ready", send_first=False)


def _artemis_settings() -> list[str]:
    """Our STOMP acceptor routes /queue/ and /topic/ (anycast / multicast prefixes): a
    message sent to a new queue before anyone subscribes must wait there, not vanish."""
    if _round_trip(f"/queue/_spark_ext_prefix_{uuid.uuid4().hex[:8]}", send_first=True):
        return []
    return ["the STOMP acceptor drops messages sent to a queue before its first subscriber "
            "(anycastPrefix=/queue/ and multicastPrefix=/topic/ missing)"]


#: Broker properties both the local instance and docker-compose.yml's Artemis load.
BROKER_PROPERTIES = Path(__file__).resolve().parent / "artemis-broker.properties"


def _stomp_prefixes(etc: Path) -> None:
    """STOMP's /queue/ and /topic/ conventions (ActiveMQ classic, JMS over STOMP).

    Without the acceptor's prefixes Artemis takes "/queue/x" as a literal address name
    and, by default, auto-creates it MULTICAST on the first SEND, with no queue yet:
    messages sent before the first subscriber are dropped. With them, /queue/x is an
    anycast queue. Set through ``broker.properties`` (read after broker.xml), the same
    file docker-compose.yml mounts.
    """
    (etc / "broker.properties").write_text(BROKER_PROPERTIES.read_text() + "".join(
        f"{line}\n" for line in tls_acceptors()))


def tls_acceptors() -> list[str]:
    """Two more STOMP acceptors, over TLS with the local CA's server certificate: one that
    takes any client, one that also wants a client certificate the CA signed. Local only
    (docker-compose.yml's broker has the plain acceptor)."""
    from services.pki import STORE_PASSWORD, make_pki

    pki = make_pki()
    out = []
    for name, port, mutual in (("stomptls", STOMP_TLS_PORT, False), ("stompmtls", STOMP_MTLS_PORT, True)):
        params = {"host": HOST, "port": port, "protocols": "STOMP", "sslEnabled": "true",
                  "keyStorePath": pki / "server.p12", "keyStoreType": "PKCS12",
                  "keyStorePassword": STORE_PASSWORD,
                  "anycastPrefix": "/queue/", "multicastPrefix": "/topic/"}
        if mutual:
            params.update({"needClientAuth": "true", "trustStorePath": pki / "ca-trust.p12",
                           "trustStoreType": "PKCS12", "trustStorePassword": STORE_PASSWORD})
        out.append(f"acceptorConfigurations.{name}.factoryClassName="
                   "org.apache.activemq.artemis.core.remoting.impl.netty.NettyAcceptorFactory")
        out += [f"acceptorConfigurations.{name}.params.{k}={v}" for k, v in params.items()]
    return out


#: The broker's heap: ``artemis create``'s own default. Paging starts at a quarter of it
#: (``globalMaxSize`` in artemis-broker.properties).
HEAP = "2G"


def _heap(profile: Path) -> None:
    """The instance's -Xmx set to ``HEAP`` on every start, so an instance created with
    another heap gets this one too."""
    text = profile.read_text()
    profile.write_text(re.sub(r"-Xmx\S+", f"-Xmx{HEAP}", text))


def create_instance(instance: Path, heap: str = HEAP, port_offset: int = 0) -> None:
    """``artemis create`` of a broker instance on loopback with the local login; its STOMP
    acceptor at ``STOMP_PORT + port_offset``."""
    instance.parent.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(
        [str(artemis_home() / "bin" / "artemis"), "create", str(instance), "--silent", "--force",
         "--user", STOMP_USER, "--password", STOMP_PASSWORD, "--require-login",
         "--host", HOST, "--http-host", HOST, "--no-web", "--no-amqp-acceptor",
         "--no-hornetq-acceptor", "--no-mqtt-acceptor", "--no-autotune",
         "--java-memory", heap, "--port-offset", str(port_offset)],
        capture_output=True, text=True,
    )
    if res.returncode != 0:
        raise ServiceError(f"artemis create failed:\n{res.stdout}\n{res.stderr}")


def artemis_up() -> None:
    instance = LOCAL / "artemis" / "broker"
    if not (instance / "bin" / "artemis").exists():
        create_instance(instance)
    _stomp_prefixes(instance / "etc")
    _heap(instance / "etc" / "artemis.profile")
    pid = _spawn("artemis", [str(instance / "bin" / "artemis"), "run"])
    log(f"starting artemis (pid {pid})")
    _wait("artemis", _stomp_ready, pid, LOCAL / "logs" / "artemis.log")
    log(f"artemis ready, STOMP at {HOST}:{STOMP_PORT}")


# --------------------------------------------------------------------------- entry


