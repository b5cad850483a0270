"""What one HTTP exchange costs in CPU, layer by layer, on one of crawl_bench's sites.

    .venv/bin/python benchmarks/fetch_cost.py [postgres] [--runs 5]

Serves the site with nginx as crawl_bench.py does and GETs every HTML page of it, one
after another on one kept-alive connection, through each layer of the stack rccrawler
fetches with: ``Fetcher.download`` (what a DownloadingThread calls), urllib3's pool,
urllib3's connection, ``http.client``, and a bare socket (a floor no client reaches: no
header checks, no decoding, no limits). Each figure is the thread CPU a page of the
fastest of ``--runs`` passes, so a busy machine shows less. Issue 14 asks where the
per-page CPU of a crawl of small pages goes; this is its HTTP part.
"""

from __future__ import annotations

import argparse
import http.client
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import urllib3
import urllib3.connection
from crawl_bench import SITES, Nginx, warm_page_cache

from rccrawler.config import CrawlSettings
from rccrawler.web.fetch import Fetcher

HEADERS = {"User-Agent": "rccrawler-bench/1", "Accept": "text/html", "Accept-Encoding": "gzip"}


def page_paths(root: Path) -> list[str]:
    return sorted(f"/{path.relative_to(root)}" for path in root.rglob("*.html"))


def fastest(runs: int, paths: list[str], get: Callable[[str], object]) -> float:
    """Thread CPU seconds a page of the fastest of ``runs`` passes (after a warm-up)."""
    for path in paths[:50]:
        get(path)
    best = float("inf")
    for _ in range(runs):
        started = time.thread_time()
        for path in paths:
            get(path)
        best = min(best, time.thread_time() - started)
    return best / len(paths)


def bare_socket(port: int) -> Callable[[str], object]:
    sock = socket.create_connection(("127.0.0.1", port))

    def get(path: str) -> object:
        request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
        sock.sendall(request.encode())
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(body) < length:
            body += sock.recv(65536)
        return body

    return get


def layers(port: int) -> dict[str, Callable[[str], object]]:
    base = f"http://127.0.0.1:{port}"
    fetcher = Fetcher(CrawlSettings(cookies=False))
    pool = urllib3.HTTPConnectionPool("127.0.0.1", port, maxsize=1)
    conn = urllib3.connection.HTTPConnection("127.0.0.1", port)
    plain = http.client.HTTPConnection("127.0.0.1", port)

    def via_pool(path: str) -> object:
        response = pool.urlopen("GET", path, headers=HEADERS, preload_content=False,
                                retries=False, redirect=False)  # fmt: skip
        body = response.read()
        response.release_conn()
        return body

    def via_connection(path: str) -> object:
        conn.request("GET", path, headers=HEADERS)
        return conn.getresponse().read()

    def via_http_client(path: str) -> object:
        plain.request("GET", path, headers=HEADERS)
        return plain.getresponse().read()

    return {
        "Fetcher.download": lambda path: fetcher.download(base + path, referer=base + "/"),
        "urllib3 pool.urlopen": via_pool,
        "urllib3 HTTPConnection": via_connection,
        "http.client": via_http_client,
        "bare socket (floor)": bare_socket(port),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site", nargs="?", default="postgres", choices=sorted(SITES))
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    site = SITES[args.site]
    paths = page_paths(site.root)
    if not paths:
        sys.exit(f"fetch_cost: no pages under {site.root} (apt-get install {site.package})")
    warm_page_cache(site.root)
    with (
        tempfile.TemporaryDirectory(prefix="fetch_cost-") as work,
        Nginx([site], Path(work)) as nginx,
    ):
        port = nginx.ports[site.name]
        print(f"{site.title}: {len(paths)} pages, fastest of {args.runs} passes")
        print("| layer | CPU µs a page |")
        print("|---|---:|")
        for name, get in layers(port).items():
            print(f"| {name} | {1e6 * fastest(args.runs, paths, get):.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
