"""The command line: rccrawler [crawl] --config FILE | crawl URL... | export | stop | status |
drop | demo, and the commands of the crawl's task (search, words, serve...) (SPEC §3)."""

from __future__ import annotations

import argparse
import errno
import logging
import os
import select
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rccrawler.commands import EXIT_CODES, EXIT_OUTPUT_GONE, EXIT_USAGE
from rccrawler.exceptions import ConfigError, StateError
from rccrawler.ui.safetext import TerminalSafeFormatter, TerminalSafeLogRecord

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from rccrawler.config import Settings
    from rccrawler.manager import ApplicationManager, TaskCommand

logger = logging.getLogger("rccrawler")

COMMANDS = ("crawl", "export", "stop", "status", "drop", "demo")
"""The commands of every crawl; a task adds its own (``ApplicationManager.commands``)."""
TASK_COMMANDS = """a task adds its own commands (plugins.search.SearchManager: search, words,
serve; the default task: serve); see them with: rccrawler COMMAND --config FILE --help
(or --state DIR, or --site URL for a quick crawl)"""
SHIPPED_TASKS = (
    "plugins.webgraph.WebGraphManager", "plugins.search.SearchManager",
    "plugins.archive.ArchiveManager", "plugins.linkcheck.LinkCheckManager",
    "plugins.contacts.ContactsManager",
)  # fmt: skip
"""The tasks that come with rccrawler, by dotted path (loaded, like the default task,
only when a command asks): ``rccrawler serve --help`` with no crawl named says which of
them add ``serve``."""
_STATE_ERRNOS = (errno.EACCES, errno.EPERM, errno.EROFS, errno.EISDIR, errno.ENOTDIR,
                 errno.ENOENT)  # fmt: skip


def _parser(task_commands: Mapping[str, TaskCommand]) -> argparse.ArgumentParser:
    from rccrawler import __version__

    common = argparse.ArgumentParser(add_help=False)
    logs = common.add_argument_group("logging")
    logs.add_argument("-v", "--verbose", action="store_true",
                      help="debug lines, and one line per fetch (status, URL, ms)")  # fmt: skip
    logs.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")
    logs.add_argument("--log-file", metavar="FILE",
                      help="also write the whole log to FILE, whatever -q says")  # fmt: skip
    from rccrawler.commands.selection import add_crawl_arguments

    named = argparse.ArgumentParser(add_help=False)
    add_crawl_arguments(named)
    task_named = argparse.ArgumentParser(add_help=False)
    add_crawl_arguments(task_named, urls="option")
    parser = argparse.ArgumentParser(
        prog="rccrawler",
        description="Crawl sites breadth-first into per-site web graphs. "
        "'rccrawler --config FILE' is 'rccrawler crawl --config FILE'.",
        epilog=f"{TASK_COMMANDS}\n\n{EXIT_CODES}",
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
        "defaults (state and output in ./rccrawler-HOST/); a resumed crawl takes the "
        "settings as they are now",
        named,
    )
    again = crawl.add_mutually_exclusive_group()
    again.add_argument("--fresh", action="store_true",
                       help="discard the crawl's saved state and output files first "
                       "(never other files); refused while the crawl runs")  # fmt: skip
    again.add_argument("--refresh", action="store_true",
                       help="a new run of a finished crawl: every page asked again (with "
                       "If-None-Match/If-Modified-Since), and what changed since the last "
                       "run written (H.changes.csv); a refresh under way resumes")  # fmt: skip
    crawl.add_argument("--no-tui", action="store_true", help="plain log lines, no live view")
    crawl.add_argument("-s", "--set", action="append", default=[], metavar="KEY=VALUE",
                       help="a setting for this run, over the file's or the defaults, e.g. "
                       "-s crawl.crawl_delay_ms=200 (VALUE is YAML)")  # fmt: skip
    command("export", "write the output files of a stopped or running crawl from its "
            "saved state (the crawl is not disturbed)", named)  # fmt: skip
    command("stop", "ask a running crawl to stop and save its state", named)
    status = command("status", "print the progress of a running or saved crawl", named)
    status.add_argument("--json", action="store_true", help="print one JSON object")
    drop = command("drop", "remove a crawl's saved state (its SQLite file or PostgreSQL "
                   "schema); refused while a worker of it runs", named)  # fmt: skip
    drop.add_argument("--yes", "-y", action="store_true", help="do not ask first")
    drop.add_argument("--output", action="store_true",
                      help="also remove the crawl's output files (never other files)")  # fmt: skip
    demo = command("demo", "crawl a bundled sample site on loopback and print the report")
    demo.add_argument("--output", metavar="DIR", help="where to write (default output/demo)")
    demo.add_argument("--no-tui", action="store_true", help="plain log lines, no live view")
    demo.add_argument("--serve", action="store_true",
                      help="only serve the sample site on 127.0.0.1, until Ctrl-C, to crawl it "
                      "yourself (config/sample.yaml does)")  # fmt: skip
    demo.add_argument("--port", type=int,
                      help="where --serve listens (default 8765; 0: any free port)")  # fmt: skip
    for name, task_command in task_commands.items():
        task_parser = command(name, task_command.help, task_named)
        if task_command.arguments is not None:
            task_command.arguments(task_parser)
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


def task_of_command(args: Sequence[str]) -> tuple[type[ApplicationManager], Settings] | None:
    """The task and settings of a task's own command (``rccrawler search --config FILE``,
    ``--state DIR`` or ``--site URL``): the command line knows those commands only once
    it has found the crawl.

    None for the commands of every crawl, and for a task's command that names no crawl
    (:func:`explain_task_command` says what is missing).
    """
    if not args or args[0].startswith("-") or args[0] in COMMANDS:
        return None
    from rccrawler.commands.selection import add_crawl_arguments, chosen_crawl

    finder = argparse.ArgumentParser(add_help=False)
    add_crawl_arguments(finder, urls="option")
    known, _rest = finder.parse_known_args(args[1:])
    if not (known.config or known.state or known.urls):
        return None
    return chosen_crawl(known)


def explain_task_command(name: str) -> str | None:
    """What to say of ``rccrawler NAME`` when NAME is a task's command and no crawl is
    named: which of the shipped tasks add it, and how to name the crawl. None when no
    shipped task has it (a typo: the parser says so)."""
    from rccrawler.loading import load_class
    from rccrawler.manager import ApplicationManager

    tasks = []
    for path in SHIPPED_TASKS:
        try:
            task = load_class("manager", path, ApplicationManager)
        except ConfigError:
            continue  # a task whose dependency is missing adds nothing here
        if name in task.commands:
            tasks.append(path)
    if not tasks:
        return None
    return (
        f"rccrawler {name}: a command of the crawl's task ({', '.join(tasks)} add it, or a "
        f"task of your own): it needs the crawl named, with --config FILE, --state DIR "
        f"or --site URL (a quick crawl): rccrawler {name} --config FILE --help"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit code (see :data:`rccrawler.commands.EXIT_CODES`).

    When the reader of standard output goes away (``rccrawler words ... | head``), the
    rest of the output is dropped without a traceback and the code is 141: a crawl has
    saved its state and written its files by the time it prints.
    """
    try:
        try:
            code = _command(argv)
        except SystemExit:  # argparse's --help, --version and usage errors print first
            sys.stdout.flush()
            raise
        sys.stdout.flush()  # a reader gone is found here, not in the interpreter's exit
        return code
    except BrokenPipeError:
        if not _stdout_gone():
            raise  # another pipe or socket: not the reader of the output
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # what stdout still buffers goes nowhere
        os.close(devnull)
        return EXIT_OUTPUT_GONE


def _stdout_gone() -> bool:
    """Whether standard output is a pipe whose reader has closed it (poll says POLLERR)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)  # errors are reported whatever is asked
        return any(events & select.POLLERR for _fd, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows), no file descriptor
        return False


def _refused(exc: ConfigError | StateError) -> int:
    """A bad config or a refused state: one line on stderr, and exit code 2."""
    what = "bad config: " if isinstance(exc, ConfigError) else ""
    print(f"rccrawler: {what}{exc}", file=sys.stderr)
    return EXIT_USAGE


def _command(argv: Sequence[str] | None) -> int:
    args_list = with_default_command(sys.argv[1:] if argv is None else argv)
    try:
        task = task_of_command(args_list)
    except (ConfigError, StateError) as exc:
        return _refused(exc)
    if task is not None and args_list[0] not in task[0].commands:
        manager_cls = task[0]
        known = ", ".join(sorted(manager_cls.commands)) or "none"
        print(f"rccrawler {args_list[0]}: the task {manager_cls.__name__} has no command "
              f"{args_list[0]!r} (its commands: {known})", file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    named = args_list[0] if args_list and not args_list[0].startswith("-") else ""
    if task is None and named and named not in COMMANDS:
        explanation = explain_task_command(named)
        if explanation is not None:
            print(explanation, file=sys.stderr)
            return EXIT_USAGE
    parser = _parser(task[0].commands if task is not None else {})
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
        if task is not None:
            manager_cls, settings = task
            return manager_cls.commands[args.command].run(manager_cls, settings, args)
        if args.command == "demo":
            from rccrawler.demo import run_demo, serve_sample_site

            if args.serve:
                return serve_sample_site() if args.port is None else serve_sample_site(args.port)
            output = Path(args.output) if args.output else Path("output/demo")
            return run_demo(output, tui=False if args.no_tui else None)
        if args.command == "crawl":
            from rccrawler.commands.crawl import crawl_command

            if sum(map(bool, (args.config, args.state, args.urls))) != 1:
                parser.error("crawl: give --config FILE, --state DIR, or the URLs of the sites "
                             "to crawl (one of them)")  # fmt: skip
            tui = False if args.no_tui else None
            return crawl_command(args, fresh=args.fresh, refresh=args.refresh, tui=tui)
        if not (args.config or args.state or args.urls):
            parser.error(f"{args.command}: give --config FILE, --state DIR or the URLs of a "
                         "quick crawl")  # fmt: skip
        from rccrawler.commands.selection import chosen_crawl

        manager_cls, settings = chosen_crawl(args)
        if args.command == "stop":
            from rccrawler.commands.stop import stop_command

            return stop_command(settings)
        if args.command == "status":
            from rccrawler.commands.status import status_command

            return status_command(settings, as_json=args.json)
        if args.command == "drop":
            from rccrawler.commands.drop import drop_command

            return drop_command(manager_cls, settings, yes=args.yes, output=args.output)
        from rccrawler.commands.export import export_command

        return export_command(manager_cls, settings)
    except (ConfigError, StateError) as exc:
        return _refused(exc)
    except OSError as exc:
        # A read-only or broken state or output folder (--fresh, stop): a state error.
        if exc.errno not in _STATE_ERRNOS:
            raise
        print(f"rccrawler: cannot write {exc.filename or 'the state'}: {exc.strerror}",
              file=sys.stderr)  # fmt: skip
        return EXIT_USAGE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
