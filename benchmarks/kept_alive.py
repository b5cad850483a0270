"""A polite crawl of sites that close idle connections just before the next request.

    python benchmarks/kept_alive.py [--hosts 20] [--pages 12] [--keep-alive 0.5]
                                    [--one-way 0.05] [--runs 3]

A server closes a kept-alive connection once it has been idle for its keep-alive
timeout (Apache's default is 5 s). A polite crawler asks a host again a crawl delay
after its last request; when that delay is about the timeout, the request and the
server's close cross on the way, a round trip's window: the request finds the
connection closed, unanswered. Here every site is behind a loopback TCP proxy that
delays each byte ``--one-way`` seconds in each direction (closes too), the server
closes a connection idle for ``--keep-alive`` seconds, and the crawl delay is the
timeout plus the one-way delay: the middle of that window, where nearly every request
after a host's first meets a closed connection.

Each run is rccrawler with default settings (SQLite state) on ``--hosts`` sites of
``--pages`` pages (the start page links to the rest) and a robots.txt. Printed, medians
with their range: the wall time against the politeness limit (``pages × delay`` plus a
round trip, one answer after another), the requests the crawler sent and those the
server answered (the others met a closed connection), the connections it opened and
the pages crawled. To compare two versions, run it with ``PYTHONPATH=OTHER_CHECKOUT``
in turn: the crawler runs as ``python -m rccrawler`` with this interpreter.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import yaml
from common import spread  # (and tests/ on sys.path for support.*)
from support.loopback import serve_sites
from support.sites import generated_site
from support.tcpforward import TcpForwarder


class DelayingForwarder(TcpForwarder):
    """The tests' TCP forwarder, delivering every byte, and each end's close, ``one_way``
    seconds after it came: a link with a round trip of twice that. Counts the requests
    the crawler sent (each ``GET`` that came from a client)."""

    def __init__(self, target: tuple[str, int], one_way: float) -> None:
        self.one_way = one_way
        self.requests = 0
        self._count = threading.Lock()
        super().__init__(target)  # starts accepting

    def _pump(self, pair: tuple[socket.socket, socket.socket]) -> None:
        client, server = pair
        threading.Thread(target=self._delay, args=(server, client, False), daemon=True).start()
        self._delay(client, server, True)

    def _delay(self, source: socket.socket, target: socket.socket, asking: bool) -> None:
        """Read from ``source`` and write each piece to ``target`` once it is due; an
        end of stream becomes a shutdown of ``target``'s sending side, a reset a close
        (the forwarder's close() cuts what is left)."""
        source.settimeout(None)
        pieces: list[tuple[float, bytes]] = []
        ready = threading.Condition()

        def deliver() -> None:
            while True:
                with ready:
                    while not pieces:
                        ready.wait()
                    due, data = pieces.pop(0)
                time.sleep(max(0.0, due - time.monotonic()))
                try:
                    if not data:
                        target.shutdown(socket.SHUT_WR)
                        return
                    target.sendall(data)
                except OSError:
                    with contextlib.suppress(OSError):
                        source.close()
                    return

        threading.Thread(target=deliver, daemon=True).start()
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                data = b""
            if asking:
                with self._count:
                    self.requests += data.count(b"GET ")
            with ready:
                pieces.append((time.monotonic() + self.one_way, data))
                ready.notify()
            if not data:
                return


def crawl(folder: Path, hosts: list[str], port: int, delay: float) -> tuple[float, dict]:
    """rccrawler with default settings on ``hosts`` (all routed to ``port``): its wall
    time and report.json."""
    # No threads: key: the automatic pool.
    settings = {
        "sites": hosts, "state_dir": str(folder / "state"), "output_dir": str(folder / "output"),
        "crawl": {"crawl_delay_ms": round(delay * 1000), "max_downloads_at_time": 1,
                  "sitemaps": False, "resolve": {f"{h}:80": f"127.0.0.1:{port}" for h in hosts}},
    }  # fmt: skip
    folder.mkdir()
    config = folder / "settings.yaml"
    config.write_text(yaml.safe_dump(settings))
    started = time.monotonic()
    command = [sys.executable, "-m", "rccrawler", "--config", str(config), "--no-tui", "-q"]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, timeout=600)
    wall = time.monotonic() - started
    return wall, json.loads((folder / "output" / "report.json").read_text())


@contextlib.contextmanager
def served(
    args: argparse.Namespace, hosts: list[str]
) -> Iterator[tuple[DelayingForwarder, object]]:
    sites = {host: generated_site(host, args.pages, fanout=args.pages) for host in hosts}
    with serve_sites(sites, timeout=args.keep_alive) as server:  # type: ignore[arg-type]
        proxy = DelayingForwarder(("127.0.0.1", server.server_address[1]), args.one_way)
        try:
            yield proxy, server
        finally:
            proxy.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=20)
    parser.add_argument("--pages", type=int, default=12)
    parser.add_argument("--keep-alive", type=float, default=0.5, help="server's idle timeout s")
    parser.add_argument("--one-way", type=float, default=0.05, help="seconds each way")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    hosts = [f"k{n}.test" for n in range(args.hosts)]
    delay = args.keep_alive + args.one_way
    limit = args.pages * delay + 2 * args.one_way
    rows: dict[str, list[float]] = {"wall": [], "sent": [], "answered": [],
                                    "connections": [], "pages": []}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            with served(args, hosts) as (proxy, server):
                wall, report = crawl(Path(tmp) / f"run{run}", hosts, proxy.port, delay)
                sites = report["sites"].values()
                rows["wall"].append(wall)
                rows["answered"].append(len(server.hits))  # type: ignore[attr-defined]
                rows["sent"].append(proxy.requests)
                rows["connections"].append(proxy.accepted)
                rows["pages"].append(sum(s["pages_done"] for s in sites))
            print(f"run {run + 1}: " + ", ".join(f"{k} {v[-1]:.2f}" if k == "wall" else
                                                  f"{k} {v[-1]:.0f}" for k, v in rows.items()),
                  flush=True)  # fmt: skip

    print(f"\n{args.hosts} hosts x {args.pages} pages, server keep-alive {args.keep_alive} s, "
          f"{args.one_way * 1000:.0f} ms each way, crawl delay {delay:.2f} s, politeness "
          f"limit {limit:.2f} s; medians of {args.runs} runs (range)")  # fmt: skip
    print("| wall s | against the limit | requests sent | answered | connections | pages |")
    print("|---|---:|---|---|---|---|")
    counts = " | ".join(spread(rows[key], digits=0)
                        for key in ("sent", "answered", "connections", "pages"))  # fmt: skip
    against = statistics.median(rows["wall"]) / limit
    print(f"| {spread(rows['wall'])} | {against:.2f}× | {counts} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
