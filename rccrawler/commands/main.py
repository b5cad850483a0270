"""The command line: rccrawler [crawl] --config FILE | crawl URL... | export | stop | status |
search | words | serve | demo (SPEC §3)."""

from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rccrawler.exceptions import ConfigError, RCCrawlerError, StateError
from rccrawler.ui.safetext import (
    TerminalSafeFormatter,
    TerminalSafeLogRecord,
    json_terminal_safe,
    terminal_safe,
)

if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import FrameType

    from rccrawler.config import Settings
    from rccrawler.manager import ApplicationManager

logger = logging.getLogger("rccrawler")

EXIT_OK = 0
"""The crawl ran and every site fetched something (or: the command did what it said)."""
EXIT_FAILED = 1
"""Some site failed entirely (unreachable, robots.txt 5xx), or writing the output failed."""
EXIT_USAGE = 2
"""Usage, settings or state error: nothing was crawled or written."""
EXIT_INTERRUPTED = 130
"""Interrupted twice: stopped at once (the finished pages are saved)."""
RESUME_MESSAGE = "stopped: run the same command to resume"
COMMANDS = ("crawl", "export", "stop", "status", "search", "words", "serve", "demo")
EXIT_CODES = """exit codes:
  0    the crawl ran and every site fetched something (or it was stopped, to resume)
  1    some site failed entirely (unreachable, robots.txt 5xx) or writing output failed
  2    usage, settings or state error (nothing crawled or written)
  130  interrupted twice (Ctrl-C, Ctrl-C)"""
_STATE_ERRNOS = (errno.EACCES, errno.EPERM, errno.EROFS, errno.EISDIR, errno.ENOTDIR,
                 errno.ENOENT)  # fmt: skip


def _parser() -> argparse.ArgumentParser:
    from rccrawler import __version__

    common = argparse.ArgumentParser(add_help=False)
    logs = common.add_argument_group("logging")
    logs.add_argument("-v", "--verbose", action="store_true",
                      help="debug lines, and one line per fetch (status, URL, ms)")  # fmt: skip
    logs.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")
    logs.add_argument("--log-file", metavar="FILE",
                      help="also write the whole log to FILE, whatever -q says")  # fmt: skip
    config = argparse.ArgumentParser(add_help=False)
    config.add_argument("--config", "-c", metavar="FILE", required=True,
                        help="settings.yaml of the crawl")  # fmt: skip
    parser = argparse.ArgumentParser(
        prog="rccrawler",
        description="Crawl sites breadth-first into per-site web graphs. "
        "'rccrawler --config FILE' is 'rccrawler crawl --config FILE'.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"rccrawler {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")

    def command(name: str, help: str, *parents: argparse.ArgumentParser) -> argparse.ArgumentParser:
        return commands.add_parser(
            name, help=help, description=help, parents=[*parents, common], epilog=EXIT_CODES,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )  # fmt: skip

    crawl = command(
        "crawl",
        "run or resume a crawl: the one FILE describes, or a quick crawl of URLs with "
        "defaults (state and output in ./rccrawler-HOST/)",
    )
    crawl.add_argument("urls", nargs="*", metavar="URL", help="sites to crawl without a FILE")
    crawl.add_argument("--config", "-c", metavar="FILE", help="settings.yaml of the crawl")
    crawl.add_argument("--fresh", action="store_true",
                       help="discard the crawl's saved state and output files first "
                       "(never other files); refused while the crawl runs")  # fmt: skip
    crawl.add_argument("--no-tui", action="store_true", help="plain log lines, no live view")
    crawl.add_argument("-s", "--set", action="append", default=[], metavar="KEY=VALUE",
                       help="with URLs: a setting, e.g. -s crawl.crawl_delay_ms=200 "
                       "(VALUE is YAML)")  # fmt: skip
    command("export", "write the output files of a stopped or running crawl from its "
            "saved state (the crawl is not disturbed)", config)  # fmt: skip
    command("stop", "ask a running crawl to stop and save its state", config)
    status = command("status", "print the progress of a running or saved crawl", config)
    status.add_argument("--json", action="store_true", help="print one JSON object")
    search = command("search", "search the crawl's index", config)
    search.add_argument("terms", nargs="+", metavar="QUERY", help="the query")
    search.add_argument("--json", action="store_true", help="one JSON object per hit")
    search.add_argument("--limit", type=int, default=10, metavar="N",
                        help="at most N hits (default 10)")  # fmt: skip
    words = command("words", "list indexed words with their document counts", config)
    words.add_argument("prefix", nargs="?", default="", metavar="PREFIX",
                       help="only words starting with PREFIX")  # fmt: skip
    words.add_argument("--limit", type=int, default=None, metavar="N",
                       help="at most N words (default all)")  # fmt: skip
    serve = command("serve", "serve the search web page", config)
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    demo = command("demo", "crawl a bundled sample site on loopback and print the report")
    demo.add_argument("--output", metavar="DIR", help="where to write (default output/demo)")
    demo.add_argument("--no-tui", action="store_true", help="plain log lines, no live view")
    return parser


def setup_logging(verbose: bool, quiet: bool, log_file: str | None) -> None:
    """The terminal gets what -v/-q ask for; a --log-file gets the whole log (INFO, or
    DEBUG with -v) whatever -q says."""
    terminal_level = logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO
    file_level = logging.DEBUG if verbose else logging.INFO
    stream = logging.StreamHandler(sys.stderr)
    stream.setLevel(terminal_level)
    handlers: list[logging.Handler] = [stream]
    if log_file:
        file_handler = logging.FileHandler(log_file, encoding="utf-8")
        file_handler.setLevel(file_level)
        handlers.append(file_handler)
    # Messages carry crawled text: escape control characters for every handler.
    logging.setLogRecordFactory(TerminalSafeLogRecord)
    formatter = TerminalSafeFormatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    for handler in handlers:
        handler.setFormatter(formatter)
    logging.basicConfig(
        level=min(terminal_level, file_level) if log_file else terminal_level,
        handlers=handlers,
        force=True,
    )
    logging.getLogger("urllib3").setLevel(logging.ERROR)


def with_default_command(argv: Sequence[str]) -> list[str]:
    """``rccrawler --config FILE`` means ``rccrawler crawl --config FILE`` (SPEC §3).

    Only options come before an implied ``crawl``: a mistyped command is an error,
    not the URL of a site to crawl."""
    args = list(argv)
    if args and args[0].startswith("-") and args[0] not in ("-h", "--help", "--version"):
        args.insert(0, "crawl")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args_list = with_default_command(sys.argv[1:] if argv is None else argv)
    if not args_list:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    args = parser.parse_args(args_list)
    try:
        setup_logging(args.verbose, args.quiet, args.log_file)
    except OSError as exc:
        print(f"rccrawler: --log-file: cannot write {args.log_file}: {exc.strerror}",
              file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    try:
        if args.command == "demo":
            from rccrawler.demo import run_demo

            output = Path(args.output) if args.output else Path("output/demo")
            return run_demo(output, tui=False if args.no_tui else None)
        if args.command == "stop":
            return stop_command(args.config)
        if args.command == "status":
            return status_command(args.config, as_json=args.json)
        if args.command == "export":
            return export_command(args.config)
        if args.command == "search":
            return search_command(args.config, " ".join(args.terms), args.limit,
                                  as_json=args.json)  # fmt: skip
        if args.command == "words":
            return words_command(args.config, args.prefix, args.limit)
        if args.command == "serve":
            return serve_command(args.config, args.host, args.port)
        tui = False if args.no_tui else None
        if args.config and (args.urls or args.set):
            parser.error("crawl: give --config FILE or URLs (with -s KEY=VALUE), not both")
        if args.config:
            return crawl_command(args.config, fresh=args.fresh, tui=tui)
        if not args.urls:
            parser.error("crawl: give --config FILE, or the URLs of the sites to crawl")
        return quick_crawl_command(args.urls, args.set, fresh=args.fresh, tui=tui)
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
    from rccrawler.manager import load_settings

    manager_cls, settings = load_settings(config)
    return start_crawl(manager_cls, settings, fresh=fresh, tui=tui)


def quick_crawl_command(
    urls: Sequence[str], overrides: Sequence[str], *, fresh: bool, tui: bool | None = None
) -> int:
    """``rccrawler crawl URL...``: the default task and settings, no settings file; the
    state and the output go to ``./rccrawler-HOST/`` (HOST of the first URL)."""
    import yaml

    from rccrawler.config import Settings, settings_from_mapping
    from rccrawler.loading import load_class
    from rccrawler.manager import ApplicationManager
    from rccrawler.unloaders import host_file_stem
    from rccrawler.web.urls import host_of, site_start_url

    try:
        first = host_of(site_start_url(urls[0]))
    except ValueError as exc:
        raise ConfigError("URL", f"{urls[0]!r}: {exc}") from exc
    folder = Path(f"rccrawler-{host_file_stem(first)}")
    raw: dict[str, Any] = {"sites": list(urls), "state_dir": str(folder / "state"),
                           "output_dir": str(folder)}  # fmt: skip
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ConfigError("-s", f"{item!r} is not KEY=VALUE")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(key, f"{text!r} is not a YAML value") from exc
        target = raw
        *parents, last = key.split(".")
        for part in parents:
            target = target.setdefault(part, {})
            if not isinstance(target, dict):
                raise ConfigError(key, f"{part} is not a section")
        target[last] = value
    manager_path = raw.get("manager", Settings.__dataclass_fields__["manager"].default)
    manager_cls = load_class("manager", manager_path, ApplicationManager)
    settings = settings_from_mapping(raw, allowed_sections=frozenset(manager_cls.settings_sections))
    manager_cls.check_settings(settings)
    return start_crawl(manager_cls, settings, fresh=fresh, tui=tui)


def start_crawl(
    manager_cls: type[ApplicationManager],
    settings: Settings,
    *,
    fresh: bool,
    tui: bool | None = None,
) -> int:
    """Build the crawl's manager, discard its own files first with ``--fresh``, run it."""
    from rccrawler.commands.fresh import start_fresh
    from rccrawler.config import check_writable_dirs

    check_writable_dirs(settings)
    manager = manager_cls(settings)
    if fresh:
        start_fresh(manager)  # refused (StateError, exit 2) while the crawl runs
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
            os._exit(EXIT_INTERRUPTED)
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
    return crawl_outcome(manager)


def crawl_outcome(manager: ApplicationManager) -> int:
    """The exit code of a finished crawl, with one line on stderr for each kind of
    failure: which sites failed entirely and why, which output could not be written."""
    code = EXIT_OK
    failed = manager.failed_sites
    if failed:
        total = len(manager.settings.sites)
        sites = "; ".join(f"{host} ({why})" for host, why in failed.items())
        print(terminal_safe(f"rccrawler: {len(failed)} of {total} sites failed, nothing "
                            f"fetched: {sites}"), file=sys.stderr)  # fmt: skip
        code = EXIT_FAILED
    if manager.unload_failures:
        print(terminal_safe(f"rccrawler: writing the output failed: "
                            f"{'; '.join(manager.unload_failures)}"), file=sys.stderr)  # fmt: skip
        code = EXIT_FAILED
    return code


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
    from rccrawler.manager import STOP_FILE, load_settings, state_in_use

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
    if not state_in_use(settings.state_dir):
        print(f"rccrawler stop: no crawl is running in {settings.state_dir}", file=sys.stderr)
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
    with open_storage(settings) as data:
        stats = data.statistics()
        # SQLite: the state lock is held; PostgreSQL: a worker's advisory lock is.
        running = data.live_workers() > 0 if is_shared(settings) else (
            state_in_use(settings.state_dir))  # fmt: skip
    unfinished = "running" if running else "stopped (run the crawl again to resume)"
    # The figures of report.json under the same names (README, "What it writes").
    rows = [
        {
            "host": h.host, "done": h.done, "waiting": h.waiting,
            "running": h.running + h.downloaded,
            "errors": h.errors, "errors_by_kind": dict(h.errors_by_kind),
            "duplicates": h.duplicates, "bytes": h.bytes,
            "stop_reason": h.stop_reason or unfinished,
        }
        for h in stats.hosts
    ]  # fmt: skip
    if as_json:
        print(json.dumps({"running": running, "sites": rows,
                          "pages_done": sum(h.done for h in stats.hosts)}))  # fmt: skip
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
    bold = sys.stdout.isatty()
    for rank, hit in enumerate(hits, 1):
        # Titles, URLs and snippets are crawled text (terminal_safe).
        if as_json:
            print(json_terminal_safe(json.dumps(hit, ensure_ascii=False)))
        else:
            print(f"{rank}. {terminal_safe(str(hit['title']))}  ({hit['score']})\n"
                  f"   {terminal_safe(str(hit['url']))}")  # fmt: skip
            text = hit.get("snippet") or hit.get("summary") or ""
            if text:
                print(f"   {marked(str(text), hit.get('marks', ()), bold=bold)}")
    if not hits and not as_json:
        print("no hits")
    return EXIT_OK


def marked(text: str, marks: Sequence[Sequence[int]], *, bold: bool) -> str:
    """``text`` made safe for a terminal, the (start, end) spans in ANSI bold or in
    brackets (``[…]`` when the output is not a terminal)."""
    opening, closing = ("\x1b[1m", "\x1b[22m") if bold else ("[", "]")
    parts, at = [], 0
    for start, end in marks:
        parts += [terminal_safe(text[at:start]), opening, terminal_safe(text[start:end]), closing]
        at = end
    parts.append(terminal_safe(text[at:]))
    return "".join(parts)


def export_command(config: str) -> int:
    """Write the output files of a stopped or running crawl from its saved state, read
    the way ``status`` reads it: a running crawl goes on undisturbed."""
    from rccrawler.data.storage import is_shared, open_storage
    from rccrawler.manager import load_settings, state_in_use

    manager_cls, settings = load_settings(config)
    manager = manager_cls(settings)
    try:
        with open_storage(settings, task_tables=manager_cls.task_tables) as data:
            manager.data = data
            manager.finished = manager.finisher.crawl_finished(data.statistics())
            running = not is_shared(settings) and state_in_use(settings.state_dir)
            manager.stop_reason = (
                "finished" if manager.finished else "running" if running else "stopped"
            )
            manager.unload()
    finally:
        manager.fetcher.close()
    if manager.unload_failures:
        failures = ", ".join(manager.unload_failures)
        print(f"rccrawler export: writing the output failed ({failures}); the log says why",
              file=sys.stderr)  # fmt: skip
        return EXIT_FAILED
    print(f"exported the {manager.stop_reason} crawl to {settings.output_dir}")
    return EXIT_OK


def words_command(config: str, prefix: str, limit: int | None = None) -> int:
    """List the indexed words (starting with ``prefix``) with their document counts."""
    from rccrawler.manager import load_settings

    manager_cls, settings = load_settings(config)
    found = manager_cls.words(settings, prefix)
    if found is None:
        print(f"rccrawler words: the task {manager_cls.__name__} has no search index "
              "(use manager: plugins.search.SearchManager)", file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    if limit is not None and limit < 1:
        print("rccrawler words: --limit must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    for word, count in found[:limit]:
        print(f"{word}\t{count}")
    return EXIT_OK


def serve_command(config: str, host: str, port: int) -> int:
    """Run the search web page (or the report) of the task named in the settings until Ctrl-C."""
    from rccrawler.manager import load_settings

    manager_cls, settings = load_settings(config)
    try:
        served = manager_cls.serve(settings, host, port)
    except OSError as exc:
        print(f"rccrawler serve: cannot listen on {host}:{port}: {exc.strerror or exc}",
              file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
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
