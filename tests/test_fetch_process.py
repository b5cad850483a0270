"""The HTTP exchanges in a forked helper process (``threads.fetch_process``, issue 14).

Which process made an exchange is read from the kernel: the server's side of each
connection names the client's port, and ``/proc`` says which process holds the socket
of that port. Cookies, errors, a helper that dies and a crawl that is killed are each
checked end to end; the rest of the suite crawls through the helper too (the tests'
``CrawlRunner`` starts it, as the command line does).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.cookiejar import CookieJar
from pathlib import Path
from typing import Any

import pytest
from crawling import CrawlRunner, child_pids, process_alive, wait_until
from rawtcp import tcp_server
from webserver import HTML, Request, Resource

from rccrawler.config import CrawlSettings
from rccrawler.exceptions import FetchError
from rccrawler.web.fetch import Fetcher

TESTS = Path(__file__).parent


@contextlib.contextmanager
def peer_ports_server() -> Iterator[tuple[int, list[int]]]:
    """A keep-alive HTTP/1.1 server that records the client's port of every request."""
    ports: list[int] = []
    body = b"<a href='/next'>next</a>"
    answer = (b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s"
              % (len(body), body))  # fmt: skip

    def serve(conn: socket.socket, stop: threading.Event) -> None:
        with conn:
            conn.settimeout(5)
            data = b""
            while not stop.is_set():
                try:
                    chunk = conn.recv(65536)
                except OSError:
                    return
                if not chunk:
                    return
                data += chunk
                while b"\r\n\r\n" in data:
                    _head, _, data = data.partition(b"\r\n\r\n")
                    ports.append(conn.getpeername()[1])
                    conn.sendall(answer)

    with tcp_server(serve) as port:
        yield port, ports


def socket_owner(local_port: int) -> set[int]:
    """The pids holding the loopback TCP socket whose local port is ``local_port``."""
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].split(":")[1], 16) == local_port:
            inodes.add(fields[9])
    owners = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    link = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if link.startswith("socket:[") and link[8:-1] in inodes:
                        owners.add(int(pid))
    return owners


def helper_pid(fetcher: Fetcher) -> int:
    assert fetcher._process is not None
    return fetcher._process.pid


def test_the_exchanges_are_made_by_the_helper_process():
    with peer_ports_server() as (port, ports):
        client = Fetcher(CrawlSettings(cookies=False))
        client.start_process(channels=2)
        try:
            results = [client.download(f"http://127.0.0.1:{port}/{n}") for n in range(5)]
            # The connection is kept alive: its socket is still open, in the helper.
            owners = socket_owner(ports[-1])
            helper = helper_pid(client)
        finally:
            client.close()
    assert [r.status for r in results] == [200] * 5
    assert results[0].body.startswith(b"<a href")
    assert results[0].exchange is not None and results[0].exchange.url.endswith(f":{port}/0")
    assert owners == {helper} and helper != os.getpid()
    assert len(client.pool.pools) == 0  # this process opened no connection


@pytest.mark.parametrize("where", ["in this process", "in the helper"])
def test_transport_errors_are_the_same_kinds_in_the_helper(where):
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    client = Fetcher(CrawlSettings(resolve={"refused.test:80": f"127.0.0.1:{port}"},
                                   cookies=False))  # fmt: skip
    if where == "in the helper":
        client.start_process(channels=1)
    try:
        refused = client.download("http://refused.test/")
        with pytest.raises(FetchError) as caught:
            client.get("http://refused.test/")
        bad = client.download("http://[::1/")
    finally:
        client.close()
    assert (refused.error, refused.retryable) == ("connection_refused", True)
    assert caught.value.kind == "connection_refused" and caught.value.retryable
    assert str(caught.value).startswith("connection_refused: ")
    assert not str(caught.value).startswith("connection_refused: connection_refused")
    assert (bad.error, bad.retryable) == ("bad_url", False)


def test_cookies_set_in_the_helper_reach_the_crawls_jar_and_back(serve):
    sent: list[str] = []

    def page(request: Request) -> Resource:
        sent.append(request.header("cookie"))
        return Resource(b"<p>x</p>", headers=(*HTML, ("Set-Cookie", f"n={len(sent)}")))

    server = serve({"a.test": {"/a": page, "/b": page}})
    changes: list[int] = []
    jar = CookieJar()
    client = Fetcher(CrawlSettings(resolve=server.resolve), jar,
                     on_cookies_changed=lambda: changes.append(len(jar)))  # fmt: skip
    client.start_process(channels=1)
    try:
        client.download("http://a.test/a")
        client.download("http://a.test/b")
    finally:
        client.close()
    assert sent == ["", "n=1"]  # the helper's jar sent back what it was given
    assert changes == [1, 1]  # and this process's jar took each change
    assert [(c.name, c.value) for c in jar] == [("n", "2")]

    # A jar this process loaded (a resumed crawl) is the helper's from the first request.
    sent.clear()
    client = Fetcher(CrawlSettings(resolve=server.resolve), jar)
    client.start_process(channels=1)
    try:
        client.cookies_loaded()
        client.download("http://a.test/a")
    finally:
        client.close()
    assert sent == ["n=2"]


def test_a_dead_helper_leaves_the_fetching_to_this_process(caplog):
    with peer_ports_server() as (port, ports):
        client = Fetcher(CrawlSettings(cookies=False))
        client.start_process(channels=2)
        try:
            assert client.download(f"http://127.0.0.1:{port}/").status == 200
            os.kill(helper_pid(client), signal.SIGKILL)
            with caplog.at_level(logging.WARNING, logger="rccrawler.web.fetch_process"):
                after = [client.download(f"http://127.0.0.1:{port}/{n}") for n in range(3)]
            owners = socket_owner(ports[-1])
        finally:
            client.close()
    assert [r.status for r in after] == [200] * 3
    assert owners == {os.getpid()}
    warnings = [r for r in caplog.records if "fetch process stopped answering" in r.message]
    assert len(warnings) == 1


def test_a_fork_of_the_crawl_keeps_no_pipe_of_the_helper():
    """A task's workers are forks of the crawl's process: the helper must still see the
    crawl's pipes end when the crawl closes them, not when the workers exit too."""
    client = Fetcher(CrawlSettings(cookies=False))
    client.start_process(channels=3)
    assert client._process is not None
    ends = [end.fileno() for end in client._process._ends]
    report_r, report_w = os.pipe()
    worker = os.fork()
    if worker == 0:  # a worker: are the pipes to the helper closed here?
        closed = all(_closed(fd) for fd in ends)
        os.write(report_w, b"closed" if closed else b"open")
        os._exit(0)
    os.close(report_w)
    try:
        assert os.read(report_r, 16) == b"closed"
    finally:
        os.close(report_r)
        os.waitpid(worker, 0)
        client.close()


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


@contextlib.contextmanager
def stuck_crawl(
    serve: Callable[..., Any], root: Path, *args: str, **settings: Any
) -> Iterator[subprocess.Popen[bytes]]:
    """A crawl from the command line, its one page's answer held back until the block
    ends: the block runs while the request is in flight. The crawl is killed after."""
    release = threading.Event()
    entered = threading.Event()

    def stuck(request: Request) -> Resource:
        entered.set()
        release.wait(30)
        return Resource(b"<p>late</p>", headers=HTML)

    server = serve({"a.test": {"/": stuck}})
    config = CrawlRunner(root).settings_file(["a.test"], server.resolve, **settings)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])}
    crawl = subprocess.Popen([sys.executable, "-m", "rccrawler", "--config", str(config),
                              *args, "--no-tui", "-q"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        assert entered.wait(60)
        yield crawl
    finally:
        release.set()
        with contextlib.suppress(ProcessLookupError):
            crawl.kill()
        crawl.wait(60)


def open_files(pid: int) -> set[str]:
    return {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}


def test_the_helper_exits_when_the_crawl_is_killed(serve, tmp_path):
    """kill -9 of the crawl: the helper reads the end of its pipes and exits at once,
    even with an exchange in flight, and the crawl resumes at once. The helper holds
    none of the crawl's files, not even the state's lock that ``--fresh`` took before
    the fork."""
    with stuck_crawl(serve, tmp_path, "--fresh", crawl={"timeout_s": 30}) as crawl:
        [helper] = child_pids(crawl.pid)
        state = str(tmp_path / "state")
        assert any(path.startswith(state) for path in open_files(crawl.pid))
        assert not any(path.startswith(state) for path in open_files(helper))
        crawl.send_signal(signal.SIGKILL)
        crawl.wait(10)
        assert wait_until(lambda: not process_alive(helper), 10)
    server = serve({"a.test": {"/": Resource(b"<p>now</p>", headers=HTML)}})
    result = CrawlRunner(tmp_path).run(["a.test"], server.resolve)
    assert result.finished
    assert result.graph("a.test").urls == {"http://a.test/"}


def test_fetch_process_false_fetches_in_the_crawls_process(serve, tmp_path):
    with stuck_crawl(serve, tmp_path, threads={"downloading": 2, "fetch_process": False}) as crawl:
        assert child_pids(crawl.pid) == set()
    with stuck_crawl(serve, tmp_path / "on", threads={"downloading": 2}) as crawl:
        assert len(child_pids(crawl.pid)) == 1
