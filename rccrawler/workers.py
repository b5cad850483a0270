"""Worker processes: Python work beside the crawl's threads, on another core.

A crawl runs its Python on one core at a time (the GIL). A task whose work on a page
costs more than the page's download (the search task's parse and weighing, the parse of
a large page) hands it to a worker process: the thread waits for the answer without
holding the GIL, so the crawl goes on meanwhile. Nothing is stored by a worker: the
thread stores what it answers, as it stores what it computes itself when the worker is
not up (the same rows), so a killed crawl loses no finished page. A worker that is not
up yet, has failed or is gone leaves the work to the thread.

A worker is a fork of the crawl's process when that is safe (on Linux, from a process
with one thread: a search crawl run from the command line starts its workers in
``SearchManager.prepare``, before its threads and the live view's), so it starts with
the crawl's imports done; otherwise it is a fresh interpreter that imports them itself
(0.22 to 0.31 CPU s for a search worker, numpy included, on the cores the crawl needs).

A task's workers are a :class:`Worker` subclass: :attr:`Worker.setup` prepares the
process (the search task's text processor), :attr:`Worker.idle_imports` are imported
while it waits for its first work.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib
import logging
import os
import queue
import select
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn, TypeVar

from rccrawler.cpus import LARGE_PARSE_BYTES, use_the_crawl_process_cpus
from rccrawler.web.html import parse_html

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from multiprocessing.connection import Connection

    from rccrawler.config import Settings
    from rccrawler.web.html import ParsedPage

logger = logging.getLogger(__name__)

T = TypeVar("T")

READY = "ready"
"""What a worker sends once it can take work."""

CLOSE_WAIT = 5.0
"""Seconds a closing worker gets to end before it is killed."""

WORKER_ENVIRONMENT = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
"""A worker is one thread of work: numpy's BLAS (the search task's) starts no threads of
its own (their start doubled the CPU time of its import, on a crawl that uses every
core)."""

CALLS_AHEAD = 2
"""Calls sent to a worker ahead of their answers by :meth:`WorkerPool.map_calls`."""

SOCKET_BUFFER = 1 << 20
"""Bytes a worker's socket holds unread each way (the kernel may cap it lower): room
for the pages sent ahead and for their answers. On the Python docs a page is 54 kB at
the median and up to 2.5 MB; its answer (links, text, positions) 27 kB, 100 kB at the
90th percentile and up to 770 kB. With the default 208 kB, a worker spent 6 to 13% of
its time in its send, until the thread read the answer before."""


class WorkerError(Exception):
    """A worker could not do the work (not up, gone, or the work raised there)."""


@functools.cache
def _connection_type() -> type[Connection]:
    """multiprocessing's Connection, loaded with the first worker: a crawl without one,
    and the commands that only read a crawl, never need it."""
    from multiprocessing.connection import Connection

    return Connection


def _unreadable(what: str) -> NoReturn:
    """The work of a request the worker could not read (it must answer every one, in
    order: the caller waits for each answer)."""
    raise WorkerError(f"the request could not be read: {what}")


Setup = Callable[[Any], None]
"""What prepares a worker's process for its work, given the crawl's settings (a
module-level function: a fresh interpreter gets it by name)."""


def serve(
    connection: Connection,
    settings: Settings | None,
    setup: Setup | None = None,
    idle_imports: Sequence[str] = (),
) -> None:
    """A worker's life: ``setup(settings)``, then (function, arguments) in, ("ok",
    result) or ("error", what) out, in the order they came, until None or the pipe
    closes; ``idle_imports`` are imported while no work waits."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the crawl decides when to stop
    use_the_crawl_process_cpus()  # not the one core of a crawl thread (threads.one_core)
    if setup is not None:
        setup(settings)
    requests: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def read() -> None:
        # Always reading: a caller may send the next piece while this process sends an
        # answer, and two sends into full pipes would wait on each other for ever.
        while True:
            try:
                request = connection.recv()
            except (EOFError, OSError):
                request = None
            except Exception as exc:  # its pickle does not load here: the answer says so
                request = (_unreadable, (repr(exc),))
            requests.put(request)
            if request is None:
                return

    threading.Thread(target=read, name="Worker-requests", daemon=True).start()
    connection.send(READY)
    to_import = list(idle_imports)
    while True:
        while to_import and requests.empty():  # idle: import what the work will need
            importlib.import_module(to_import.pop())
        if (request := requests.get()) is None:
            break
        function, arguments = request
        try:
            answer: tuple[str, object] = ("ok", function(*arguments))
        except Exception as exc:  # the caller does the work itself, and sees the error
            answer = ("error", repr(exc))
        try:
            connection.send(answer)
        except OSError:  # the crawl is gone (killed): so is its work
            return
        except Exception as exc:  # it does not pickle (nothing was sent): say so
            with contextlib.suppress(OSError):  # gone: the next request read is None
                connection.send(("error", f"the answer could not be sent: {exc!r}"))


def can_fork() -> bool:
    """Whether a worker may be a fork of this process: Linux (a pidfd lets the crawl
    wait for a child it did not start through ``subprocess``), and no thread but this
    one (a fork copies a lock another thread holds, locked for ever)."""
    return hasattr(os, "pidfd_open") and threading.active_count() == 1


def _forked_worker(fd: int, worker: Worker) -> NoReturn:
    """The life of a forked worker: it never returns into the crawl's code it was
    copied from (its frames, files and handlers are the crawl's)."""
    try:
        # The crawl's objects are never collected here: a finalizer would close a file
        # descriptor that this process may have reused by then.
        gc.freeze()
        # The crawl's files (its state's lock, its database, its sockets) are not this
        # process's to hold: a killed crawl's lock must go with it.
        os.closerange(3, fd)
        os.closerange(fd + 1, os.sysconf("SC_OPEN_MAX"))
        signal.set_wakeup_fd(-1)
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
            signal.signal(signum, signal.SIG_DFL)  # the crawl's handlers would stop it
        serve(_connection_type()(fd), worker.settings, type(worker).setup, worker.idle_imports)
    except BaseException:  # nothing of the crawl's may run here: say why, and end
        with contextlib.suppress(Exception):
            import traceback

            traceback.print_exc()
        os._exit(1)
    os._exit(0)


class _ForkedProcess:
    """The part of ``subprocess.Popen`` that :class:`Worker` uses, for a forked
    child: waited for through a pidfd (``Popen`` cannot adopt a child)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._pidfd = os.pidfd_open(pid)

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            ready, _, _ = select.select([self._pidfd], [], [], timeout)
            if not ready:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout or 0)
            try:
                _, status = os.waitpid(self.pid, 0)
                self.returncode = os.waitstatus_to_exitcode(status)
            except ChildProcessError:  # reaped by someone else: gone all the same
                self.returncode = -1
            os.close(self._pidfd)
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:  # not reaped yet: the pid is still this child's
            os.kill(self.pid, signal.SIGKILL)


def main(fd: int) -> None:
    """The worker process (``python -c`` of :data:`_BOOT`): its end of the socket pair
    is ``fd``, and the settings, setup and idle imports are the first thing it reads."""
    connection = _connection_type()(fd)
    try:
        settings, setup, idle_imports = connection.recv()
    except (EOFError, OSError):
        os._exit(0)
    serve(connection, settings, setup, idle_imports)
    # Nothing to flush or save: skip the interpreter's teardown (a crawl's end waits).
    os._exit(0)


_BOOT = (
    "import os, sys; hasattr(os, 'sched_setaffinity') and"
    " os.sched_setaffinity(0, os.sched_getaffinity(os.getppid()));"
    " sys.path[:0] = {path!r}; from rccrawler.workers import main; main({fd})"
)
"""The worker's command: a fresh interpreter with this one's import path (not the
crawl's main module, which a ``multiprocessing`` child would import again). It takes
the crawl's CPUs before its imports: it inherits the one core of the thread that
started it (``threads.one_core``), and imports are most of its start."""


class Worker:
    """One worker process, used by one thread at a time.

    It is a fork of this process, up at once, when :func:`can_fork` says so. Else it is
    a fresh interpreter, started from a helper thread: until it has read its settings
    and imported what it needs, :meth:`call` raises WorkerError at once (the caller
    does the work), so the crawl never waits for it.

    Args:
        settings: the crawl's settings, for :attr:`setup` (None: it needs none).
        fork: a fork (True) or a fresh interpreter (False); None: a fork if
            :func:`can_fork`.
    """

    setup: ClassVar[Setup | None] = None
    """Prepares the worker's process, given the settings (see :func:`serve`)."""
    idle_imports: ClassVar[tuple[str, ...]] = ()
    """Modules the worker imports while it waits for its first work."""
    label: ClassVar[str] = "worker"
    """What the log calls it."""

    def __init__(self, settings: Settings | None = None, *, fork: bool | None = None) -> None:
        self.settings = settings
        self._connection: Connection | None = None
        self._process: subprocess.Popen[bytes] | _ForkedProcess | None = None
        self._ready = False
        self._failed = False
        self.answered = 0
        """Pieces of work this worker did."""
        self.forked = can_fork() if fork is None else fork
        """Whether the worker is a fork of this process."""
        self._starting: threading.Thread | None = None
        if self.forked:  # in this thread: with a helper, it would not be the only one
            self._launch(self._fork)
        else:
            self._starting = threading.Thread(
                target=self._launch, args=(self._spawn,), name="Worker-start", daemon=True
            )
            self._starting.start()

    def _launch(self, start: Callable[[socket.socket, socket.socket], Connection]) -> None:
        """Start the process by ``start(our end, its end)``, which returns our connection."""
        parent, child = socket.socketpair()
        try:
            for end in (parent, child):
                end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER)
            self._connection = start(parent, child)
            how = "a fork of the crawl" if self.forked else "a fresh interpreter"
            logger.debug("%s %s started, %s", self.label, self.pid, how)
        except Exception as exc:  # no worker: the threads do its work, as without one
            logger.warning("no %s process (%s): its work is done in the crawl's threads",
                           self.label, exc)  # fmt: skip
            self._failed = True
            parent.close()
        finally:
            child.close()

    def _fork(self, parent: socket.socket, child: socket.socket) -> Connection:
        connection_type = _connection_type()  # loaded before the fork, for both processes
        if not all(map(sys.modules.__contains__, self.idle_imports)):
            # Imported once here rather than in every worker, and as a worker would: a
            # crawl's process needs no BLAS threads either (nor a fork their locks).
            for name, value in WORKER_ENVIRONMENT.items():
                os.environ.setdefault(name, value)
            for module in self.idle_imports:
                importlib.import_module(module)
        pid = os.fork()
        if pid == 0:
            parent.close()
            _forked_worker(child.detach(), self)
        self._process = _ForkedProcess(pid)
        return connection_type(parent.detach())

    def _spawn(self, parent: socket.socket, child: socket.socket) -> Connection:
        command = _BOOT.format(path=sys.path, fd=child.fileno())
        self._process = subprocess.Popen(
            [sys.executable, "-c", command],
            stdin=subprocess.DEVNULL,
            pass_fds=[child.fileno()],
            env={**os.environ, **WORKER_ENVIRONMENT},
        )
        connection = _connection_type()(parent.detach())
        connection.send((self.settings, type(self).setup, self.idle_imports))
        return connection

    def ready(self, wait: float = 0.0) -> bool:
        """Whether the worker takes work now, waiting up to ``wait`` seconds for it."""
        if self._ready or self._failed:
            return self._ready
        if self._starting is not None:
            self._starting.join(wait)
        connection = self._connection
        if connection is None:
            return False
        try:
            if connection.poll(wait):
                self._ready = connection.recv() == READY
                self._failed = not self._ready
        except (EOFError, OSError):
            self._failed = True
        return self._ready

    def submit(self, function: Callable[..., Any], *arguments: Any) -> None:
        """Send work (a module-level function and its picklable arguments)."""
        if not self.ready():
            raise WorkerError("the worker is not up")
        assert self._connection is not None
        try:
            self._connection.send((function, arguments))
        except OSError as exc:
            self._gone(exc)

    def result(self) -> Any:
        """The answer to the work sent last (WorkerError if it failed there)."""
        assert self._connection is not None
        try:
            status, answer = self._connection.recv()
        except (EOFError, OSError) as exc:
            self._gone(exc)
        except Exception as exc:  # an answer that does not load here: nor would the next
            self.stop()  # (read from the middle of the stream): the worker is let go
            self._gone(exc)
        if status != "ok":
            raise WorkerError(answer)
        self.answered += 1
        return answer

    def call(self, function: Callable[..., T], *arguments: Any) -> T:
        """``function(*arguments)`` run in the worker."""
        self.submit(function, *arguments)
        result: T = self.result()
        return result

    def _gone(self, exc: BaseException) -> NoReturn:
        logger.warning("a %s is gone (%r): its work is done in the threads",
                       self.label, exc)  # fmt: skip
        self._ready, self._failed = False, True
        raise WorkerError(repr(exc)) from exc

    def stop(self) -> None:
        """Ask the worker to end, without waiting for it (:meth:`close` waits)."""
        if self._starting is not None:
            self._starting.join()
        connection, process = self._connection, self._process
        if connection is None or connection.closed:
            return
        up = self.ready()
        if up:
            with contextlib.suppress(OSError):
                connection.send(None)
        connection.close()
        if process is not None and not up:
            process.kill()

    @property
    def pid(self) -> int | None:
        """The worker's process id (None until it is started)."""
        return self._process.pid if self._process is not None else None

    def close(self) -> None:
        """Stop the worker (it holds no state): asked to end when it is up, killed when
        it is still starting (a short crawl does not wait for its imports)."""
        self.stop()
        process = self._process
        if process is not None:
            try:
                process.wait(CLOSE_WAIT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


class WorkerPool:
    """A task's workers: one for each thread that asks, and work spread over them all
    (:meth:`map_calls`), as the search task derives its posting lists once the crawl is
    over.

    Args:
        settings: the crawl's settings.
        enabled: False (``search.workers: false``, say) starts none: the threads do it all.
        fork: how the workers start (see :class:`Worker`).
    """

    worker_class: ClassVar[type[Worker]] = Worker
    """What each worker is (a subclass prepares its process for the task's work)."""

    def __init__(
        self, settings: Settings, *, enabled: bool = True, fork: bool | None = None
    ) -> None:
        self.settings = settings
        self.enabled = enabled
        self.fork = fork
        self._workers: list[Worker] = []
        self._spare: list[Worker] = []
        self._lock = threading.Lock()
        self.answered = 0
        """Pieces of work the closed workers did (pages, parts of the lists)."""

    def _new_worker(self) -> Worker:
        return self.worker_class(self.settings, fork=self.fork)

    def prestart(self, count: int) -> list[Worker]:
        """Start ``count`` workers now, for the next :meth:`take` calls."""
        if not self.enabled:
            return []
        started = [self._new_worker() for _ in range(count)]
        with self._lock:
            self._spare += started
        return started

    def take(self) -> Worker | None:
        """A worker for one thread's use, started now unless :meth:`prestart` did
        (None when workers are off)."""
        if not self.enabled:
            return None
        with self._lock:
            worker = self._spare.pop(0) if self._spare else self._new_worker()
            self._workers.append(worker)
        return worker

    def map_calls(self, calls: Sequence[tuple[Callable[..., T], tuple[Any, ...]]]) -> Iterator[T]:
        """``function(*arguments)`` of each call, in order, computed by the workers that
        are up; a call no worker can do is done in this thread.

        Each worker holds :data:`CALLS_AHEAD` calls: while the caller stores one answer,
        the worker that sent it computes its next call, and so does a worker whose
        answer waits to be taken (given its next call only once its answer was taken,
        it stood idle while the caller stored the answer before)."""
        with self._lock:
            workers = [worker for worker in self._workers if worker.ready()]
        computing: dict[int, Worker] = {}
        sent = 0

        def send_next(worker: Worker) -> None:
            nonlocal sent
            if sent < len(calls):
                function, arguments = calls[sent]
                try:
                    worker.submit(function, *arguments)
                    computing[sent] = worker
                except WorkerError:
                    pass  # this call is done in the thread when its turn comes
                sent += 1

        for _ in range(CALLS_AHEAD):
            for worker in workers:
                send_next(worker)
        for index, (function, arguments) in enumerate(calls):
            doing = computing.pop(index, None)
            if doing is not None:
                try:
                    result: T = doing.result()
                except WorkerError as exc:
                    logger.debug("a worker failed on %s: %s", function.__name__, exc)
                else:
                    send_next(doing)
                    yield result
                    continue
            yield function(*arguments)

    @property
    def size(self) -> int:
        """How many workers there are (up or starting)."""
        with self._lock:
            return len(self._workers)

    def close(self) -> None:
        with self._lock:
            workers, self._workers, self._spare = [*self._workers, *self._spare], [], []
        for worker in workers:  # all asked first, so they end at the same time
            worker.stop()
        for worker in workers:
            worker.close()
            self.answered += worker.answered
        if workers:
            logger.debug("%d workers did %d pieces of work", len(workers), self.answered)


class LargePageParser:
    """The crawl's worker process for the parses of large pages (``threads.parse_worker``).

    A page of :data:`~rccrawler.cpus.LARGE_PARSE_BYTES` or more holds the GIL for
    milliseconds while its markup is scanned for depth and its tree read, and the crawl's
    other threads wait that long; in the worker the parse runs on another core, and the
    parsing thread waits for it without the GIL. The parsing threads share the worker:
    one that finds it busy, not up yet or gone parses the page itself, as without it.

    It costs a process: 15 to 28 MB more at the peak of a crawl of the SQLAlchemy or
    Python docs, for 0.87 and 0.92 of the time, and 9 MB idle on a site of small pages
    (docs/performance.md, "A worker for large pages"). So it is off unless asked for.

    Args:
        enabled: False starts no worker and parses nothing.
    """

    def __init__(self, *, enabled: bool = False) -> None:
        self.enabled = enabled
        self._lock = threading.Lock()
        self._worker: Worker | None = None
        self._busy = False
        self._closed = False
        self.parsed = 0
        """Pages the worker parsed."""

    def start(self) -> None:
        """Start the worker now: a fork of this process when :func:`can_fork` (call it
        before the crawl's threads start), else a fresh interpreter. :meth:`parse`
        starts it if this was not called."""
        with self._lock:
            self._start()

    def ready(self, wait: float = 0.0) -> bool:
        """Whether the worker takes pages now (started now if it was not), waiting up to
        ``wait`` seconds for it: for a caller that wants it up before the crawl."""
        with self._lock:
            worker = self._start()
            return worker is not None and worker.ready(wait)

    @property
    def pid(self) -> int | None:
        """The worker's process id (None while there is none)."""
        with self._lock:
            return self._worker.pid if self._worker is not None else None

    def _start(self) -> Worker | None:
        if self.enabled and self._worker is None and not self._closed:
            self._worker = Worker()
        return self._worker

    def parse(
        self, body: bytes, url: str, content_type: str | None, options: dict[str, Any]
    ) -> ParsedPage | None:
        """``parse_html(body, url, content_type, **options)`` done in the worker; None
        when the page is small, or the worker is off, busy, not up or failed on it (the
        caller parses it then)."""
        if not self.enabled or len(body) < LARGE_PARSE_BYTES:
            return None
        with self._lock:
            worker = self._start()
            if worker is None or self._busy or not worker.ready():
                return None
            self._busy = True
        parsed: ParsedPage | None = None
        try:
            parsed = worker.call(functools.partial(parse_html, **options), body, url, content_type)
        except WorkerError as exc:  # failed there (or gone): parsed here, as before
            logger.debug("%s: parsed in the thread (%s)", url, exc)
        finally:
            with self._lock:
                self._busy = False
                self.parsed += int(parsed is not None)
        return parsed

    def close(self) -> None:
        """End the worker (the parsing threads are done); no worker starts afterwards."""
        with self._lock:
            self._closed = True
            worker, self._worker = self._worker, None
        if worker is not None:
            worker.close()
            logger.debug("the large-page worker parsed %d pages", self.parsed)
