"""What the live status view costs: the same crawl with and without it, alternating.

    python benchmarks/status_view.py [--sites 3] [--pages 1500] [--rounds 3]
    python benchmarks/status_view.py --screen [FILE]

The loopback server runs in a child process, so that it does not compete with the
crawler for this process's GIL. Each crawl runs in this process from a fresh state
directory (crawl_delay 0); "with view" renders rich's Live display, refreshed as
in a real terminal, to a terminal console (``force_terminal``) writing to /dev/null,
fed by the RoutineThread. Runs alternate (without, with, with, without, ...), so a
drift of the machine's speed hits both sides alike. Throughput is pages done over
the crawl's elapsed time (the unloaders that write the graph files are left out).

``--screen`` instead runs a slow three-site crawl under a pseudo-terminal and saves
what the terminal shows while it runs and at the end (benchmarks/status_view_screen.txt).
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import re
import statistics
import sys
import tempfile
import time
from collections import ChainMap
from pathlib import Path
from typing import Any

import yaml
from common import write_settings
from support.loopback import Resource, redirect, serve_sites
from support.sites import generated_site, page_path
from support.terminal import TerminalSession

from rccrawler.commands.fresh import start_fresh
from rccrawler.manager import load_settings
from rccrawler.ui.status import StatusView

HERE = Path(__file__).parent
REFRESH: float = StatusView.__init__.__kwdefaults__["refresh_per_second"]
"""Frames per second of the view (StatusView's default)."""


def host_names(count: int) -> list[str]:
    return [f"site{i}.test" for i in range(count)]


def _serve(hosts: list[str], pages: int, port_queue: Any, stop: Any) -> None:
    """The child process: serve the generated sites until told to stop."""
    sites = {host: generated_site(host, pages, fanout=10) for host in hosts}
    with serve_sites(sites) as server:
        port_queue.put(server.server_port)
        stop.wait()


def frame_cost(view: StatusView, frames: int = 50) -> float:
    """Seconds to draw one frame of ``view`` (its last snapshot) to a terminal console."""
    with open(os.devnull, "w", encoding="utf-8") as devnull:
        probe = StatusView(
            downloading_threads=view.downloading_threads,
            parsing_threads=view.parsing_threads,
            file=devnull,
            width=120,
            height=40,
            warnings=view.warnings,
        )
        for stats in view.snapshots():
            probe.update(stats)
        started = time.perf_counter()
        for _ in range(frames):
            probe.console.print(probe)
        return (time.perf_counter() - started) / frames


def crawl_once(config: Path, *, with_view: bool) -> tuple[int, float, float]:
    """One fresh crawl in this process: pages done, seconds of crawling, and seconds
    per frame of the view (0 without it)."""
    manager_cls, settings = load_settings(config)
    manager = manager_cls(settings)
    start_fresh(manager)
    view = None
    devnull = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115
    try:
        if with_view:
            view = StatusView.for_manager(manager, file=devnull, width=120, height=40)
            manager.status = view
            view.start()
        finished = manager.run()
    finally:
        if view is not None:
            view.stop()
        devnull.close()
    assert finished, "the benchmark crawl did not finish"
    cost = frame_cost(view) if view is not None else 0.0
    return int(manager.report["pages_done"]), manager.elapsed, cost


def throughput(sites: int, pages: int, rounds: int) -> None:
    hosts = host_names(sites)
    context = multiprocessing.get_context("spawn")
    port_queue, stop = context.Queue(), context.Event()
    server = context.Process(target=_serve, args=(hosts, pages, port_queue, stop), daemon=True)
    server.start()
    try:
        port = port_queue.get(timeout=120)
        rates: dict[bool, list[float]] = {False: [], True: []}
        frames: list[float] = []
        with tempfile.TemporaryDirectory() as tmp:
            config = write_settings(
                Path(tmp),
                [f"http://{h}/" for h in hosts],
                max_downloads_at_time=4,
                resolve={f"{h}:80": f"127.0.0.1:{port}" for h in hosts},
            )
            crawl_once(config, with_view=False)  # warm-up: imports, caches, the server
            for round_ in range(rounds):
                order = (False, True) if round_ % 2 == 0 else (True, False)
                for with_view in order:
                    done, seconds, cost = crawl_once(config, with_view=with_view)
                    rates[with_view].append(done / seconds)
                    if with_view:
                        frames.append(cost)
                    label = "with view   " if with_view else "without view"
                    print(f"round {round_ + 1} {label}: {done} pages in {seconds:.2f} s = "
                          f"{done / seconds:.0f} pages/s", flush=True)  # fmt: skip
    finally:
        stop.set()
        server.join(10)
    without, with_ = statistics.median(rates[False]), statistics.median(rates[True])
    print(f"median without view: {without:.0f} pages/s")
    print(f"median with view:    {with_:.0f} pages/s")
    print(f"ratio with/without:  {with_ / without:.3f} ({(1 - with_ / without) * 100:+.1f}% cost)")
    frame = statistics.median(frames)
    print(f"one frame of the view: {frame * 1000:.1f} ms, at {REFRESH:g} frames/s "
          f"{frame * REFRESH * 100:.1f}% of one core")  # fmt: skip


# -- the screen capture --------------------------------------------------------------


def three_sites(pages: int) -> dict[str, Any]:
    """Three sites; b.test has a redirect loop and c.test a page answering 503."""
    return {
        "a.test": generated_site("a.test", pages),
        "b.test": ChainMap({page_path(7): redirect(page_path(7))}, generated_site("b.test", pages)),
        "c.test": ChainMap({page_path(9): Resource(b"down", 503)}, generated_site("c.test", pages)),
    }


def done_of(screen: str, host: str) -> int:
    match = re.search(rf"^{re.escape(host)}\s+([\d,]+)", screen, re.MULTILINE)
    return int(match.group(1).replace(",", "")) if match else 0


def capture_screen(path: Path, pages: int = 300) -> None:
    with serve_sites(three_sites(pages)) as server, tempfile.TemporaryDirectory() as tmp:
        settings = {
            "sites": ["a.test", "b.test", "c.test"],
            "state_dir": f"{tmp}/state",
            "output_dir": f"{tmp}/output",
            "threads": {"downloading": 4, "parsing": 2},
            "crawl": {"crawl_delay_ms": 30, "max_downloads_at_time": 2, "timeout_s": 10,
                      "max_download_attempts": 2, "resolve": server.resolve},
        }  # fmt: skip
        config = Path(tmp) / "settings.yaml"
        config.write_text(yaml.safe_dump(settings), encoding="utf-8")
        session = TerminalSession([sys.executable, "-m", "rccrawler", "--config", str(config)],
                                  width=110, height=24, cwd=tmp)  # fmt: skip
        running = ""
        while session.process.poll() is None:
            screen = session.display()
            if not running and done_of(screen, "a.test") >= pages // 2:
                running = screen
            time.sleep(0.05)
        session.wait(60)
        final = session.display().replace(tmp, "/tmp/…")
    text = (
        f"$ rccrawler --config settings.yaml   # 3 sites of {pages} pages, crawl_delay_ms 30\n\n"
        f"-- while it runs --\n{running}\n\n-- at the end --\n{final}\n"
    )
    path.write_text(text, encoding="utf-8")
    print(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sites", type=int, default=3)
    parser.add_argument("--pages", type=int, default=1500, help="pages per site")
    parser.add_argument("--rounds", type=int, default=3, help="with/without pairs (>= 3)")
    parser.add_argument("--screen", nargs="?", const=HERE / "status_view_screen.txt", type=Path,
                        help="capture the screen of a running crawl instead")  # fmt: skip
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.screen:
        capture_screen(args.screen)
    else:
        throughput(args.sites, args.pages, max(3, args.rounds))


if __name__ == "__main__":
    main()
