"""A loopback TCP server below HTTP, for tests of what an HTTP server would never send."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def tcp_server(answer: Callable[[socket.socket, threading.Event], None]) -> Iterator[int]:
    """Serve on 127.0.0.1 until the block ends; yields the port.

    Each connection is handed to ``answer(conn, stop)`` in a thread of its own (which
    closes it); ``stop`` is set when the block ends, so a slow answer can give up.
    """
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            threading.Thread(target=answer, args=(conn, stop), daemon=True).start()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        listener.close()
