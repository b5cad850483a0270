"""Record a py-spy profile of rccrawler crawling one of crawl_bench's sites.

    python benchmarks/crawl_profile.py postgres [--out prof] [--gil] [--top 25]
                                       [--storage postgresql://127.0.0.1:5432/test]

Serves the site with nginx as crawl_bench.py does, runs rccrawler under
``py-spy record --native --format raw`` (install py-spy with pip), and prints the
functions with the most samples, by own samples and by samples including callees.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from common import write_settings
from crawl_bench import SITES, Nginx, rccrawler_command, warm_page_cache

from rccrawler.data.storage import discard_storage
from rccrawler.manager import load_settings


def top_frames(raw: Path, top: int) -> str:
    """The heaviest frames of a py-spy raw (collapsed stacks) file, own and total."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        samples += count
        frames = stack.split(";")
        own[frames[-1]] += count
        for frame in set(frames):
            total[frame] += count
    lines = [f"{samples} samples"]
    for title, counter in (("own", own), ("including callees", total)):
        lines.append(f"-- top {top} by {title} --")
        for frame, count in counter.most_common(top):
            lines.append(f"{100 * count / samples:5.1f}%  {frame[:150]}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site", choices=sorted(SITES))
    parser.add_argument("--out", type=Path, default=Path("crawl-profile"))
    parser.add_argument("--gil", action="store_true", help="only samples holding the GIL")
    parser.add_argument("--idle", action="store_true", help="include idle (waiting) samples")
    parser.add_argument("--python-only", action="store_true", help="no native frames")
    parser.add_argument("--rate", type=int, default=250, help="samples per second")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--storage", help="a postgresql:// URL to keep the state in")
    args = parser.parse_args()
    site = SITES[args.site]
    warm_page_cache(site.root)
    work = Path(tempfile.mkdtemp(prefix="crawl_profile-"))
    raw = args.out.with_suffix(".txt").resolve()  # py-spy runs in the work folder
    try:
        with Nginx([site], work) as nginx:
            config = write_settings(
                work, [nginx.url(site)], storage=args.storage, obey_robots=True, max_depth=1000
            )
            spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
            cmd = [spy, "record", "--format", "raw", "-r", str(args.rate), "-o", str(raw)]
            cmd += [] if args.python_only else ["--native"]
            cmd += ["--gil"] if args.gil else []
            cmd += ["--idle"] if args.idle else []
            cmd += ["--", *rccrawler_command(), "--config", str(config), "--fresh", "--no-tui"]
            try:
                subprocess.run(cmd, check=True, cwd=work, stdout=subprocess.DEVNULL)
            finally:
                if args.storage:
                    discard_storage(load_settings(config)[1])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(top_frames(raw, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
