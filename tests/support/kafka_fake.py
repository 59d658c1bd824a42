"""A fake Kafka endpoint that answers Metadata only, from a script (unit tests of client
logic; never proof that a connector works).

A one-node cluster whose broker was frozen past ``broker.session.timeout.ms`` can, just
after it resumes, answer Metadata listing no broker at all (it sees itself fenced until
it registers again): measured on the local broker, 55 such answers in the first 60 ms
after a 20 s freeze, in one try of six. That window is a race inside Kafka, so the
client's handling of it is tested here, on the wire, with the answer scripted.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from kafka.protocol.metadata.metadata import MetadataResponse

_METADATA = 3


@contextmanager
def metadata_endpoint(empty_answers: int) -> Iterator[tuple[str, list[int]]]:
    """Listens on a free loopback port; the first ``empty_answers`` Metadata answers list
    no broker, later ones list this endpoint as node 1. Yields (bootstrap, answers given
    so far, as the number of brokers each listed)."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    given: list[int] = []
    stop = threading.Event()

    def answer(conn: socket.socket) -> None:
        with conn:
            while not stop.is_set():
                head = conn.recv(4, socket.MSG_WAITALL)
                if len(head) < 4:
                    return
                (size,) = struct.unpack(">i", head)
                req = conn.recv(size, socket.MSG_WAITALL)
                api_key, version, cid = struct.unpack(">hhi", req[:8])
                if api_key != _METADATA:
                    return  # anything else: the connection drops, as a broker going away
                me = MetadataResponse.MetadataResponseBroker(node_id=1, host="127.0.0.1", port=port,
                                                             rack=None)
                brokers = [] if len(given) < empty_answers else [me]
                given.append(len(brokers))
                body = MetadataResponse(throttle_time_ms=0, brokers=brokers, cluster_id="fake",
                                        controller_id=1 if brokers else -1, topics=[]).encode(version=version)
                conn.sendall(struct.pack(">ii", len(body) + 4, cid) + body)

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"127.0.0.1:{port}", given
    finally:
        stop.set()
        server.close()
