"""What a refresh costs against the first crawl, on the PostgreSQL docs served by nginx.

    python benchmarks/refresh_bench.py [--rounds 5]

Issue 42 asks two things of ``rccrawler crawl --config FILE --refresh`` on a real site:
that a refresh of an unchanged crawl costs at most 0.8x the first crawl's wall time and
2% of its body bytes (every page is still asked for, with If-None-Match and
If-Modified-Since, and nginx answers 304 without a body), and that after ``touch`` of
every file plus an edit of 5 pages exactly those 5 are ``changed`` (a touched file has
a new ETag and Last-Modified, so every page comes back whole: the body hashes tell).

The docs of the Debian package postgresql-doc-15 are copied to a work folder (the edits
never touch the package) and served by nginx on 127.0.0.1, as benchmarks/crawl_bench.py
serves them. Each round is a first crawl (``--fresh``) and then a refresh of it, each a
child process timed as a whole (start-up included), its CPU time (user + system) from
the kernel; body bytes are what nginx's access log says it sent ($body_bytes_sent). A
first pair warms up (page cache, byte-code, nginx) and is not counted; the sources are
compiled first, as pip does on install, even where PYTHONDONTWRITEBYTECODE is set. It
prints each round, the median ratios with their range, and the 1-minute load; then the
touch-and-edit check.
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from common import write_settings
from crawl_bench import (
    SITES,
    Measure,
    Nginx,
    Site,
    ensure_packages,
    ensure_python_packages,
    log,
    rccrawler_command,
    run_measured,
    spread,
    tail,
    warm_page_cache,
)

EDITED = (
    "sql-select.html", "tutorial-join.html", "datatype-json.html", "functions-string.html",
    "runtime-config-wal.html",
)  # fmt: skip
"""The 5 pages the check edits (files of postgresql-doc-15's html folder)."""


def body_bytes(log_file: Path, skip: int) -> tuple[int, int, Counter[str]]:
    """Body bytes nginx sent and requests it answered after the first ``skip`` lines of
    its access log (format ``$status $body_bytes_sent $request_uri``), and the statuses."""
    total = requests = 0
    statuses: Counter[str] = Counter()
    with log_file.open(encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle):
            if number < skip:
                continue
            status, sent, _uri = line.split(" ", 2)
            total += int(sent)
            requests += 1
            statuses[status] += 1
    return total, requests, statuses


def log_lines(log_file: Path) -> int:
    return sum(1 for _ in log_file.open("rb")) if log_file.exists() else 0


def crawl(config: Path, folder: Path, flag: str, timeout: float) -> Measure:
    """One crawl as a child process (``--fresh`` or ``--refresh``): its wall and CPU time."""
    command = [*rccrawler_command(), "--config", str(config), flag, "--no-tui", "-q"]
    measure = run_measured(command, folder, folder / f"crawl{flag}.out", timeout)
    if measure.exit_code != 0:
        log(tail(folder / f"crawl{flag}.out"))
        sys.exit(f"refresh_bench: the crawl ({flag}) exited {measure.exit_code}")
    return measure


def changes_of(output: Path) -> Counter[str]:
    """change → pages, from the site's H.changes.csv, and the changed URLs' paths."""
    (path,) = output.glob("*.changes.csv")
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    counts = Counter(row["change"] for row in rows)
    for row in rows:
        if row["change"] == "changed":
            counts[f"changed {row['url'].rsplit('/', 1)[-1]}"] += 1
    return counts


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="first crawl + refresh pairs")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per crawl")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    package = SITES["postgres"]
    ensure_packages([package.package, "nginx"])
    ensure_python_packages()
    work = Path(tempfile.mkdtemp(prefix="refresh_bench-"))
    work.chmod(0o755)  # nginx's workers (another user) read the copy there
    try:
        docs = work / "html"
        shutil.copytree(package.root, docs)  # copy2: the files keep their times
        site = Site("postgres", package.package, docs, f"{package.title} (a copy)")
        megabytes = warm_page_cache(docs) / 1e6
        with Nginx([site], work) as nginx:
            access = work / f"{site.name}.access.log"
            url = nginx.url(site)
            folder = work / "crawl"
            folder.mkdir()
            config = write_settings(folder, [url], obey_robots=True, max_depth=1000)
            log(f"{site.title}: {url} ({megabytes:.0f} MB), {args.rounds} rounds")
            crawl(config, folder, "--fresh", args.timeout)  # the warm-up pair
            crawl(config, folder, "--refresh", args.timeout)
            times: list[float] = []
            cpu: list[float] = []
            byte_ratios: list[float] = []
            loads: list[float] = []
            for number in range(1, args.rounds + 1):
                lines = log_lines(access)
                first = crawl(config, folder, "--fresh", args.timeout)
                first_bytes, first_requests, _ = body_bytes(access, lines)
                lines = log_lines(access)
                again = crawl(config, folder, "--refresh", args.timeout)
                again_bytes, again_requests, statuses = body_bytes(access, lines)
                loads.append(os.getloadavg()[0])
                changes = changes_of(folder / "output")
                times.append(again.seconds / first.seconds)
                cpu.append(again.cpu_s / first.cpu_s)
                byte_ratios.append(again_bytes / first_bytes)
                log(
                    f"  round {number}: first crawl {first.seconds:.2f} s "
                    f"(CPU {first.cpu_s:.2f} s), {first_requests} requests, "
                    f"{first_bytes / 1e6:.2f} MB; refresh "
                    f"{again.seconds:.2f} s (CPU {again.cpu_s:.2f} s), {again_requests} requests "
                    f"({dict(statuses)}), {again_bytes / 1e3:.1f} kB: {times[-1]:.2f}x the time, "
                    f"{cpu[-1]:.2f}x the CPU, {byte_ratios[-1]:.2%} of the bytes; unchanged "
                    f"{changes['unchanged']}, other changes "
                    f"{sum(changes.values()) - changes['unchanged']}; load {loads[-1]:.1f}"
                )
            for label, ratios in (("wall time", times), ("CPU time", cpu)):
                low, high = spread(ratios)
                log(f"refresh / first crawl, {label}: median {statistics.median(ratios):.2f}x "
                    f"({low:.2f}-{high:.2f}), {args.rounds} pairs")  # fmt: skip
            low, high = spread(byte_ratios)
            log(f"refresh / first crawl, body bytes: median "
                f"{statistics.median(byte_ratios):.2%} ({low:.2%}-{high:.2%})")  # fmt: skip
            log(f"1-minute load: {min(loads):.1f} to {max(loads):.1f} on {os.cpu_count()} cores")

            # touch every file, edit 5 pages: a refresh tells exactly those 5 changed.
            now = time.time()
            for path in docs.rglob("*"):
                os.utime(path, (now, now))
            for name in EDITED:
                page = docs / name
                text = page.read_text(encoding="utf-8")
                page.write_text(
                    text.replace("</body>", "<p>Edited by refresh_bench.</p></body>", 1),
                    encoding="utf-8",
                )
            lines = log_lines(access)
            crawl(config, folder, "--refresh", args.timeout)
            _sent, requests, statuses = body_bytes(access, lines)
            changes = changes_of(folder / "output")
            changed = sorted(key.split(" ", 1)[1] for key in changes if key.startswith("changed "))
            others = {k: v for k, v in changes.items() if " " not in k and k != "changed"}
            log(f"after touch and 5 edits: {requests} requests ({dict(statuses)}); changed: "
                f"{', '.join(changed)}; {others}")  # fmt: skip
            ok = changed == sorted(EDITED) and set(others) == {"unchanged"}
            log("exactly the 5 edited pages changed: " + ("yes" if ok else "NO"))
            return 0 if ok else 1
    finally:
        if args.keep:
            log(f"work folder kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
