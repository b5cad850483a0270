"""What each unloader of the web-graph and link-check tasks costs once a crawl is over.

    python benchmarks/unloaders.py [--pages 5000] [--rounds 3]

Crawls a generated site of --pages pages (fanout 10) on loopback with the link-check
task, in this process, then runs each of its unloaders --rounds times on the finished
state and prints the median and range of their wall times. The link analysis and the
broken links are computed once per crawl and shared (rccrawler.unloaders.shared_result);
each round here starts without that cache, so the first unloader needing them pays.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from common import count_args, write_settings
from support.loopback import serve_sites
from support.sites import generated_site

from rccrawler.manager import load_settings


def main() -> None:
    args = count_args(__doc__, pages=5000, rounds=3)
    host = "big.test"
    with (
        serve_sites({host: generated_site(host, args.pages, fanout=10)}) as server,
        tempfile.TemporaryDirectory() as tmp,
    ):
        config = write_settings(Path(tmp), [f"http://{host}/"], resolve=server.resolve)
        text = config.read_text(encoding="utf-8")
        config.write_text(f"manager: plugins.linkcheck.LinkCheckManager\n{text}", "utf-8")
        manager_cls, settings = load_settings(config)
        manager = manager_cls(settings)
        started = time.monotonic()
        assert manager.run(), "the crawl did not finish"
        print(f"crawl of {args.pages} pages: {time.monotonic() - started:.1f} s")
        times: dict[str, list[float]] = {cls.__name__: [] for cls in manager.unloader_classes}
        manager.data.open()
        try:
            for _ in range(args.rounds):
                fresh = manager_cls(settings)  # a new manager: no shared results yet
                fresh.data = manager.data
                for cls in fresh.unloader_classes:
                    started = time.monotonic()
                    cls(fresh.context, fresh.finisher).unload()
                    times[cls.__name__].append(time.monotonic() - started)
        finally:
            manager.data.close()
        print(f"{'unloader':<26} {'median s':>9} {'range s':>13}")
        for name, values in times.items():
            print(f"{name:<26} {statistics.median(values):>9.3f} "
                  f"{min(values):>6.3f}–{max(values):<6.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
