"""Deadlines that hold (issue 15) and honest transport error kinds (issue 11), on loopback.

A server that drips one byte just under the read timeout never trips a per-read
timeout; each test here does exactly that and asserts the request ended at its
deadline: the server saw the client hang up long before it had sent everything.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from rawtcp import tcp_server

from rccrawler.config import CrawlSettings
from rccrawler.exceptions import FetchError
from rccrawler.web.fetch import Fetcher, _Deadline, _GuardedHTTPConnection, _Watchdog

DRIPS = 400
"""Bytes a drip server would send, one per ``interval``: 40 s at 0.1 s, far past any deadline."""


@dataclass
class DripServer:
    """Answers every connection with ``prefix`` and then one byte of ``drip`` at a time."""

    prefix: bytes
    interval: float = 0.1
    port: int = 0
    sent: list[int] = field(default_factory=list)
    """Dripped bytes per connection, recorded when the client hung up (or all were sent)."""
    hung_up: threading.Event = field(default_factory=threading.Event)


@contextlib.contextmanager
def drip_server(prefix: bytes, interval: float = 0.1) -> Iterator[DripServer]:
    server = DripServer(prefix, interval)

    def answer(conn: socket.socket, stop: threading.Event) -> None:
        count = 0
        with contextlib.suppress(OSError), conn:
            conn.recv(65536)
            conn.sendall(server.prefix)
            while count < DRIPS and not stop.wait(server.interval):
                conn.sendall(
                    b"x"
                    if b"\r\n\r\n" in server.prefix
                    else b"X-Drip: 1\r\n"[count % 11 : count % 11 + 1]
                )
                count += 1
        server.sent.append(count)
        server.hung_up.set()

    with tcp_server(answer) as port:
        server.port = port
        yield server


def fetcher(port: int, **crawl: object) -> Fetcher:
    settings = CrawlSettings(resolve={"drip.test:80": f"127.0.0.1:{port}"}, cookies=False,
                             **crawl)  # type: ignore[arg-type]  # fmt: skip
    return Fetcher(settings)


@pytest.mark.parametrize(
    "prefix",
    [
        pytest.param(b"HTTP/1.1 200 OK\r\n", id="headers"),
        pytest.param(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 100000\r\n\r\n",
            id="body-with-length",
        ),
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n", id="body-to-close"),
    ],
)
def test_a_dripping_server_ends_at_the_request_deadline(prefix):
    with drip_server(prefix) as server:
        # Each byte comes well within timeout_s; only the whole-request deadline
        # (2 × timeout_s = 1 s, 10 drips) can end this.
        client = fetcher(server.port, timeout_s=0.5)
        try:
            with pytest.raises(FetchError) as caught:
                client.get("http://drip.test/")
        finally:
            client.close()
        assert caught.value.kind == "timeout"
        assert server.hung_up.wait(10)
        assert server.sent and server.sent[0] < DRIPS // 4


def test_the_deadline_does_not_cut_a_fast_answer():
    prefix = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 5\r\n\r\nhello"
    with drip_server(prefix) as server:
        client = fetcher(server.port, timeout_s=5)
        try:
            response = client.get("http://drip.test/")
        finally:
            client.close()
    assert (response.status, response.body) == (200, b"hello")


def test_refused_unresolvable_and_timed_out_are_different_kinds():
    """urllib3's NewConnectionError subclasses ConnectTimeoutError: a refused port
    or an unknown name must not be reported as a timeout."""
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    settings = CrawlSettings(resolve={"refused.test:80": f"127.0.0.1:{port}"}, cookies=False)
    client = Fetcher(settings)
    try:
        refused = client.download("http://refused.test/")
        unknown = client.download("http://no-such-host.invalid/")
    finally:
        client.close()
    assert (refused.error, unknown.error) == ("connection_refused", "dns")
    with drip_server(b"HTTP/1.1 200 OK\r\n", interval=5) as server:
        client = fetcher(server.port, timeout_s=0.3)
        try:
            slow = client.download("http://drip.test/")
        finally:
            client.close()
    assert slow.error == "timeout"


class _SeenCondition(threading.Condition):
    """A condition that counts its notifications and tells when a thread waits on it."""

    def __init__(self) -> None:
        super().__init__()
        self.notified = 0
        self.waiting = threading.Event()

    def notify(self, n: int = 1) -> None:
        self.notified += 1
        super().notify(n)

    def wait(self, timeout: float | None = None) -> bool:
        self.waiting.set()
        return super().wait(timeout)


def test_the_deadline_thread_sleeps_through_requests_that_end_in_time():
    """One request after another, each finished before the next starts (as a downloading
    thread makes them): once the deadline thread sleeps until the first deadline, no
    later one wakes it (each did, a context switch and a turn of the GIL per request);
    an earlier deadline still does."""
    watchdog = _Watchdog(clock=lambda: 0.0)
    watchdog._wake = condition = _SeenCondition()
    try:
        first = _Deadline(1000.0)
        watchdog.watch(first)
        first.finish()
        assert condition.waiting.wait(10)  # asleep until 1000
        condition.notified = 0
        for index in range(1, 100):
            deadline = _Deadline(1000.0 + index)
            watchdog.watch(deadline)
            deadline.finish()
        assert condition.notified == 0
        watchdog.watch(_Deadline(500.0))
        assert condition.notified == 1
    finally:
        watchdog.close()


def test_a_connection_sets_its_sockets_timeout_without_a_system_call_when_unchanged():
    """urllib3 sets the socket's timeout twice a request, to the same value: the
    connection's socket skips the ioctl (a turn of the GIL) then. Seen from outside: a
    non-blocking flag cleared behind Python's back stays cleared by an unchanged
    timeout, and a new timeout still sets the mode."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        conn = _GuardedHTTPConnection("127.0.0.1", server.getsockname()[1], timeout=5)
        conn.connect()
        try:
            sock = conn.sock
            assert sock is not None

            def nonblocking() -> bool:
                return bool(fcntl.fcntl(sock.fileno(), fcntl.F_GETFL) & os.O_NONBLOCK)

            assert sock.gettimeout() == 5 and nonblocking()
            os.set_blocking(sock.fileno(), True)
            sock.settimeout(5)
            assert not nonblocking()  # no system call: the flag stayed as it was
            sock.settimeout(None)
            assert sock.gettimeout() is None and not nonblocking()
            sock.settimeout(2)
            assert sock.gettimeout() == 2 and nonblocking()
        finally:
            conn.close()
