"""A TCP relay on a loopback port in front of a server, whose open connections a test can cut
at once: a dropped network connection as a browser meets it (Chromium's offline mode leaves
a stream that is already open on loopback alone)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Relay:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=10)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                self._open |= {client, server}
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                self._close(s)

    def _close(self, s: socket.socket) -> None:
        with self._lock:
            self._open.discard(s)
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)
        s.close()

    def cut(self) -> int:
        """Drop every connection open now; returns how many there were."""
        with self._lock:
            sockets = list(self._open)
        for s in sockets:
            self._close(s)
        return len(sockets)

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        self.cut()


@contextmanager
def tcp_relay(upstream_port: int) -> Iterator[Relay]:
    relay = Relay(upstream_port)
    try:
        yield relay
    finally:
        relay.close()
