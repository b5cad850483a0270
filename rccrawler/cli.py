"""The command line: rccrawler --config FILE | stop | status | search | words | serve | demo
(SPEC §3)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rccrawler.exceptions import ConfigError, RCCrawlerError, StateError

if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import FrameType

    from rccrawler.config import Settings
    from rccrawler.data.base import DataManager
    from rccrawler.data.postgres import PostgresDataManager
    from rccrawler.manager import ApplicationManager

logger = logging.getLogger("rccrawler")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
RESUME_MESSAGE = "stopped: run the same command to resume"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rccrawler",
        description="Crawl sites breadth-first into per-site web graphs (rccrawler --config FILE).",
    )
    parser.add_argument("command", nargs="?", default="crawl",
                        choices=["crawl", "stop", "status", "search", "words", "serve", "demo"],
                        help="what to do (default: crawl)")  # fmt: skip
    parser.add_argument("terms", nargs="*", metavar="QUERY",
                        help="search: the query; words: a prefix")  # fmt: skip
    parser.add_argument("--config", "-c", metavar="FILE", help="settings.yaml of the crawl")
    parser.add_argument("--fresh", action="store_true", help="discard saved state first")
    parser.add_argument("--no-tui", action="store_true", help="plain log lines, no live view")
    parser.add_argument("--log-file", metavar="FILE", help="also write the log to FILE")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")
    parser.add_argument("--json", action="store_true", help="status, search: print JSON")
    parser.add_argument("--limit", type=int, default=10, metavar="N",
                        help="search: at most N hits (default 10)")  # fmt: skip
    parser.add_argument("--host", default="127.0.0.1", help="serve: address to listen on")
    parser.add_argument("--port", type=int, default=8080, help="serve: port (default 8080)")
    parser.add_argument(
        "--output", metavar="DIR", help="demo: where to write (default output/demo)"
    )
    return parser


def setup_logging(verbose: bool, quiet: bool, log_file: str | None) -> None:
    level = logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_file:
        handlers.append(logging.FileHandler(log_file, encoding="utf-8"))
    logging.basicConfig(
        level=level,
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        handlers=handlers,
        force=True,
    )
    logging.getLogger("urllib3").setLevel(logging.ERROR)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    # Intermixed: the query may come after options (search --config F QUERY --json).
    args = parser.parse_intermixed_args(argv)
    if args.terms and args.command not in ("search", "words"):
        parser.error(f"unrecognized arguments: {' '.join(args.terms)}")
    setup_logging(args.verbose, args.quiet, args.log_file)
    try:
        if args.command == "demo":
            from rccrawler.demo import run_demo

            output = Path(args.output) if args.output else Path("output/demo")
            return run_demo(output, tui=False if args.no_tui else None)
        if not args.config:
            print(f"rccrawler {args.command}: --config FILE is required", file=sys.stderr)
            return EXIT_USAGE
        if args.command == "stop":
            return stop_command(args.config)
        if args.command == "status":
            return status_command(args.config, as_json=args.json)
        if args.command == "search":
            return search_command(args.config, " ".join(args.terms), args.limit,
                                  as_json=args.json)  # fmt: skip
        if args.command == "words":
            return words_command(args.config, " ".join(args.terms))
        if args.command == "serve":
            return serve_command(args.config, args.host, args.port)
        return crawl_command(args.config, fresh=args.fresh, tui=False if args.no_tui else None)
    except ConfigError as exc:
        print(f"rccrawler: bad config: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except StateError as exc:
        print(f"rccrawler: {exc}", file=sys.stderr)
        return EXIT_USAGE


def crawl_command(config: str, *, fresh: bool, tui: bool | None = None) -> int:
    from rccrawler.manager import load_settings

    manager_cls, settings = load_settings(config)
    if fresh:
        manager_cls.fresh(settings)
    manager = manager_cls(settings)
    return run_manager(manager, tui=tui)


def run_manager(
    manager: ApplicationManager, *, summary: bool = True, tui: bool | None = None
) -> int:
    """Run a crawl; the first SIGINT/SIGTERM stops it cleanly, a second at once.

    Args:
        manager: the crawl to run.
        summary: print the report at the end.
        tui: show the live status view; None means "when stdout is a terminal".
    """
    if tui is None:
        tui = sys.stdout.isatty()
    view = None
    if tui:
        from rccrawler.ui.status import StatusView

        view = StatusView.for_manager(manager)
        manager.view = view
    interrupts = 0

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal interrupts
        interrupts += 1
        if interrupts > 1:
            if view is not None:
                view.abort()
            # Every committed call is on disk (WAL); the running pages are re-queued on resume.
            os._exit(130)
        manager.request_stop(f"stopped by {signal.Signals(signum).name}")

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if view is not None:
            view.start()
        finished = manager.run()
    finally:
        # The live view ends first, so that what follows prints below its last frame.
        if view is not None:
            view.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if not finished:
        print(RESUME_MESSAGE)
        return EXIT_OK
    if summary:
        print_summary(manager, manager.report, tui=tui)
    return EXIT_OK


def print_summary(
    manager: ApplicationManager, report: dict[str, object], *, tui: bool | None = None
) -> None:
    """The report at the end of a crawl: a table on a terminal, one line per site otherwise.

    Args:
        manager: the finished crawl.
        report: what build_report() returned (also in report.json).
        tui: print the rich table; None means "when stdout is a terminal".
    """
    if tui is None:
        tui = sys.stdout.isatty()
    if tui:
        from rccrawler.ui.status import print_report

        print_report(report, manager.settings.output_dir)
        return
    sites = report.get("sites", {})
    assert isinstance(sites, dict)
    for host, site in sites.items():
        print(
            f"{host}: {site['pages_done']} pages, {site['errors']} errors, "
            f"{site['duplicates']} duplicates, {site['bytes']} bytes, "
            f"{site['elapsed_s']} s — {site['stop_reason']}"
        )
    print(f"results in {manager.settings.output_dir}")


def saved_postgres_state(settings: Settings) -> PostgresDataManager | None:
    """The PostgreSQL state of these settings, unopened; None when no crawl saved one."""
    from rccrawler.data.postgres import PostgresDataManager, schema_for

    schema = schema_for(str(settings.state_dir))
    if not PostgresDataManager.exists(settings.storage, schema):
        return None
    return PostgresDataManager(settings.storage, schema)


def stop_command(config: str) -> int:
    from rccrawler.manager import STOP_FILE, load_settings

    _cls, settings = load_settings(config)
    if settings.storage != "sqlite":
        # Workers may run on other machines: the request goes through the database.
        shared = saved_postgres_state(settings)
        if shared is None:
            print(f"rccrawler stop: no crawl for {settings.state_dir} in {settings.storage}",
                  file=sys.stderr)  # fmt: skip
            return EXIT_FAILED
        shared.open()
        try:
            shared.request_stop()
        finally:
            shared.close()
        print(f"stop requested for every worker of the crawl {settings.state_dir}")
        return EXIT_OK
    if not settings.state_dir.exists():
        print(f"rccrawler stop: no crawl state in {settings.state_dir}", file=sys.stderr)
        return EXIT_FAILED
    (settings.state_dir / STOP_FILE).write_text("stop\n", encoding="utf-8")
    print(f"stop requested for the crawl in {settings.state_dir}")
    return EXIT_OK


def status_command(config: str, *, as_json: bool) -> int:
    from rccrawler.data.sqlite import SQLiteDataManager
    from rccrawler.manager import STATE_FILE, load_settings, state_in_use

    _cls, settings = load_settings(config)
    data: DataManager | None
    if settings.storage == "sqlite":
        path = settings.state_dir / STATE_FILE
        if not path.exists():
            print(f"no saved crawl in {settings.state_dir}")
            return EXIT_FAILED
        running = state_in_use(settings.state_dir)
        data = SQLiteDataManager(path, read_only=True)
    else:
        data = saved_postgres_state(settings)
        if data is None:
            print(f"no saved crawl for {settings.state_dir} in {settings.storage}")
            return EXIT_FAILED
        running = False  # workers hold no lock file; leased pages tell (below)
    data.open()
    try:
        stats = data.statistics()
    finally:
        data.close()
    running = running or any(h.running for h in stats.hosts)
    unfinished = "running" if running else "stopped (run the crawl again to resume)"
    rows = [
        {
            "host": h.host, "done": h.done, "waiting": h.waiting,
            "running": h.running + h.downloaded,
            "errors": h.errors, "duplicates": h.duplicates, "skipped": h.skipped,
            "stop_reason": h.stop_reason or unfinished,
        }
        for h in stats.hosts
    ]  # fmt: skip
    if as_json:
        print(json.dumps({"running": running, "sites": rows, "pages_done": stats.pages_done}))
        return EXIT_OK
    print(
        f"{'host':30} {'done':>7} {'waiting':>8} {'running':>8} {'errors':>7} {'dups':>6}"
        "  stop reason"
    )
    for row in rows:
        print(
            f"{row['host']:30} {row['done']:>7} {row['waiting']:>8} {row['running']:>8} "
            f"{row['errors']:>7} {row['duplicates']:>6}  {row['stop_reason'] or '-'}"
        )
    return EXIT_OK


def search_command(config: str, query: str, limit: int, *, as_json: bool) -> int:
    """Ask the task named in the settings to answer a query from its saved index."""
    from rccrawler.manager import load_settings

    if not query.strip():
        print("rccrawler search: a QUERY is required", file=sys.stderr)
        return EXIT_USAGE
    if limit < 1:
        print("rccrawler search: --limit must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    manager_cls, settings = load_settings(config)
    try:
        hits = manager_cls.search(settings, query, limit)
    except RCCrawlerError as exc:
        if isinstance(exc, (ConfigError, StateError)):
            raise
        print(f"rccrawler search: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if hits is None:
        print(f"rccrawler search: the task {manager_cls.__name__} has no search index "
              "(use manager: plugins.search.SearchManager)", file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    bold = sys.stdout.isatty()
    for rank, hit in enumerate(hits, 1):
        if as_json:
            print(json.dumps(hit, ensure_ascii=False))
        else:
            print(
                f"{rank}. {printable(hit['title'])}  ({hit['score']})\n   {printable(hit['url'])}"
            )
            text = hit.get("snippet") or hit.get("summary") or ""
            if text:
                print(f"   {marked(text, hit.get('marks', ()), bold=bold)}")
    if not hits and not as_json:
        print("no hits")
    return EXIT_OK


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """Crawled text for a terminal: C0/C1 controls (ESC too) written as ``\\xNN``."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def marked(text: str, marks: Sequence[Sequence[int]], *, bold: bool) -> str:
    """``text`` made printable, the (start, end) spans in ANSI bold or in brackets."""
    opening, closing = ("\x1b[1m", "\x1b[22m") if bold else ("[", "]")
    parts, at = [], 0
    for start, end in marks:
        parts += [printable(text[at:start]), opening, printable(text[start:end]), closing]
        at = end
    parts.append(printable(text[at:]))
    return "".join(parts)


def words_command(config: str, prefix: str) -> int:
    """List the indexed words (starting with ``prefix``) with their document counts."""
    from rccrawler.manager import load_settings

    manager_cls, settings = load_settings(config)
    found = manager_cls.words(settings, prefix)
    if found is None:
        print(f"rccrawler words: the task {manager_cls.__name__} has no search index "
              "(use manager: plugins.search.SearchManager)", file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    for word, count in found:
        print(f"{word}\t{count}")
    return EXIT_OK


def serve_command(config: str, host: str, port: int) -> int:
    """Run the search web page of the task named in the settings until Ctrl-C."""
    from rccrawler.manager import load_settings

    manager_cls, settings = load_settings(config)
    try:
        served = manager_cls.serve(settings, host, port)
    except OSError as exc:
        print(f"rccrawler serve: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_OK
    if not served:
        print(f"rccrawler serve: the task {manager_cls.__name__} has no search page "
              "(use manager: plugins.search.SearchManager)", file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
