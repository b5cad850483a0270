"""What the WARC archive costs: one generated site crawled with and without it.

    python benchmarks/archive_overhead.py [--pages 3000] [--runs 3]

Each run crawls the same loopback site in its own process (``python -m rccrawler``),
alternating the web-graph task and the archive task, and prints the median and range
of the wall times, the archive's bytes and records per page.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from common import count_args, write_settings
from support.loopback import serve_sites
from support.sites import generated_site
from warcio.archiveiterator import ArchiveIterator  # type: ignore[import-untyped]

TASKS = {
    "webgraph": "plugins.webgraph.WebGraphManager",
    "archive": "plugins.archive.ArchiveManager",
}


def crawl(folder: Path, resolve: dict[str, str], manager: str) -> float:
    path = write_settings(folder, ["a.test"], resolve=resolve, sitemaps=False)
    settings = yaml.safe_load(path.read_text())
    settings["manager"] = manager
    path.write_text(yaml.safe_dump(settings))
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "rccrawler", "--config", str(path), "--no-tui", "-q"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.monotonic() - started


def main() -> None:
    args = count_args(__doc__, pages=3000, runs=3)
    times: dict[str, list[float]] = {name: [] for name in TASKS}
    with serve_sites({"a.test": generated_site("a.test", args.pages)}) as server:
        for run in range(args.runs):
            for name, manager in TASKS.items():
                with tempfile.TemporaryDirectory() as tmp:
                    times[name].append(crawl(Path(tmp), server.resolve, manager))
                    if name == "archive" and run == 0:
                        files = sorted((Path(tmp) / "output").glob("*.warc.gz"))
                        size = sum(f.stat().st_size for f in files)
                        count = 0
                        for file in files:
                            with open(file, "rb") as handle:
                                count += sum(1 for _ in ArchiveIterator(handle))
                        print(f"archive: {len(files)} file(s), {size / 1e6:.2f} MB, "
                              f"{count} records, {size / args.pages:.0f} B/page")  # fmt: skip
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:9} {args.pages} pages, {args.runs} runs: median {median:.2f} s "
              f"(range {min(values):.2f}-{max(values):.2f})")  # fmt: skip


if __name__ == "__main__":
    main()
