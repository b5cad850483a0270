"""What a page of one worker's crawl costs the PostgreSQL server, against SQLite storage.

    python benchmarks/pg_cost.py [--site postgres] [--rounds 3] [--top 12] [--no-count]
                                  [--resumed]

Issue 41: the PostgreSQL docs served by nginx on loopback (as ``crawl_bench.py`` serves
them), one worker, 8 downloading threads, no delay, crawled with its state in SQLite
and in PostgreSQL (127.0.0.1:5432, database test) in turn, ``--rounds`` pairs. Printed,
medians with their range:

* the wall time and the crawler's CPU of each storage, and PostgreSQL's wall time over
  SQLite's, pair by pair;
* the server's CPU a page, read from ``/proc`` two ways: the whole server (utime + stime
  of the postmaster and every process under it, plus the postmaster's cutime + cstime
  for the backends that exited, before and after the crawl), which counts whatever else
  the shared server did meanwhile; and the crawl's own backends only (those whose
  ``application_name`` is the crawl's, sampled every 10 ms while they live);
* then one more crawl on PostgreSQL through a proxy that reads the wire protocol: the
  statements a page (each Execute or simple Query) and the round trips a page (each
  time a connection's client speaks again after the server answered), over all the
  worker's connections, and the statements a page of the most frequent kinds. The
  proxy's own latency slows that crawl down, so it is not timed;
* with ``--resumed``, the same counts for a crawl stopped at half the site
  (``crawl.max_pages``) and resumed to its end, counted over the resumed run: what a
  page costs once its host has bodies stored, as after a resume or a host another
  worker held.

To compare two versions, run it with ``PYTHONPATH=OTHER_CHECKOUT`` in turn: the crawls
run ``python -m rccrawler`` with this interpreter and inherit it.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import struct
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from common import spread
from crawl_bench import SITES, Nginx, crawl_ours, warm_page_cache

from rccrawler.data.storage import discard_storage
from rccrawler.manager import load_settings

PG_HOST, PG_PORT = "127.0.0.1", 5432
PG_URL = f"postgresql://{PG_HOST}:{PG_PORT}/test"
TICKS = os.sysconf("SC_CLK_TCK")


def proc_stat(pid: int) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name (field 3 is index 0)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2 :].split()


def cpu_s(pid: int, *, children: bool = False) -> float:
    """utime + stime of a process (and cutime + cstime of its reaped children)."""
    fields = proc_stat(pid)
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / TICKS


def run_time_ns(pid: int) -> int:
    """Nanoseconds a process has run on a CPU (/proc/<pid>/schedstat), 0 once it is gone."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def postmaster_pid() -> int:
    """The server's postmaster: the parent of a backend of ours."""
    with psycopg.connect(PG_URL) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    return int(proc_stat(int(row[0]))[1])


def server_cpu_s(postmaster: int) -> float:
    """The whole server's CPU so far: the postmaster, its live children, its reaped ones."""
    total = cpu_s(postmaster, children=True)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = proc_stat(int(entry.name))
                if int(fields[1]) == postmaster:
                    total += (int(fields[11]) + int(fields[12])) / TICKS
            except (OSError, ValueError, IndexError):
                continue  # exited meanwhile: counted in the postmaster's cutime
    return total


class BackendSampler:
    """The CPU of the backends serving connections named ``application``: each one's
    last reading while it lived (read every 10 ms; their pids every 0.1 s)."""

    def __init__(self, application: str) -> None:
        self.application = application
        self.seen: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> BackendSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def total_s(self) -> float:
        return sum(self.seen.values())

    def _run(self) -> None:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            looked = 0.0
            while not self._stop.wait(0.01):
                if time.monotonic() - looked >= 0.1:
                    looked = time.monotonic()
                    rows = conn.execute(
                        "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
                        (self.application,),
                    ).fetchall()
                    for (pid,) in rows:
                        self.seen.setdefault(int(pid), 0.0)
                for pid in self.seen:
                    try:
                        self.seen[pid] = cpu_s(pid)
                    except (OSError, ValueError, IndexError):
                        continue  # gone: its last reading stands


class WireCounter:
    """A loopback proxy to the server that counts, over all the connections it carries,
    the statements (Execute and Query messages, by text) and the round trips."""

    def __init__(self) -> None:
        self.statements: Counter[str] = Counter()
        self.seconds: Counter[str] = Counter()
        """CPU seconds of the server's backend for each round trip (its run time in
        /proc/<pid>/schedstat, in ns, read as the next one starts), shared among the
        round trip's statements."""
        self.round_trips = 0
        self.backend_s = 0.0
        """CPU seconds of the backends, over all their round trips."""
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._threads: list[threading.Thread] = []
        self._closed = False

    @property
    def url(self) -> str:
        # No TLS, so the proxy reads the protocol (the shared server has none anyway).
        return f"postgresql://127.0.0.1:{self.port}/test?sslmode=disable&gssencmode=disable"

    def __enter__(self) -> WireCounter:
        self._start(self._accept)
        return self

    def __exit__(self, *exc: object) -> None:
        self._closed = True
        self._listener.close()

    def _start(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        thread.start()
        self._threads.append(thread)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection((PG_HOST, PG_PORT))
            turn = Turn()
            self._start(self._client_to_server, client, server, turn)
            self._start(self._server_to_client, server, client, turn)

    def _server_to_client(self, server: socket.socket, client: socket.socket, turn: Turn) -> None:
        buffer = bytearray()
        with contextlib_closing(server, client):
            while data := server.recv(65536):
                turn.server_spoke = True
                if not turn.backend:  # BackendKeyData: the backend's pid
                    buffer += data
                    while len(buffer) >= 5 and not turn.backend:
                        (length,) = struct.unpack("!I", buffer[1:5])
                        if len(buffer) < 1 + length:
                            break
                        if buffer[:1] == b"K":
                            turn.backend = struct.unpack("!I", buffer[5:9])[0]
                            turn.cpu_ns = run_time_ns(turn.backend)
                        del buffer[: 1 + length]
                client.sendall(data)

    def _client_to_server(self, client: socket.socket, server: socket.socket, turn: Turn) -> None:
        buffer = bytearray()
        started = False
        prepared: dict[bytes, str] = {}
        portals: dict[bytes, str] = {}
        with contextlib_closing(client, server):
            while data := client.recv(65536):
                if turn.server_spoke:
                    self._time(turn)
                    turn.server_spoke = False
                    with self._lock:
                        self.round_trips += 1
                server.sendall(data)
                buffer += data
                while True:
                    if not started:  # SSLRequest or StartupMessage: no type byte
                        if len(buffer) < 8:
                            break
                        (length,) = struct.unpack("!I", buffer[:4])
                        if len(buffer) < length:
                            break
                        started = struct.unpack("!I", buffer[4:8])[0] == 196608
                        del buffer[:length]
                        continue
                    if len(buffer) < 5:
                        break
                    kind = buffer[:1]
                    (length,) = struct.unpack("!I", buffer[1:5])
                    if len(buffer) < 1 + length:
                        break
                    body = bytes(buffer[5 : 1 + length])
                    del buffer[: 1 + length]
                    if kind == b"P":
                        name, text, _rest = body.split(b"\0", 2)
                        prepared[name] = text.decode(errors="replace")
                    elif kind == b"B":
                        portal, name, _rest = body.split(b"\0", 2)
                        portals[portal] = prepared.get(name, "?")
                    elif kind == b"E":
                        turn.texts.append(portals.get(body.split(b"\0", 1)[0], "?"))
                    elif kind == b"Q":
                        turn.texts.append(body.rstrip(b"\0").decode(errors="replace"))
            self._time(turn)

    def _time(self, turn: Turn) -> None:
        """Count the statements of the round trip that just ended, with its CPU."""
        texts, turn.texts = turn.texts, []
        used = 0.0
        if turn.backend:
            now = run_time_ns(turn.backend) or turn.cpu_ns
            used, turn.cpu_ns = (now - turn.cpu_ns) / 1e9, now
        with self._lock:
            self.backend_s += used
            for text in texts:
                key = " ".join(text.split())
                self.statements[key] += 1
                self.seconds[key] += used / len(texts)


@dataclass(slots=True)
class Turn:
    """Who spoke last on one proxied connection, and the round trip under way."""

    server_spoke: bool = True
    backend: int = 0
    """The pid of the server's backend (0 until the server says)."""
    cpu_ns: int = 0
    """Its run time when its last round trip started."""
    texts: list[str] = field(default_factory=list)


@contextmanager
def contextlib_closing(*sockets: socket.socket) -> Iterator[None]:
    """Both ends of a proxied connection close when either does."""
    try:
        yield
    except OSError:
        pass
    finally:
        for sock in sockets:
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def crawl(
    url: str, folder: Path, storage: str | None, application: str
) -> tuple[float, float, int]:
    """One crawl: (wall s, the crawler's CPU s, pages); its PostgreSQL schema dropped."""
    os.environ["PGAPPNAME"] = application
    try:
        measure, pages, _urls, note = crawl_ours(url, folder, 600, downloading="8", storage=storage)
    finally:
        if storage is not None:
            discard_storage(load_settings(folder / "settings.yaml")[1])
    if measure.exit_code != 0:
        sys.exit(f"pg_cost: the crawl failed ({note}); see {folder / 'crawler.out'}")
    return measure.seconds, measure.cpu_s, pages


def kind_of(text: str) -> str:
    """A statement's text with its lists of parameters folded (``IN ($1, $2, …)``)."""
    return PARAMETER_LIST.sub("$…", text)


PARAMETER_LIST = re.compile(r"\$\d+(?:\s*,\s*\$\d+)+")


def short(text: str, width: int = 110) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", default="postgres", choices=sorted(SITES))
    parser.add_argument("--rounds", type=int, default=3, help="timed pairs (0: only count)")
    parser.add_argument("--top", type=int, default=12, help="kinds of statement listed")
    parser.add_argument("--no-count", action="store_true", help="no crawl through the proxy")
    parser.add_argument("--resumed", action="store_true",
                        help="count a resumed crawl's statements too")  # fmt: skip
    args = parser.parse_args()
    site = SITES[args.site]
    warm_page_cache(site.root)
    with tempfile.TemporaryDirectory() as tmp, Nginx([site], Path(tmp)) as nginx:
        url = nginx.url(site)
        if args.rounds:
            timed_pairs(url, Path(tmp), args.rounds, site.title)
        if args.no_count:
            return 0
        with WireCounter() as wire:
            folder = Path(tmp) / f"counted-{uuid.uuid4().hex[:8]}"
            folder.mkdir()
            _wall, _cpu, pages = crawl(url, folder, wire.url, "rccrawler-bench-counted")
        print_counts(wire, pages, args.top)
        if args.resumed:
            folder = Path(tmp) / f"resumed-{uuid.uuid4().hex[:8]}"
            folder.mkdir()
            resumed, pages = counted_resume(url, folder, pages)
            print(f"\nresumed at half the site ({pages} pages in the resumed run):")
            print_counts(resumed, pages, args.top)
    return 0


def counted_resume(url: str, folder: Path, pages: int) -> tuple[WireCounter, int]:
    """A crawl stopped at half the site's ``pages`` by ``crawl.max_pages``, then resumed
    to its end, the resumed run through a WireCounter: its counter, and the pages the
    resumed run fetched."""
    done: list[int] = []
    try:
        for limit in (pages // 2, 0):
            with WireCounter() as wire:
                measure, pages_done, _urls, note = crawl_ours(
                    url, folder, 600, downloading="8", storage=wire.url, fresh=not done,
                    max_pages=limit,
                )  # fmt: skip
            if measure.exit_code != 0:
                sys.exit(f"pg_cost: the crawl failed ({note}); see {folder / 'crawler.out'}")
            done.append(pages_done)
        return wire, done[1] - done[0]
    finally:
        if (folder / "settings.yaml").exists():
            discard_storage(load_settings(folder / "settings.yaml")[1])


def timed_pairs(url: str, tmp: Path, rounds: int, title: str) -> None:
    """Crawl with SQLite and PostgreSQL storage in turn, ``rounds`` times; print medians."""
    postmaster = postmaster_pid()
    walls: dict[str, list[float]] = {"sqlite": [], "postgres": []}
    cpus: dict[str, list[float]] = {"sqlite": [], "postgres": []}
    ratios: list[float] = []
    whole: list[float] = []
    own: list[float] = []
    pages_seen: set[int] = set()
    for round_ in range(rounds):
        for storage in ("sqlite", "postgres"):
            folder = tmp / f"{storage}-{round_}-{uuid.uuid4().hex[:8]}"
            folder.mkdir()
            application = f"rccrawler-bench-{folder.name}"
            server_before = server_cpu_s(postmaster)
            with BackendSampler(application) as sampler:
                wall, cpu, pages = crawl(
                    url, folder, PG_URL if storage == "postgres" else None, application
                )
            server = server_cpu_s(postmaster) - server_before
            walls[storage].append(wall)
            cpus[storage].append(cpu)
            pages_seen.add(pages)
            line = f"round {round_ + 1} {storage}: {wall:.2f} s, crawler CPU {cpu:.2f} s"
            if storage == "postgres":
                whole.append(server / pages)
                own.append(sampler.total_s / pages)
                ratios.append(wall / walls["sqlite"][-1])
                line += (
                    f", server CPU {server:.2f} s ({1000 * server / pages:.2f} ms a page), "
                    f"its backends {sampler.total_s:.2f} s"
                )
            print(f"{line}, {pages} pages", flush=True)
    load = " ".join(f"{n:.1f}" for n in os.getloadavg())
    print(
        f"\n{title}: {'/'.join(map(str, sorted(pages_seen)))} pages, one worker, 8 downloading "
        f"threads, no delay; medians of {rounds} interleaved pairs (range); load average "
        f"{load} at the end"
    )
    print("| storage | wall s | crawler CPU s | PostgreSQL / SQLite wall |")
    print("|---|---|---|---|")
    print(f"| SQLite | {spread(walls['sqlite'])} | {spread(cpus['sqlite'])} | |")
    print(f"| PostgreSQL | {spread(walls['postgres'])} | {spread(cpus['postgres'])} | "
          f"{spread(ratios)}× |")  # fmt: skip
    print(f"\nserver CPU a page: whole server {spread(whole, 1000)} ms; "
          f"the crawl's backends {spread(own, 1000)} ms")  # fmt: skip


def print_counts(wire: WireCounter, pages: int, top: int) -> None:
    """The statements and round trips a page, and the most frequent kinds."""
    statements = sum(wire.statements.values())
    print(
        f"\ncounted at the connection ({pages} pages): {statements / pages:.2f} statements a "
        f"page, {wire.round_trips / pages:.2f} round trips a page, "
        f"{len(wire.statements)} distinct statement texts; the backends' CPU "
        f"{1000 * wire.backend_s / pages:.3f} ms a page (schedstat, their round trips only)"
    )
    print("The kinds that cost the server most (lists of parameters folded): the backend's "
          "CPU of their round trips, shared among the statements of each:")  # fmt: skip
    print("| statements a page | server CPU ms a page | statement |")
    print("|---:|---:|---|")
    kinds: Counter[str] = Counter()
    seconds: Counter[str] = Counter()
    for text, count in wire.statements.items():
        kinds[kind_of(text)] += count
        seconds[kind_of(text)] += wire.seconds[text]
    for text, _seconds in seconds.most_common(top):
        count = kinds[text]
        print(f"| {count / pages:.3f} | {1000 * seconds[text] / pages:.3f} | `{short(text)}` |")


if __name__ == "__main__":
    sys.exit(main())
