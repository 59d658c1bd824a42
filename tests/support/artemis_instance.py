"""A private Artemis broker for one test: its own instance directory, ports and settings
(``make services``' shared broker stays as it is), killed and restarted at will."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path
from types import SimpleNamespace

from services.artemis import BROKER_PROPERTIES, create_instance
from services.common import ARTEMIS_CORE_PORT, HOST, STOMP_PASSWORD, STOMP_PORT, STOMP_USER
from tests.support.waiting import wait_for


def _free_offset() -> int:
    """A port offset whose STOMP and core ports are both free on loopback."""
    for offset in range(700, 1700, 37):
        free = True
        for port in (STOMP_PORT + offset, ARTEMIS_CORE_PORT + offset):
            with socket.socket() as s:
                free = free and s.connect_ex((HOST, port)) != 0
        if free:
            return offset
    raise AssertionError("no free port pair for a private Artemis broker")


class PrivateArtemis:
    """``properties``: broker properties added to the shared ones (the /queue/ prefixes)."""

    def __init__(self, where: Path, properties: dict[str, str], heap: str = "512M") -> None:
        self.where = where
        offset = _free_offset()
        self.port = STOMP_PORT + offset
        create_instance(where / "broker", heap=heap, port_offset=offset)
        (where / "broker" / "etc" / "broker.properties").write_text(
            BROKER_PROPERTIES.read_text() + "".join(f"{k}={v}\n" for k, v in properties.items()))
        self._proc: subprocess.Popen | None = None
        self.services = SimpleNamespace(stomp_host=HOST, stomp_port=self.port, stomp_user=STOMP_USER,
                                        stomp_password=STOMP_PASSWORD)

    def start(self) -> None:
        with open(self.where / "artemis.log", "ab") as out:
            self._proc = subprocess.Popen([str(self.where / "broker" / "bin" / "artemis"), "run"], stdout=out,
                                          stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          start_new_session=True)
        log = self.where / "artemis.log"
        wait_for(self._ready, f"the private Artemis broker on port {self.port} (log: {log})", 120)

    def _ready(self) -> bool:
        log = self.where / "artemis.log"
        assert self._proc is not None and self._proc.poll() is None, log.read_text()[-3000:]
        with socket.socket() as s:
            s.settimeout(1)
            if s.connect_ex((HOST, self.port)) != 0:
                return False
            s.sendall(f"CONNECT\naccept-version:1.2\nlogin:{STOMP_USER}\npasscode:{STOMP_PASSWORD}\n\n\x00".encode())
            try:
                return s.recv(9).startswith(b"CONNECTED")
            except OSError:
                return False

    def kill(self) -> None:
        """kill -9 of the broker's process group: what it had not written to disk is gone."""
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait(30)
        self._proc = None
