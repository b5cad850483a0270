"""Running a crawl from the command line: memory tuning, signals, the live view, the
summary and the exit code. ``rccrawler crawl`` and ``rccrawler demo`` share it."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from rccrawler.commands import EXIT_FAILED, EXIT_OK
from rccrawler.commands.signals import stop_on_signals
from rccrawler.memory import tune_gc, tune_malloc
from rccrawler.ui.safetext import terminal_safe

if TYPE_CHECKING:
    from rccrawler.config import Settings
    from rccrawler.manager import ApplicationManager

RESUME_MESSAGE = "stopped: run the same command to resume"


def start_crawl(
    manager_cls: type[ApplicationManager],
    settings: Settings,
    *,
    fresh: bool,
    refresh: bool = False,
    tui: bool | None = None,
) -> int:
    """Build the crawl's manager, discard its own files first with ``--fresh``, run it
    (a new run of it with ``--refresh``)."""
    from rccrawler.commands.fresh import start_fresh
    from rccrawler.config import check_writable_dirs

    check_writable_dirs(settings)
    manager = manager_cls(settings)
    if fresh:
        start_fresh(manager)  # refused (StateError, exit 2) while the crawl runs
    return run_manager(manager, tui=tui, refresh=refresh)


def run_manager(
    manager: ApplicationManager,
    *,
    summary: bool = True,
    tui: bool | None = None,
    refresh: bool = False,
) -> int:
    """Run a crawl; the first SIGINT/SIGTERM stops it cleanly, a second at once.

    The command line opts into the process-wide memory tuning here (a library user
    building a manager keeps the allocator and collector as they were).

    Args:
        manager: the crawl to run.
        summary: print the report at the end.
        tui: show the live status view; None means "when stdout is a terminal".
        refresh: begin a new run of the finished crawl (``--refresh``).
    """
    if tui is None:
        tui = sys.stdout.isatty()
    view = None
    if tui:
        from rccrawler.ui.status import StatusView

        view = StatusView.for_manager(manager)
        manager.status = view
    tune_malloc()
    tune_gc()
    manager.prepare()  # before the live view's thread: a task may fork here
    with stop_on_signals(manager.context.note_signal, view.abort if view is not None else None):
        try:
            if view is not None:
                view.start()
            # Opened here, not in run(): a resumed crawl says what it found and what
            # changed first (the live view prints it above itself).
            manager.open(refresh=refresh)
            if manager.resume_note:
                print(terminal_safe(manager.resume_note), flush=True)
            finished = manager.run()
        except BaseException:
            manager.close()  # run() closes what it opened; a failure before it, too
            raise
        finally:
            # The live view ends first, so that what follows prints below its last frame.
            if view is not None:
                view.stop()
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
    sites = report.get("sites", {})
    assert isinstance(sites, dict)
    if tui:
        from rccrawler.ui.status import print_report

        print_report(report, manager.settings.output_dir)
    else:
        for host, site in sites.items():
            print(terminal_safe(
                f"{host}: {site['pages_done']} pages, {site['errors']} errors, "
                f"{site['duplicates']} duplicates, {site['bytes']} bytes, "
                f"{site['elapsed_s']} s — {site['stop_reason']}"
            ))  # fmt: skip
    for host, site in sites.items():
        if "changes" in site:
            print(terminal_safe(f"{host}: {changes_line(site['changes'])}"))
    if not tui:
        print(f"results in {manager.settings.output_dir}")


def changes_line(changes: dict[str, int]) -> str:
    """A refresh's changes of one site in a line: ``since run 1: 3 changed, …``."""
    kinds = ("changed", "added", "removed", "redirected", "unchanged")
    counts = ", ".join(f"{changes.get(kind, 0)} {kind}" for kind in kinds)
    return (
        f"since run {changes['since_run']}: {counts}; arcs {changes.get('arcs_added', 0)} "
        f"added, {changes.get('arcs_removed', 0)} removed"
    )
