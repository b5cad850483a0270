"""The command line: rccrawler --config FILE | stop | status | search | words | serve | demo
(SPEC §3)."""

from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rccrawler.exceptions import ConfigError, RCCrawlerError, StateError
from rccrawler.safetext import (
    TerminalSafeFormatter,
    TerminalSafeLogRecord,
    json_terminal_safe,
    terminal_safe,
)

if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import FrameType

    from rccrawler.manager import ApplicationManager

logger = logging.getLogger("rccrawler")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
RESUME_MESSAGE = "stopped: run the same command to resume"
_STATE_ERRNOS = (errno.EACCES, errno.EPERM, errno.EROFS, errno.EISDIR, errno.ENOTDIR,
                 errno.ENOENT)  # fmt: skip


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
    # Messages carry crawled text: escape control characters for every handler.
    logging.setLogRecordFactory(TerminalSafeLogRecord)
    formatter = TerminalSafeFormatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    for handler in handlers:
        handler.setFormatter(formatter)
    logging.basicConfig(level=level, handlers=handlers, force=True)
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
    except OSError as exc:
        # A read-only or broken state or output folder (--fresh, stop): a state error.
        if exc.errno not in _STATE_ERRNOS:
            raise
        print(f"rccrawler: cannot write {exc.filename or 'the state'}: {exc.strerror}",
              file=sys.stderr)  # fmt: skip
        return EXIT_USAGE


def crawl_command(config: str, *, fresh: bool, tui: bool | None = None) -> int:
    from rccrawler.config import check_writable_dirs
    from rccrawler.manager import load_settings

    manager_cls, settings = load_settings(config)
    check_writable_dirs(settings)
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
    if manager.unload_failures:
        print(f"rccrawler: {len(manager.unload_failures)} output file set(s) could not be "
              "written (see the errors above)", file=sys.stderr)  # fmt: skip
        return EXIT_FAILED
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
        print(terminal_safe(
            f"{host}: {site['pages_done']} pages, {site['errors']} errors, "
            f"{site['duplicates']} duplicates, {site['bytes']} bytes, "
            f"{site['elapsed_s']} s — {site['stop_reason']}"
        ))  # fmt: skip
    print(f"results in {manager.settings.output_dir}")


def stop_command(config: str) -> int:
    from rccrawler.data.storage import is_shared, open_storage, state_exists
    from rccrawler.manager import STOP_FILE, load_settings

    _cls, settings = load_settings(config)
    if is_shared(settings):
        # Workers may run on other machines: the request goes through the database.
        if not state_exists(settings):
            print(f"rccrawler stop: no crawl {settings.crawl_name} in {settings.storage}",
                  file=sys.stderr)  # fmt: skip
            return EXIT_FAILED
        with open_storage(settings) as shared:
            shared.request_stop()
        print(f"stop requested for every worker of the crawl {settings.crawl_name}")
        return EXIT_OK
    if not settings.state_dir.exists():
        print(f"rccrawler stop: no crawl state in {settings.state_dir}", file=sys.stderr)
        return EXIT_FAILED
    (settings.state_dir / STOP_FILE).write_text("stop\n", encoding="utf-8")
    print(f"stop requested for the crawl in {settings.state_dir}")
    return EXIT_OK


def status_command(config: str, *, as_json: bool) -> int:
    from rccrawler.data.storage import is_shared, open_storage, state_exists
    from rccrawler.manager import load_settings, state_in_use

    _cls, settings = load_settings(config)
    if not state_exists(settings):
        where = settings.storage if is_shared(settings) else settings.state_dir
        print(f"no saved crawl in {where}")
        return EXIT_FAILED
    # Workers on shared storage hold no lock file; leased pages tell (below).
    running = not is_shared(settings) and state_in_use(settings.state_dir)
    with open_storage(settings) as data:
        stats = data.statistics()
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
        print(terminal_safe(
            f"{row['host']:30} {row['done']:>7} {row['waiting']:>8} {row['running']:>8} "
            f"{row['errors']:>7} {row['duplicates']:>6}  {row['stop_reason'] or '-'}"
        ))  # fmt: skip
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
    for rank, hit in enumerate(hits, 1):
        # Titles, URLs and snippets are crawled text (terminal_safe).
        if as_json:
            print(json_terminal_safe(json.dumps(hit, ensure_ascii=False)))
        else:
            print(f"{rank}. {terminal_safe(str(hit['title']))}  ({hit['score']})\n"
                  f"   {terminal_safe(str(hit['url']))}")  # fmt: skip
            if hit.get("summary"):
                print(f"   {terminal_safe(str(hit['summary']))}")
    if not hits and not as_json:
        print("no hits")
    return EXIT_OK


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
    """Run the search web page (or the report) of the task named in the settings until Ctrl-C."""
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
              f"and no report.html in {settings.output_dir} yet (run the crawl first, or "
              "use manager: plugins.search.SearchManager)", file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
