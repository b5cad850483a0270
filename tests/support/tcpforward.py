"""A loopback TCP forwarder that can cut its connections: a network that drops them.

The crawler's storage URL points at the forwarder, which passes every byte on to the
real server (PostgreSQL). :meth:`TcpForwarder.drop_all` closes every connection at
once on both sides, as a failed link or a firewall's reset would: the server sees its
clients go, the client sees its server go. While :attr:`TcpForwarder.refusing` is set,
a new connection is closed as soon as it is accepted (the server unreachable).
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from collections.abc import Iterator

__all__ = ["TcpForwarder", "forwarding"]


class TcpForwarder:
    """Forwards 127.0.0.1:``port`` to ``target``; see the module."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.05)
        self.port = int(self.listener.getsockname()[1])
        self.refusing = threading.Event()
        self.accepted = 0
        """Connections accepted and forwarded so far."""
        self.dropped = 0
        """Connections cut by drop_all()."""
        self._pairs: set[tuple[socket.socket, socket.socket]] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="tcp-forwarder", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                continue
            if self.refusing.is_set():
                client.close()
                continue
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            pair = (client, server)
            with self._lock:
                self._pairs.add(pair)
                self.accepted += 1
            threading.Thread(target=self._pump, args=(pair,), daemon=True).start()

    def _pump(self, pair: tuple[socket.socket, socket.socket]) -> None:
        client, server = pair
        other = {client: server, server: client}
        try:
            while not self._stop.is_set():
                ready, _, _ = select.select([client, server], [], [], 0.1)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    other[sock].sendall(data)
        except (OSError, ValueError):
            return  # cut by drop_all, or the other side went
        finally:
            self._close(pair)

    def _close(self, pair: tuple[socket.socket, socket.socket]) -> bool:
        with self._lock:
            if pair not in self._pairs:
                return False
            self._pairs.discard(pair)
        for sock in pair:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        return True

    def drop_all(self) -> int:
        """Cut every open connection on both sides; how many there were."""
        with self._lock:
            pairs = list(self._pairs)
        cut = sum(self._close(pair) for pair in pairs)
        self.dropped += cut
        return cut

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.listener.close()
        self.drop_all()


@contextlib.contextmanager
def forwarding(target: tuple[str, int]) -> Iterator[TcpForwarder]:
    """A TcpForwarder to ``target`` for the block."""
    forwarder = TcpForwarder(target)
    try:
        yield forwarder
    finally:
        forwarder.close()
