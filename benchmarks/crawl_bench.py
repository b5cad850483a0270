"""rccrawler vs Scrapy vs wget on three real documentation sites served by nginx on loopback.

    python benchmarks/crawl_bench.py [--runs 5] [--sites python,postgres,sqlalchemy] [--quick]

Issues 5 and 14 judge the crawler against Scrapy and wget, side by side in one run.
This script installs what it needs if missing (the Debian packages python3.11-doc,
postgresql-doc-15, python-sqlalchemy-doc, nginx and wget; Scrapy from the project's
`bench` extra), byte-compiles the Python packages as `pip install` does, serves each
documentation site from its own nginx port on 127.0.0.1, and crawls it alternately with
rccrawler, a Scrapy spider doing the same work (benchmarks/scrapy_spider.py) and
`wget -r`: breadth-first, same host, `<a href>` links, robots.txt obeyed, no delay,
8 requests in flight. Each crawler is a child process; its wall time, CPU time and peak
RSS are its own. It prints a table per site, the page sets each crawler found and how
they differ, and a markdown summary with the medians, their spread (min–max) and the
ratios of the medians.
"""

from __future__ import annotations

import argparse
import csv
import functools
import importlib.util
import json
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from common import children_private_kb, vm_hwm_kb, write_settings

REPO = Path(__file__).resolve().parents[1]
SPIDER = Path(__file__).resolve().with_name("scrapy_spider.py")

CRAWLERS = ("ours", "scrapy", "wget")
LABELS = {"ours": "rccrawler", "scrapy": "Scrapy", "wget": "wget"}
TOOL_PACKAGES = ("nginx", "wget")
# nginx's mime.types maps these to text/html or application/xhtml+xml.
HTML_SUFFIXES = (".html", ".htm", ".shtml", ".xhtml")
# Served when a package ships no robots.txt (none of the three does): allows everything.
PERMISSIVE_ROBOTS = "User-agent: *\nAllow: /\n"
DEFAULT_PORTS = {"http": 80, "https": 443}
EXAMPLES = 5


@dataclass(frozen=True)
class Site:
    """A documentation site from a Debian package, served as static files."""

    name: str
    package: str
    root: Path
    title: str


SITES = {
    "python": Site(
        "python", "python3.11-doc", Path("/usr/share/doc/python3.11/html"), "Python 3.11 docs"
    ),
    "postgres": Site(
        "postgres",
        "postgresql-doc-15",
        Path("/usr/share/doc/postgresql-doc-15/html"),
        "PostgreSQL 15 docs",
    ),
    # A Sphinx site other than Python's, with its own theme (zzzeeks) and page sizes.
    "sqlalchemy": Site(
        "sqlalchemy",
        "python-sqlalchemy-doc",
        Path("/usr/share/doc/python-sqlalchemy-doc/html"),
        "SQLAlchemy 1.4 docs",
    ),
}


@dataclass
class Measure:
    """What the kernel says about one finished child process."""

    exit_code: int
    seconds: float
    cpu_s: float
    rss_mb: float


@dataclass
class Run:
    """One crawl of one site by one crawler."""

    site: str
    crawler: str
    index: int
    measure: Measure
    pages: int = 0
    requests: int = 0
    urls: set[str] = field(default_factory=set)
    note: str = ""
    ok: bool = True

    @property
    def pages_per_s(self) -> float:
        return self.pages / self.measure.seconds if self.measure.seconds > 0 else 0.0


def log(message: str) -> None:
    print(message, flush=True)


# --- set-up ---------------------------------------------------------------------------


def missing_packages(packages: Iterable[str]) -> list[str]:
    """Debian packages of the list that are not installed."""
    missing = []
    for package in packages:
        query = subprocess.run(
            ["dpkg-query", "-W", "-f=${db:Status-Status}", package],
            capture_output=True,
            text=True,
            check=False,
        )
        if query.returncode != 0 or query.stdout.strip() != "installed":
            missing.append(package)
    return missing


def ensure_packages(packages: Sequence[str]) -> None:
    """apt-get install the missing ones; the doc packages are the sites, nginx serves them."""
    missing = missing_packages(packages)
    if not missing:
        return
    if os.geteuid() != 0:
        sys.exit(f"crawl_bench: run as root, or first: sudo apt-get install -y {' '.join(missing)}")
    log(f"installing Debian packages: {' '.join(missing)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-q"], check=True, env=env, stdout=subprocess.DEVNULL)
    subprocess.run(
        ["apt-get", "install", "-y", "-q", *missing],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
    )


def ensure_python_packages() -> None:
    """Scrapy lives in the `bench` extra, never in the runtime dependencies."""
    if not all(importlib.util.find_spec(name) for name in ("scrapy", "rccrawler", "plugins")):
        log(f"installing rccrawler with the bench extra into {sys.prefix}")
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "-e", f"{REPO}[bench]"], check=True
        )
    # With PYTHONDONTWRITEBYTECODE set (as in some containers) nothing is ever cached and
    # every crawl of every Python crawler compiles its sources again (~70 ms for ours):
    # compile once, as pip does on install, so start-up is what a user's is.
    folders = {str(REPO / "rccrawler"), str(REPO / "plugins")}
    folders |= {p for p in sys.path if p.endswith("-packages") and os.access(p, os.W_OK)}
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "-j", "0", *sorted(folders)],
        check=False,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def rccrawler_command() -> list[str]:
    """The console script next to this interpreter, as a user runs it."""
    script = Path(sys.executable).with_name("rccrawler")
    return [str(script)] if script.exists() else [sys.executable, "-m", "rccrawler"]


def tool_versions() -> dict[str, str]:
    def first_line(cmd: list[str]) -> str:
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        return (out.stdout or out.stderr).strip().splitlines()[0]

    def dist(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "?"

    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(REPO), "diff", "--quiet", "HEAD", "--", "rccrawler", "plugins"],
        capture_output=True,
        check=False,
    ).returncode
    return {
        "rccrawler": f"{dist('rccrawler')} ({commit or '?'}{' + local changes' if dirty else ''})",
        "Scrapy": dist("scrapy"),
        "wget": first_line(["wget", "--version"]).split()[2],
        "nginx": first_line(["nginx", "-v"]).split("/")[-1],
        "Python": platform.python_version(),
    }


def machine() -> str:
    """One line for docs/performance.md: CPU, cores, memory, OS."""
    cpu = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem_kb = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kb = int(line.split()[1])
    debian = Path("/etc/debian_version")
    osname = f"Debian {debian.read_text().strip()}" if debian.exists() else platform.system()
    return (
        f"{cpu}, {os.cpu_count()} cores, {mem_kb / 1024 / 1024:.0f} GB RAM, {osname}, "
        f"Linux {platform.release()}"
    )


def warm_page_cache(root: Path) -> int:
    """Read every file once so that no crawler pays for the first disk reads."""
    total = 0
    for folder, _dirs, files in os.walk(root):
        for name in files:
            try:
                with open(os.path.join(folder, name), "rb") as handle:
                    while chunk := handle.read(1 << 20):
                        total += len(chunk)
            except OSError:
                pass
    return total


# --- nginx ----------------------------------------------------------------------------

NGINX_CONF = """\
# Written by benchmarks/crawl_bench.py: static documentation sites, one port each.
daemon off;
master_process on;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{
    worker_connections 1024;
}}
http {{
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    sendfile on;
    tcp_nopush on;
    keepalive_timeout 65;
    keepalive_requests 100000;
    log_format bench '$status $body_bytes_sent $request_uri';
    client_body_temp_path {tmp}/client_body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
{servers}}}
"""

NGINX_SERVER = """\
    server {{
        listen 127.0.0.1:{port};
        root {root};
        index index.html;
        access_log {tmp}/{name}.access.log bench;
{robots}    }}
"""

NGINX_ROBOTS = """\
        location = /robots.txt {{
            default_type text/plain;
            return 200 "{body}";
        }}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Nginx:
    """nginx in the foreground as our child, with its own config, pid, logs and temp paths."""

    def __init__(self, sites: Sequence[Site], folder: Path) -> None:
        self.folder = folder
        self.ports = {site.name: free_port() for site in sites}
        self.synthetic_robots = [s.name for s in sites if not (s.root / "robots.txt").exists()]
        servers = ""
        for site in sites:
            robots = ""
            if site.name in self.synthetic_robots:
                robots = NGINX_ROBOTS.format(body=PERMISSIVE_ROBOTS.replace("\n", "\\n"))
            servers += NGINX_SERVER.format(
                port=self.ports[site.name],
                root=site.root,
                name=site.name,
                tmp=folder,
                robots=robots,
            )
        self.config = folder / "nginx.conf"
        self.config.write_text(NGINX_CONF.format(tmp=folder, servers=servers))
        self.process: subprocess.Popen[bytes] | None = None

    def url(self, site: Site) -> str:
        return f"http://127.0.0.1:{self.ports[site.name]}/"

    def requests_served(self, site: Site) -> int:
        path = self.folder / f"{site.name}.access.log"
        return sum(1 for _ in path.open("rb")) if path.exists() else 0

    def __enter__(self) -> Nginx:
        cmd = ["nginx", "-c", str(self.config), "-p", f"{self.folder}/"]
        cmd += ["-e", str(self.folder / "error.log")]
        output = (self.folder / "nginx.out").open("wb")
        self.process = subprocess.Popen(cmd, stdout=output, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 15
        for port in self.ports.values():
            while True:
                if self.process.poll() is not None:
                    errors = (self.folder / "error.log").read_text(errors="replace")
                    sys.exit(f"crawl_bench: nginx exited:\n{errors}")
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        sys.exit(f"crawl_bench: nginx is not listening on port {port}")
                    time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


# --- measuring a child ----------------------------------------------------------------


def run_measured(cmd: Sequence[str], cwd: Path, output: Path, timeout: float) -> Measure:
    """Run cmd to its end; wall time, and the child's own CPU time and peak RSS from wait4.

    Linux carries the parent's peak RSS into a vfork+exec'd child's ru_maxrss, so a child
    smaller than this script would be reported at this script's size. When ru_maxrss does
    not exceed our own peak, the VmHWM sampled from /proc while the child ran is used.

    A crawler that forks is charged its forks' private memory too, the most sampled while
    it ran: a fork's RSS counts the pages it shares again, and ru_maxrss counts the
    largest process only.
    """
    floor_kb = vm_hwm_kb("self")
    done = threading.Event()
    sampled = [0]
    forks = [0]
    with output.open("wb") as out:
        started = time.perf_counter()
        proc = subprocess.Popen(
            list(cmd), cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
        )

        def sample() -> None:
            while not done.wait(0.02):
                sampled[0] = max(sampled[0], vm_hwm_kb(proc.pid))
                forks[0] = max(forks[0], children_private_kb(proc.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        killer = threading.Timer(timeout, proc.kill)
        killer.start()
        _pid, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - started
        killer.cancel()
        done.set()
        sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    rss_kb = usage.ru_maxrss
    if rss_kb <= floor_kb + 2048 and sampled[0]:
        rss_kb = sampled[0]
    rss_kb += forks[0]
    return Measure(
        exit_code=proc.returncode,
        seconds=seconds,
        cpu_s=usage.ru_utime + usage.ru_stime,
        rss_mb=rss_kb / 1024,
    )


def tail(path: Path, lines: int = 8) -> str:
    text = path.read_text(errors="replace").splitlines() if path.exists() else []
    return "\n".join(f"      {line}" for line in text[-lines:])


# --- the three crawlers ---------------------------------------------------------------


def crawl_ours(
    url: str,
    folder: Path,
    timeout: float,
    *,
    all_cores: bool = False,
    parse_worker: bool = False,
    downloading: str | None = None,
    storage: str | None = None,
    fresh: bool = True,
    **crawl: Any,
) -> tuple[Measure, int, set[str], str]:
    """rccrawler with the settings of the issue (``threads.one_core: false``,
    ``threads.parse_worker: true``, another ``threads.downloading``, a ``storage`` URL or
    other ``crawl`` keys if asked), ``--fresh`` unless resuming; pages from report.json,
    URLs from nodes.csv."""
    threads: dict[str, bool | int | str] = {}
    if downloading is not None:
        threads["downloading"] = downloading if downloading == "auto" else int(downloading)
    if all_cores:
        threads["one_core"] = False
    if parse_worker:
        threads["parse_worker"] = True
    config = write_settings(
        folder, [url], threads=threads or None, storage=storage,
        **{"obey_robots": True, "max_depth": 1000, **crawl},
    )  # fmt: skip
    cmd = [*rccrawler_command(), "--config", str(config), "--no-tui", "-q"]
    cmd += ["--fresh"] if fresh else []
    measure = run_measured(cmd, folder, folder / "crawler.out", timeout)
    report_path = folder / "output" / "report.json"
    if measure.exit_code != 0 or not report_path.exists():
        return measure, 0, set(), "failed"
    report = json.loads(report_path.read_text())
    (site,) = report["sites"].values()
    urls: set[str] = set()
    duplicates = 0
    for nodes in (folder / "output").glob("*.nodes.csv"):
        with nodes.open(newline="") as handle:
            for row in csv.DictReader(handle):
                urls.add(row["url"])
                duplicates += bool(row["duplicate_of"])
    note = f"{len(urls)} nodes, {duplicates} byte-identical duplicates"
    return measure, int(site["pages_done"]), urls, note


def crawl_scrapy(url: str, folder: Path, timeout: float) -> tuple[Measure, int, set[str], str]:
    """benchmarks/scrapy_spider.py in its own interpreter; it writes the HTML URLs it got."""
    pages_file = folder / "pages.txt"
    cmd = [sys.executable, str(SPIDER), url, str(pages_file)]
    measure = run_measured(cmd, folder, folder / "crawler.out", timeout)
    if measure.exit_code != 0 or not pages_file.exists():
        return measure, 0, set(), "failed"
    found = pages_file.read_text().split()
    return measure, len(found), set(found), ""


WGET_FETCHED = re.compile(r"URL:\s*(\S+)\s+\[")


def crawl_wget(url: str, folder: Path, timeout: float) -> tuple[Measure, int, set[str], str]:
    """wget -r: single-threaded; HTML pages told apart by name, as nginx types them."""
    cmd = ["wget", "-r", "-l", "inf", "--no-parent", "-e", "robots=on", "-nv", "--delete-after"]
    cmd += ["-P", str(folder / "files"), url]
    output = folder / "crawler.out"
    measure = run_measured(cmd, folder, output, timeout)
    # 8 = the server answered some request with an error (the sites have broken links).
    if measure.exit_code not in (0, 8):
        return measure, 0, set(), "failed"
    fetched = WGET_FETCHED.findall(output.read_text(errors="replace"))
    html = {u for u in fetched if urlsplit(u).path.endswith(("/", *HTML_SUFFIXES))}
    note = f"{len(fetched)} files fetched"
    return measure, len(html), html, note


CRAWL = {"ours": crawl_ours, "scrapy": crawl_scrapy, "wget": crawl_wget}


# --- page sets ------------------------------------------------------------------------


def comparable(url: str) -> str:
    """A light normalization for comparing page sets: no fragment, lowercase scheme and
    host, no default port, `/` for an empty path, sorted non-empty query parameters."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    port = parts.port
    netloc = host if port in (None, DEFAULT_PORTS.get(scheme)) else f"{host}:{port}"
    query = urlencode(sorted(parse_qsl(parts.query)))
    return urlunsplit((scheme, netloc, parts.path or "/", query, ""))


def show_difference(label: str, urls: set[str]) -> None:
    log(f"    only {label}: {len(urls)}")
    for url in sorted(urls)[:EXAMPLES]:
        log(f"      {url}")


def compare_page_sets(site: Site, runs: list[Run]) -> bool:
    """Print the page sets of the first good run of each crawler; True if ours = Scrapy's."""
    first: dict[str, Run] = {}
    for run in runs:
        if run.ok and run.crawler not in first:
            first[run.crawler] = run
    sets = {name: {comparable(u) for u in run.urls} for name, run in first.items()}
    log(f"  page sets ({site.name}, first good run of each):")
    for name, run in first.items():
        extra = f" ({run.note})" if run.note else ""
        log(f"    {LABELS[name]}: {len(sets[name])} URLs, {run.pages} pages counted{extra}")
    same = False
    if "ours" in sets and "scrapy" in sets:
        ours, scrapy = sets["ours"], sets["scrapy"]
        same = ours == scrapy
        log(f"    rccrawler nodes = Scrapy pages: {'yes' if same else 'NO'}")
        if not same:
            show_difference("rccrawler", ours - scrapy)
            show_difference("Scrapy", scrapy - ours)
    if "ours" in sets and "wget" in sets:
        ours, wget = sets["ours"], sets["wget"]
        log(f"    rccrawler nodes = wget HTML pages: {'yes' if ours == wget else 'NO'}")
        if ours != wget:
            show_difference("rccrawler", ours - wget)
            show_difference("wget", wget - ours)
    for name in first:
        counts = {run.pages for run in runs if run.ok and run.crawler == name}
        if len(counts) > 1:
            log(f"    note: {LABELS[name]} counted different pages across runs: {sorted(counts)}")
    return same


# --- tables ---------------------------------------------------------------------------


def median(values: Iterable[float]) -> float:
    values = list(values)
    return statistics.median(values) if values else 0.0


@dataclass
class Summary:
    """The medians of one crawler on one site."""

    pages: float
    seconds: float
    pages_per_s: float
    cpu_s: float
    rss_mb: float
    runs: int
    pages_per_s_range: tuple[float, float] = (0.0, 0.0)
    """The slowest and the fastest run: the spread the median hides."""
    rss_mb_range: tuple[float, float] = (0.0, 0.0)


def summarize(runs: list[Run]) -> dict[str, Summary]:
    out = {}
    for name in CRAWLERS:
        good = [run for run in runs if run.ok and run.crawler == name]
        if good:
            out[name] = Summary(
                pages=median(run.pages for run in good),
                seconds=median(run.measure.seconds for run in good),
                pages_per_s=median(run.pages_per_s for run in good),
                cpu_s=median(run.measure.cpu_s for run in good),
                rss_mb=median(run.measure.rss_mb for run in good),
                runs=len(good),
                pages_per_s_range=spread(run.pages_per_s for run in good),
                rss_mb_range=spread(run.measure.rss_mb for run in good),
            )
    return out


def spread(values: Iterable[float]) -> tuple[float, float]:
    values = list(values)
    return (min(values), max(values)) if values else (0.0, 0.0)


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def print_site_table(site: Site, runs: list[Run], summary: dict[str, Summary]) -> None:
    log("")
    log(f"{site.title} ({site.package}):")
    header = f"  {'crawler':<10} {'run':>3} {'pages':>6} {'seconds':>8} {'pages/s':>8}"
    header += f" {'CPU s':>7} {'peak RSS MB':>11} {'requests':>8}"
    log(header)
    for run in runs:
        m = run.measure
        state = "" if run.ok else f"  FAILED (exit {m.exit_code})"
        log(
            f"  {LABELS[run.crawler]:<10} {run.index:>3} {run.pages:>6} {m.seconds:>8.2f}"
            f" {run.pages_per_s:>8.1f} {m.cpu_s:>7.2f} {m.rss_mb:>11.1f} {run.requests:>8}{state}"
        )
    for name, s in summary.items():
        low, high = s.pages_per_s_range
        log(
            f"  {LABELS[name]:<10} {'med':>3} {s.pages:>6.0f} {s.seconds:>8.2f}"
            f" {s.pages_per_s:>8.1f} {s.cpu_s:>7.2f} {s.rss_mb:>11.1f}"
            f"   pages/s {low:.1f}–{high:.1f} over {s.runs} runs"
        )
    ours, scrapy, wget = (summary.get(name) for name in CRAWLERS)
    cells = []
    if ours and scrapy:
        speed = ratio(ours.pages_per_s, scrapy.pages_per_s)
        memory = ratio(ours.rss_mb, scrapy.rss_mb)
        cells.append(f"ours/Scrapy {speed:.2f}x pages/s (>= 2), {memory:.2f}x peak RSS (<= 0.5)")
    if ours and wget:
        cells.append(f"ours/wget {ratio(ours.pages_per_s, wget.pages_per_s):.2f}x pages/s")
    if cells:
        log("  " + "   |   ".join(cells))


def markdown(results: dict[str, dict[str, Summary]]) -> str:
    lines = [
        "| site | crawler | pages | seconds | pages/s (min–max) | CPU s | peak RSS MB (min–max) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for name, summary in results.items():
        for crawler, s in summary.items():
            (low, high), (rss_low, rss_high) = s.pages_per_s_range, s.rss_mb_range
            lines.append(
                f"| {SITES[name].title} | {LABELS[crawler]} | {s.pages:.0f} | {s.seconds:.2f}"
                f" | {s.pages_per_s:.1f} ({low:.1f}–{high:.1f}) | {s.cpu_s:.2f}"
                f" | {s.rss_mb:.1f} ({rss_low:.1f}–{rss_high:.1f}) |"
            )
    lines += [
        "",
        "| site | ours/wget pages/s | ours/Scrapy pages/s | ours/Scrapy peak RSS |",
        "|---|---:|---:|---:|",
    ]
    for name, summary in results.items():
        ours, scrapy, wget = (summary.get(crawler) for crawler in CRAWLERS)
        cells = [
            f"{ratio(ours.pages_per_s, wget.pages_per_s):.2f}×" if ours and wget else "–",
            f"{ratio(ours.pages_per_s, scrapy.pages_per_s):.2f}×" if ours and scrapy else "–",
            f"{ratio(ours.rss_mb, scrapy.rss_mb):.2f}×" if ours and scrapy else "–",
        ]
        lines.append(f"| {SITES[name].title} | {' | '.join(cells)} |")
    return "\n".join(lines)


# --- main -----------------------------------------------------------------------------

NOTES = """\
Notes:
  pages = HTML pages crawled (200, text/html); pages/s = pages / wall seconds of the whole
  process (start-up included); CPU s = user+sys of the crawler process and the processes it
  started; peak RSS from wait4 (or /proc VmHWM samples when the crawler is smaller than this
  script), plus the private memory of the processes it started, if any (a fork's shared
  pages are the crawler's, counted once). Medians of the runs.
  rccrawler counts byte-identical pages once (report.json pages_done) but lists every URL in
  nodes.csv with duplicate_of set; Scrapy deduplicates requests by fingerprint (canonical URL)
  only, so it counts each such copy. The spider puts its start request through Scrapy's
  duplicate filter (by default it is exempt, and a link back to "/" would be fetched twice)
  and requests every <a href> target whatever its extension, as rccrawler does. The page sets
  compare rccrawler's nodes.csv URLs with Scrapy's response URLs and wget's HTML URLs
  (fragments dropped, query parameters sorted). wget also fetches <img>, <link> and <script>
  targets, which the others do not; its HTML pages are told apart by name (.html, /)."""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each crawler per site")
    parser.add_argument(
        "--sites", default=",".join(SITES), help=f"comma-separated: {','.join(SITES)}"
    )
    parser.add_argument("--quick", action="store_true", help="one run of each crawler")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per crawl")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument(
        "--all-cores", action="store_true", help="rccrawler with threads.one_core: false"
    )
    parser.add_argument(
        "--parse-worker", action="store_true", help="rccrawler with threads.parse_worker: true"
    )
    parser.add_argument(
        "--downloading",
        help="rccrawler's threads.downloading: auto or a number (default: no key, the "
        "default setting, auto)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    names = [name.strip() for name in args.sites.split(",") if name.strip()]
    unknown = [name for name in names if name not in SITES]
    if unknown or not names:
        parser.error(f"--sites: unknown {','.join(unknown) or '(none)'}; known: {','.join(SITES)}")
    args.sites = [SITES[name] for name in names]
    if args.quick:
        args.runs = 1
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.all_cores or args.parse_worker or args.downloading is not None:
        # The same three crawlers, rccrawler set so.
        CRAWL["ours"] = functools.partial(
            crawl_ours, all_cores=args.all_cores, parse_worker=args.parse_worker,
            downloading=args.downloading,
        )  # fmt: skip
        asked = [("all cores", args.all_cores), ("parse worker", args.parse_worker),
                 (f"downloading {args.downloading}", args.downloading is not None)]  # fmt: skip
        LABELS["ours"] = f"rccrawler ({', '.join(name for name, on in asked if on)})"
    started = time.monotonic()
    sites: list[Site] = args.sites
    ensure_packages([*(site.package for site in sites), *TOOL_PACKAGES])
    ensure_python_packages()
    for site in sites:
        if not (site.root / "index.html").exists():
            sys.exit(f"crawl_bench: {site.package} has no {site.root}/index.html")

    log(f"machine: {machine()}")
    log("versions: " + ", ".join(f"{k} {v}" for k, v in tool_versions().items()))
    log(f"runs: {args.runs} of each crawler per site, alternating; 8 requests in flight")
    loads = [os.getloadavg()[0]]

    work = Path(tempfile.mkdtemp(prefix="crawl_bench-"))
    results: dict[str, dict[str, Summary]] = {}
    matched: dict[str, bool] = {}
    try:
        with Nginx(sites, work) as nginx:
            for site in sites:
                if site.name in nginx.synthetic_robots:
                    log(f"{site.package} ships no robots.txt: nginx serves a permissive one")
            for site in sites:
                megabytes = warm_page_cache(site.root) / 1e6
                url = nginx.url(site)
                log(f"\n{site.title}: {url} ({site.root}, {megabytes:.0f} MB, page cache warm)")
                runs: list[Run] = []
                for index in range(1, args.runs + 1):
                    # Alternate who goes first, so a drifting machine favours nobody.
                    order = CRAWLERS if index % 2 else ("scrapy", "ours", "wget")
                    for crawler in order:
                        folder = work / site.name / f"{crawler}-{index}"
                        folder.mkdir(parents=True)
                        before = nginx.requests_served(site)
                        measure, pages, urls, note = CRAWL[crawler](url, folder, args.timeout)
                        run = Run(site.name, crawler, index, measure, pages, urls=urls, note=note)
                        run.requests = nginx.requests_served(site) - before
                        run.ok = note != "failed"
                        runs.append(run)
                        loads.append(os.getloadavg()[0])
                        log(
                            f"  {LABELS[crawler]:<9} run {index}: {pages} pages in"
                            f" {measure.seconds:.2f} s = {run.pages_per_s:.1f} pages/s,"
                            f" {measure.cpu_s:.2f} CPU s, {measure.rss_mb:.1f} MB peak,"
                            f" {run.requests} requests, load {loads[-1]:.1f}"
                            + ("" if run.ok else f" FAILED (exit {measure.exit_code})")
                        )
                        if not run.ok:
                            log(tail(folder / "crawler.out"))
                summary = summarize(runs)
                results[site.name] = summary
                print_site_table(site, runs, summary)
                matched[site.name] = compare_page_sets(site, runs)
    finally:
        if args.keep:
            log(f"\nwork folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)

    log("")
    log(NOTES)
    log("")
    for name, same in matched.items():
        log(f"page sets of rccrawler and Scrapy on {name}: {'same' if same else 'DIFFERENT'}")
    log(f"benchmark wall time: {time.monotonic() - started:.0f} s")
    cores = os.cpu_count() or 1
    log(f"1-minute load average: {min(loads):.1f} to {max(loads):.1f} on {cores} cores")
    if max(loads) > cores:
        log("  warning: other processes competed for the CPU; wall times (pages/s) are noisy")
    log("")
    log(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
