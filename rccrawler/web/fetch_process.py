"""The HTTP exchanges of a crawl in one forked helper process (``threads.fetch_process``).

urllib3 and ``http.client`` spend several hundred microseconds of Python a request, under
the crawl process's one GIL, beside the parse and the storage. In a helper process that
Python runs on another core: the DownloadingThreads send each request over a pipe and
wait for the answer, as they would wait for the network. The helper is a fork of the
crawl's process taken before any thread starts, with the same :class:`Fetcher` (urllib3
pools, deadlines, cookie rules) doing the exchanges there.

* One pipe a calling thread at a time (a pool of them, each served by a thread of the
  helper), so requests run side by side as they did in one process.
* The helper's cookie jar is the live one; a reply whose exchange changed it carries a
  copy, which the crawl's jar takes (the state saves that one). A jar loaded in the
  crawl's process (a resumed crawl) is sent over before the first request.
* The helper ends as soon as the crawl's process closes the pipes, or dies: it reads the
  end of a pipe then, and exits without waiting for exchanges still in flight.
* If the helper dies, or gives no answer within twice a request's deadline, the crawl's
  process logs it once and goes on fetching by itself.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import queue
import signal
import socket
import struct
import threading
import time
import traceback
import weakref
from collections.abc import Callable
from http.cookiejar import Cookie
from typing import Any, Protocol

from rccrawler.exceptions import FetchError

logger = logging.getLogger(__name__)

ANSWER_GRACE_S = 10.0
"""Seconds the crawl's process waits for an answer beyond twice a request's deadline
before it takes the helper for stuck (the helper's own deadline ends every exchange)."""
EXIT_WAIT_S = 5.0
"""Seconds the helper gets to exit once its pipes are closed, before it is killed."""

SOCKET_BUFFER = 1 << 20
"""Bytes each pipe holds unread each way (the kernel may cap it lower): an ordinary
answer goes over in one piece."""

_PICKLE = pickle.HIGHEST_PROTOCOL


class Fetcher(Protocol):
    """What the helper needs of :class:`rccrawler.web.fetch.Fetcher` (named here, not
    imported: that module starts this one). Its ``download`` and ``get`` are called by
    name."""

    request_deadline_s: float
    on_cookies_changed: Callable[[], None] | None

    def cookie_list(self) -> list[Cookie] | None: ...
    def take_cookies(self, cookies: list[Cookie]) -> None: ...


class HelperGone(Exception):
    """The helper process is gone or stuck: the caller fetches by itself."""


_LENGTH = struct.Struct("!I")


class Channel:
    """One end of a socket pair carrying length-prefixed pickles, one at a time each
    way. A socket timeout bounds the wait for an answer (the wait is the kernel's,
    not a selector built in Python for each call, as ``multiprocessing`` does)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER)

    def wait_at_most(self, seconds: float | None) -> None:
        """Bound each wait of :meth:`receive` (and :meth:`send`) from now on."""
        self.sock.settimeout(seconds)

    def send(self, message: object) -> None:
        payload = pickle.dumps(message, _PICKLE)
        self.sock.sendall(_LENGTH.pack(len(payload)) + payload)

    def receive(self) -> Any:
        """The next message; EOFError when the other end is closed, TimeoutError when a
        wait is longer than :meth:`wait_at_most` allows."""
        (length,) = _LENGTH.unpack(self._exactly(_LENGTH.size))
        return pickle.loads(self._exactly(length))

    def _exactly(self, size: int) -> bytearray:
        buffer = bytearray(size)
        view = memoryview(buffer)
        received = 0
        while received < size:
            count = self.sock.recv_into(view[received:])
            if count == 0:
                raise EOFError
            received += count
        return buffer

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()


class FetchProcess:
    """The parent's side of the helper: forks it and passes calls to it.

    Args:
        fetcher: the fetcher whose exchanges the helper makes (its copy of it, in the fork).
        channels: pipes, so that many threads can have a request in flight at once.
    """

    def __init__(self, fetcher: Fetcher, channels: int) -> None:
        self.fetcher = fetcher
        self.answer_wait_s = 2 * fetcher.request_deadline_s + ANSWER_GRACE_S
        pairs = [_pipe() for _ in range(max(1, channels))]
        self.pid = os.fork()
        if self.pid == 0:  # the helper
            for ours, _theirs in pairs:
                ours.close()
            _serve(fetcher, [theirs for _ours, theirs in pairs])  # never returns
        for _ours, theirs in pairs:
            theirs.close()
        self._ends = [ours for ours, _theirs in pairs]
        for end in self._ends:
            end.wait_at_most(self.answer_wait_s)
        self._free: queue.SimpleQueue[Channel] = queue.SimpleQueue()
        for end in self._ends:
            self._free.put(end)
        self._lock = threading.Lock()
        self.gone = False
        _LIVE.add(self)

    def call(self, method: str, url: str, kwargs: dict[str, Any]) -> Any:
        """``fetcher.<method>(url, **kwargs)`` in the helper.

        Raises:
            FetchError: what the exchange raised there.
            HelperGone: no answer will come; fetch in this process.
        """
        return self._ask(("call", method, url, kwargs))

    def send_cookies(self, cookies: list[Cookie]) -> None:
        """Replace the helper's cookie jar (the crawl's process loaded a saved one)."""
        with contextlib.suppress(HelperGone):
            self._ask(("cookies", cookies))

    def _ask(self, request: tuple[Any, ...]) -> Any:
        if self.gone:
            raise HelperGone
        end = self._free.get()
        kept = False
        try:
            end.send(request)
            kind, value, cookies = end.receive()
            kept = True
        except TimeoutError as exc:
            self._lose(f"no answer in {self.answer_wait_s:.0f} s")
            raise HelperGone from exc
        except (EOFError, OSError) as exc:
            self._lose(str(exc) or type(exc).__name__)
            raise HelperGone from exc
        finally:
            if kept:
                self._free.put(end)
        if cookies is not None:
            self.fetcher.take_cookies(cookies)
            if self.fetcher.on_cookies_changed is not None:
                self.fetcher.on_cookies_changed()
        if kind == "ok":
            return value
        if kind == "fetch_error":
            error_kind, message, retryable = value
            raise FetchError(error_kind, message, retryable=retryable)
        raise RuntimeError(f"the fetch process failed on {request[2]!r}:\n{value}")

    def _lose(self, why: str) -> None:
        with self._lock:
            if self.gone:
                return
            self.gone = True
        logger.warning("the fetch process stopped answering (%s): fetching in this process", why)

    def close(self) -> None:
        """Close the pipes (the helper then exits) and reap it."""
        self.gone = True
        for end in self._ends:
            end.close()
        deadline = time.monotonic() + EXIT_WAIT_S
        while True:
            with contextlib.suppress(ChildProcessError):
                pid, _status = os.waitpid(self.pid, os.WNOHANG)
                if pid == 0 and time.monotonic() < deadline:
                    time.sleep(0.005)
                    continue
                if pid == 0:
                    os.kill(self.pid, signal.SIGKILL)
                    os.waitpid(self.pid, 0)
            return

    def forget(self) -> None:
        """In a process forked from the crawl's later (a task's workers): close this
        process's copies of the pipes, or the helper would not see the crawl's end."""
        self.gone = True
        for end in self._ends:
            with contextlib.suppress(OSError):
                end.close()


_LIVE: weakref.WeakSet[FetchProcess] = weakref.WeakSet()


def _forget_all_in_fork() -> None:
    for process in list(_LIVE):
        process.forget()
    _LIVE.clear()


os.register_at_fork(after_in_child=_forget_all_in_fork)


def _pipe() -> tuple[Channel, Channel]:
    ours, theirs = socket.socketpair()
    return Channel(ours), Channel(theirs)


# -- the helper ---------------------------------------------------------------------


def _serve(fetcher: Fetcher, ends: list[Channel]) -> None:
    """The helper's life: a thread a pipe, each answering calls until its pipe ends."""
    code = 0
    try:
        # The crawl's process decides when to stop (a signal to the process group
        # reaches this one too): it closes the pipes then.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _close_inherited(keep={end.fileno() for end in ends})
        changed = threading.local()
        fetcher.on_cookies_changed = lambda: setattr(changed, "cookies", True)
        threads = [
            threading.Thread(target=_answer, args=(fetcher, end, changed), daemon=True)
            for end in ends
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    except BaseException:
        code = 1
        traceback.print_exc()
    finally:
        os._exit(code)  # no atexit handlers of the crawl's process run twice


def _close_inherited(keep: set[int]) -> None:
    """Close what the crawl's process had open, but the pipes and where logs go: its
    state's lock (``--fresh`` holds it already) must end with it, not with this one."""
    keep |= {0, 1, 2}
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    for handler in (h for log in loggers for h in getattr(log, "handlers", ())):
        with contextlib.suppress(AttributeError, OSError, ValueError):
            keep.add(handler.stream.fileno())
    start = 0
    for fd in sorted(keep):
        if start < fd:  # closerange(n, n) closes every descriptor (close_range to -1)
            os.closerange(start, fd)
        start = fd + 1
    os.closerange(start, max(start + 1, os.sysconf("SC_OPEN_MAX")))


def _answer(fetcher: Fetcher, end: Channel, changed: threading.local) -> None:
    while True:
        try:
            request = end.receive()
        except (EOFError, OSError):
            # The crawl's process closed the pipes, or died: no answer is wanted any
            # more, not even of an exchange still waiting for a slow server.
            os._exit(0)
        changed.cookies = False
        reply: tuple[str, Any]
        try:
            reply = ("ok", _run(fetcher, request))
        except FetchError as exc:
            message = str(exc).removeprefix(f"{exc.kind}: ")
            reply = ("fetch_error", (exc.kind, message, exc.retryable))
        except Exception:
            reply = ("crash", traceback.format_exc())
        cookies = fetcher.cookie_list() if changed.cookies else None
        try:
            end.send((*reply, cookies))
        except (EOFError, OSError):
            os._exit(0)


def _run(fetcher: Fetcher, request: tuple[Any, ...]) -> Any:
    if request[0] == "cookies":
        fetcher.take_cookies(request[1])
        return None
    _kind, method, url, kwargs = request
    call: Callable[..., Any] = getattr(fetcher, method)  # this copy fetches by itself
    return call(url, **kwargs)
