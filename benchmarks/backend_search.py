"""The search task on SQLite and on PostgreSQL gives the same answers (issue 9).

    python benchmarks/backend_search.py [--pg postgresql://127.0.0.1:5432/test]

Serves the Python 3.11 documentation (Debian's python3.11-doc) with nginx on
loopback, crawls and indexes it once with ``storage: sqlite`` and once with
``storage: postgresql://…``, then runs 20 queries on both and prints, per query,
whether the top 10 (URL, in order) is the same, and the crawl times.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from common import write_settings
from crawl_bench import SITES, Nginx, ensure_packages, rccrawler_command

QUERIES = (
    "dictionary", "list comprehension", '"context manager"', "asyncio OR threading",
    "decorator AND class", "iterat*", "unicode NOT bytes", "exception handling",
    "(socket OR select) AND timeout", "generator", "regular expression", "json",
    "datetime timezone", '"keyword argument"', "subprocess pipe", "pickle", "lambda",
    "sqlite3", "logging handler", "import*",
)  # fmt: skip


def crawl(folder: Path, url: str, storage: str) -> tuple[Path, float]:
    folder.mkdir(parents=True, exist_ok=True)
    config = write_settings(folder, [url], obey_robots=True, max_depth=1000)
    text = config.read_text()
    text += "manager: plugins.search.SearchManager\n"
    text += f"storage: {storage}\nname: backend-search-{uuid.uuid4().hex}\n"
    config.write_text(text)
    started = time.monotonic()
    subprocess.run([*rccrawler_command(), "--config", str(config), "--no-tui", "-q"], check=True)
    return config, time.monotonic() - started


def top10(config: Path, query: str) -> list[str]:
    out = subprocess.run(
        [*rccrawler_command(), "search", "--config", str(config), query, "--json",
         "--limit", "10"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    import json

    return [json.loads(line)["url"] for line in out.splitlines() if line.strip()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pg", default="postgresql://127.0.0.1:5432/test")
    args = parser.parse_args()
    site = SITES["python"]
    ensure_packages([site.package, "nginx"])
    with tempfile.TemporaryDirectory() as tmp, Nginx([site], Path(tmp)) as nginx:
        url = nginx.url(site)
        lite, lite_s = crawl(Path(tmp) / "sqlite", url, "sqlite")
        pg, pg_s = crawl(Path(tmp) / "pg", url, args.pg)
        print(f"search crawl of {site.title}: SQLite {lite_s:.1f} s, PostgreSQL {pg_s:.1f} s")
        print("| query | hits (top 10) | same top 10 on both |")
        print("|---|---:|---|")
        same = 0
        for query in QUERIES:
            a, b = top10(lite, query), top10(pg, query)
            same += a == b
            print(f"| `{query}` | {len(a)} | {'yes' if a == b else 'NO: ' + repr((a, b))} |")
        print(f"{same} of {len(QUERIES)} queries give the same top 10 on SQLite and PostgreSQL")
        from rccrawler.data.storage import discard_storage
        from rccrawler.manager import load_settings

        discard_storage(load_settings(pg)[1])  # the PostgreSQL schema of this run
        return 0 if same == len(QUERIES) else 1


if __name__ == "__main__":
    sys.exit(main())
