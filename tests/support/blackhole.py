"""A TCP path to a server that can be cut like a failed network: packets dropped.

``Forwarder`` relays a free loopback port to a server; ``cut()`` makes the kernel hold
back every packet to and from that port until ``restore()``: ``tc`` puts them in an HTB
class of 8 bits/s on ``lo`` (matched by port, so other connections pass at full speed; this
kernel has no netem and no drop action). Unlike a stopped server or a proxy that stops
reading, nothing acknowledges the data sent meanwhile: what a pulled cable or a dead host
does. Needs ``tc`` and CAP_NET_ADMIN; a failure to cut fails the test.
"""

from __future__ import annotations

import socket
import subprocess
import threading


def _tc(*args: str) -> None:
    done = subprocess.run(["tc", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise AssertionError(f"tc {' '.join(args)} failed: {done.stderr.strip()}")


class Forwarder:
    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._server.getsockname()[1])
        self._cut = False
        self._open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self._open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        """Hold back every packet to and from the forwarder's port, both ways."""
        # A test killed while cut left its qdisc behind (harmless, but in the way).
        subprocess.run(["tc", "qdisc", "del", "dev", "lo", "root"], capture_output=True, timeout=30)
        _tc("qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb", "default", "10")
        self._cut = True
        _tc("class", "add", "dev", "lo", "parent", "1:", "classid", "1:10", "htb", "rate", "100gbit",
            "quantum", "200000")
        _tc("class", "add", "dev", "lo", "parent", "1:", "classid", "1:20", "htb", "rate", "8bit",
            "ceil", "8bit", "quantum", "1500")
        for field in ("dport", "sport"):
            _tc("filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "prio", "1", "u32",
                "match", "ip", field, str(self.port), "0xffff", "flowid", "1:20")

    def restore(self) -> None:
        if self._cut:
            self._cut = False
            _tc("qdisc", "del", "dev", "lo", "root")

    def close(self) -> None:
        self.restore()
        self._server.close()
        for s in self._open:
            s.close()
