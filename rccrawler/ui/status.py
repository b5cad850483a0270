"""The live terminal status view and the end-of-crawl report table (the only rich importer).

The view never asks the DataManager anything: the RoutineThread hands it
``DataManager.statistics()`` snapshots (frozen ``CrawlStats`` built from running
counters) through :meth:`StatusView.update`, and rich's ``Live`` refresh thread
draws the latest one a few times a second. Rates are differences between
snapshots, so the view's cost does not grow with the size of the crawl.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import deque
from datetime import datetime
from typing import IO, TYPE_CHECKING, Any

from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.measure import Measurement
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from rccrawler.ui.safetext import terminal_safe

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping
    from pathlib import Path

    from rich.console import ConsoleOptions, RenderableType, RenderResult

    from rccrawler.manager import ApplicationManager
    from rccrawler.records import CrawlStats, HostStats

__all__ = ["StatusView", "WarningBuffer", "print_report"]

RATE_WINDOW = 10.0
"""Seconds over which pages/s and MB/s are measured."""
FIXED_LINES = 9
"""Lines of the view that are not site rows or warnings: the title, the table's head
and rule, the total row and its rule, the rates and threads lines, the warnings
heading, and one spare line for the cursor."""


class WarningBuffer(logging.Handler):
    """Keeps the last ``capacity`` warnings for the view: recent trouble at a glance,
    not a scrolling log that would push the table off the screen.

    Args:
        capacity: how many records to keep.
        level: the lowest level kept.
    """

    def __init__(self, capacity: int = 5, level: int = logging.WARNING) -> None:
        super().__init__(level)
        self._records: deque[tuple[float, str, str]] = deque(maxlen=capacity)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:
            self.handleError(record)
            return
        # handle() holds self.lock around emit(); recent() takes it too.
        first_line = message.splitlines()[0] if message else ""
        self._records.append((record.created, record.levelname, first_line))

    def recent(self) -> list[tuple[float, str, str]]:
        """(created, levelname, first line of the message), oldest first."""
        with self.lock:  # type: ignore[union-attr]  # createLock() always sets it
            return list(self._records)


class StatusView:
    """The live view of a running crawl: one row per site, totals, threads, warnings.

    Build it with :meth:`for_manager`, :meth:`start` it before ``manager.run()``
    and :meth:`stop` it after; the RoutineThread calls :meth:`update`. While it
    runs it takes over terminal logging: warnings go to its warnings panel
    (:class:`WarningBuffer`), errors are printed above it, and a log file, if
    any, gets everything as before.

    Args:
        downloading_threads: how many DownloadingThreads the crawl runs.
        parsing_threads: how many ParsingThreads the crawl runs.
        console: where to draw; by default a console on stdout.
        file: a file for a new console (``force_terminal``), e.g. /dev/null in benchmarks.
        width: console width when ``file`` is given.
        height: console height when ``file`` is given.
        refresh_per_second: redraws per second.
        warnings: the handler whose records are shown; a new one by default.
        clock: monotonic time source (tests pass their own).
    """

    def __init__(
        self,
        *,
        downloading_threads: int,
        parsing_threads: int,
        console: Console | None = None,
        file: IO[str] | None = None,
        width: int | None = None,
        height: int | None = None,
        refresh_per_second: float = 2.0,
        warnings: WarningBuffer | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        assert refresh_per_second > 0, "refresh_per_second must be > 0"
        if console is None:
            console = (
                Console(file=file, force_terminal=True, width=width, height=height)
                if file is not None
                else Console()
            )
        self.console = console
        self.downloading_threads = downloading_threads
        self.parsing_threads = parsing_threads
        self.refresh_per_second = refresh_per_second
        self.warnings = warnings if warnings is not None else WarningBuffer()
        self.clock = clock
        self._lock = threading.Lock()
        self._samples: deque[tuple[float, CrawlStats]] = deque()
        self._progress: tuple[str, int, int] | None = None
        self._started_at: float | None = None
        self._stopped_at: float | None = None
        self._live: Live | None = None
        self._muted: list[tuple[logging.StreamHandler[Any], int, Any]] = []

    @classmethod
    def for_manager(cls, manager: ApplicationManager, **kwargs: Any) -> StatusView:
        """A view of ``manager``'s crawl; its thread totals come from the settings."""
        return cls(
            downloading_threads=manager.settings.downloading_threads or 0,
            parsing_threads=manager.settings.parsing_threads,
            **kwargs,
        )

    # -- feeding -----------------------------------------------------------
    def update(self, stats: CrawlStats) -> None:
        """Take a new snapshot (called by the RoutineThread a few times a second)."""
        now = self.clock()
        with self._lock:
            self._samples.append((now, stats))
            # Keep one sample at or before the window's start, so the rate spans it whole.
            while len(self._samples) > 2 and self._samples[1][0] <= now - RATE_WINDOW:
                self._samples.popleft()

    def progress(self, what: str, done: int, total: int) -> None:
        """Show how far work after the crawl has come (the link checker's external links),
        on a line of its own below the threads."""
        with self._lock:
            self._progress = (what, done, total)

    def snapshots(self) -> list[CrawlStats]:
        """The snapshots in the rate window, oldest first."""
        with self._lock:
            return [stats for _t, stats in self._samples]

    # -- lifecycle ---------------------------------------------------------
    def start(self) -> None:
        """Start drawing (and take over terminal logging). Calling it twice is harmless."""
        if self._live is not None:
            return
        self._started_at = self.clock()
        self._stopped_at = None
        self._live = Live(
            get_renderable=lambda: self,
            console=self.console,
            refresh_per_second=self.refresh_per_second,
            transient=False,
            redirect_stdout=True,
            redirect_stderr=True,
        )
        self._live.start(refresh=True)
        self._take_over_logging()

    def stop(self) -> None:
        """Draw the last frame, leave it on the screen and give logging back. Idempotent."""
        live, self._live = self._live, None
        if live is None:
            return
        self._stopped_at = self.clock()
        try:
            live.stop()
        finally:
            self._give_back_logging()

    def abort(self) -> None:
        """Make the terminal usable before a hard exit (a second Ctrl-C): show the cursor."""
        if self._live is not None:
            self.console.show_cursor(True)

    @property
    def running(self) -> bool:
        return self._live is not None

    def _take_over_logging(self) -> None:
        root = logging.getLogger()
        root.addHandler(self.warnings)
        for handler in root.handlers:
            # Only plain stream handlers writing to a terminal: a --log-file keeps everything.
            if type(handler) is logging.StreamHandler and _is_terminal(handler.stream):
                self._muted.append((handler, handler.level, handler.stream))
                handler.setLevel(max(handler.level, logging.ERROR))
                # Live has swapped sys.stderr for a proxy that prints above the view.
                handler.setStream(sys.stderr)

    def _give_back_logging(self) -> None:
        logging.getLogger().removeHandler(self.warnings)
        for handler, level, stream in self._muted:
            handler.setLevel(level)
            handler.setStream(stream)
        self._muted.clear()

    # -- drawing -------------------------------------------------------------
    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.render(height=options.size.height, width=options.max_width)

    def render(self, height: int = 40, width: int = 120) -> RenderableType:
        """The whole view for a screen of ``height`` lines, from the latest snapshot."""
        with self._lock:
            samples = list(self._samples)
            progress = self._progress
        if not samples:
            # Stopped before the crawl ran (its state was locked, say): leave no frame behind.
            return Text("") if self._stopped_at is not None else Text("rccrawler: starting…")
        (t_old, old), (t_new, new) = samples[0], samples[-1]
        span = t_new - t_old
        pages_rate = (new.pages_done - old.pages_done) / span if span > 0 else 0.0
        bytes_rate = (new.bytes - old.bytes) / span if span > 0 else 0.0
        before = {host.host: host for host in old.hosts} if span > 0 else {}

        warnings = self.warnings.recent()
        room = max(3, height - FIXED_LINES - len(warnings) - (progress is not None))
        shown, rest = _pick_rows(new.hosts, before, room)

        # Below 100 columns the bar and the parsing column give their room to the site
        # names (the % stays, and running still counts the requests in flight).
        bar_width = 20 if width >= 130 else 12 if width >= 100 else 0
        wide = width >= 100
        # Narrow gaps (one pad + the box's blank separator): the row must fit 100 columns.
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
        # Site and status are the columns that give way on a narrow screen (their cells
        # are cut with an ellipsis), so the numbers always show whole.
        table.add_column("site", min_width=10, max_width=32)
        for name in ("done", "waiting", "running", *(["parsing"] if wide else []), "errors",
                     "dups"):  # fmt: skip
            table.add_column(name, justify="right", no_wrap=True, min_width=len(name))
        table.add_column("delay", justify="right", no_wrap=True, min_width=5)
        if bar_width:
            table.add_column("progress", no_wrap=True, width=bar_width)
        table.add_column("", justify="right", no_wrap=True, width=4)
        # On a narrow screen the status gives way before the site names do.
        table.add_column("status", min_width=8, max_width=None if bar_width else 10)
        for host in shown:
            table.add_row(
                *_row(HostCell(host.host), [host], bar_width, _host_status(host), parsing=wide)
            )
        if rest:
            crawling = sum(1 for host in rest if not host.stop_reason)
            table.add_row(
                *_row(
                    _cut(f"+ {len(rest)} more sites"),
                    rest,
                    bar_width,
                    _cut(f"{crawling} crawling, {len(rest) - crawling} finished", "dim"),
                    parsing=wide,
                ),
                style="italic",
            )
        crawling = sum(1 for host in new.hosts if not host.stop_reason)
        counts = f"{crawling} crawling, {len(new.hosts) - crawling} finished"
        table.add_section()
        table.add_row(
            *_row(_cut("total"), new.hosts, bar_width, _cut(counts), parsing=wide), style="bold"
        )

        now = self._stopped_at if self._stopped_at is not None else self.clock()
        elapsed = now - (self._started_at if self._started_at is not None else samples[0][0])
        rates = Text.assemble(
            (f"{pages_rate:,.1f}", "bold cyan"),
            " pages/s  ",
            (f"{bytes_rate / 1e6:,.2f}", "bold cyan"),
            f" MB/s  (last {min(span, RATE_WINDOW):.0f} s)   {_bytes(new.bytes)} downloaded",
        )
        threads = Text.assemble(
            "threads  downloading ",
            # An automatic pool's size is in the snapshot; a fixed one's in the settings.
            _busy(new.downloading, new.downloading_threads or self.downloading_threads),
            "   parsing ",
            _busy(new.parsing, self.parsing_threads),
        )
        title = Text.assemble(
            ("rccrawler", "bold"),
            f"  {len(new.hosts)} site{'s' if len(new.hosts) != 1 else ''}: {counts}   elapsed ",
            (_duration(elapsed), "bold"),
            "   ETA ",
            (_eta(new, pages_rate), "bold"),
        )
        lines: list[RenderableType] = [title, table, rates, threads]
        if progress is not None:
            what, done, total = progress
            lines.append(Text.assemble(
                f"{what}  ", (f"{done:,}", "bold"), f" of {total:,}",
                " (done)" if done >= total else "",
            ))  # fmt: skip
        return Group(*lines, _warnings_panel(warnings))


# -- rows ------------------------------------------------------------------------


def _pick_rows(
    hosts: tuple[HostStats, ...], before: Mapping[str, HostStats], room: int
) -> tuple[list[HostStats], list[HostStats]]:
    """The sites that get a row of their own, and the rest (summed up in one row).

    When every site fits, they keep the order of the settings, so rows do not jump
    about. Otherwise the failing ones come first (errors in the rate window, then
    sites that ended with errors among the finished), then the busiest.
    """
    if len(hosts) <= room:
        return list(hosts), []

    def rank(host: HostStats) -> tuple[int, int, int, int, str]:
        old = before.get(host.host)
        new_errors = host.errors - old.errors if old else 0
        new_done = host.done - old.done if old else 0
        in_progress = host.running + host.downloaded
        if host.stop_reason:
            bucket = 3 if host.errors or host.done == 0 else 4
        elif new_errors > 0:
            bucket = 0
        elif in_progress or new_done:
            bucket = 1
        else:
            bucket = 2
        return (bucket, -new_errors, -new_done, -in_progress, host.host)

    ordered = sorted(hosts, key=rank)
    return ordered[: room - 1], ordered[room - 1 :]


def _cut(text: str, style: str = "") -> Text:
    """A one-line cell that ends in an ellipsis when its column is narrowed."""
    return Text(terminal_safe(text), style=style, no_wrap=True, overflow="ellipsis")


def shorten_middle(host: str, width: int) -> str:
    """``host`` in at most ``width`` cells, shortened in the middle with "…" and its
    ``:port`` kept whole: hosts that differ only at their ends (``127.0.0.1:8081`` and
    ``127.0.0.1:8082``, ``a.docs.example.org`` and ``b.docs.example.org``) stay apart."""
    if len(host) <= width:
        return host
    name, colon, port = host.rpartition(":")
    tail = f"{colon}{port}" if colon and port.isdigit() else ""
    name = name if tail else host
    room = width - len(tail) - 1  # the ellipsis takes one cell
    if room < 2:
        return host[: max(0, width - 1)] + "…" if width > 0 else ""
    front = (room + 1) // 2
    back = room - front
    return f"{name[:front]}…{name[len(name) - back :] if back else ''}{tail}"


class HostCell:
    """A site cell that gives way in its middle when the column is narrowed, so the
    part that tells sites apart (the start, the end, the port) stays readable."""

    def __init__(self, host: str, min_width: int = 15) -> None:
        self.host = terminal_safe(host)  # a host name is the site's to choose
        self.min_width = min_width

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(min(len(self.host), self.min_width), len(self.host))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield Text(shorten_middle(self.host, options.max_width), no_wrap=True)


def _row(
    label: RenderableType,
    hosts: Iterable[HostStats],
    bar_width: int,
    status: Text,
    *,
    parsing: bool = True,
) -> list[RenderableType]:
    """The cells of a row: one site's, or the sum of several; ``parsing``: with the
    column of the pages waiting for (or in) a parser."""
    done = waiting = requests = to_parse = errors = duplicates = skipped = 0
    delays: list[float] = []
    for host in hosts:
        done += host.done
        waiting += host.waiting
        requests += host.requests
        to_parse += host.to_parse
        errors += host.errors
        duplicates += host.duplicates
        skipped += host.skipped
        delays.append(host.crawl_delay)
    # "Done out of done + waiting", where done is every finished page (errors and
    # skips included), and waiting every page not finished yet.
    finished = done + errors + duplicates + skipped
    total = finished + waiting + requests + to_parse
    # A summed-up row shows the slowest of its sites.
    delay = _delay(delays[0]) if len(set(delays)) == 1 else "≤" + _delay(max(delays, default=0))
    bar: list[RenderableType] = (
        [ProgressBar(total=max(total, 1), completed=finished if total else 0, width=bar_width)]
        if bar_width
        else []
    )
    return [
        label,
        f"{done:,}",
        f"{waiting:,}",
        f"{requests:,}",
        *([f"{to_parse:,}"] if parsing else []),
        Text(f"{errors:,}", style="red" if errors else ""),
        f"{duplicates:,}",
        delay,
        *bar,
        f"{100 * finished // total if total else 0}%",
        status,
    ]


def _host_status(host: HostStats) -> Text:
    if host.stop_reason:
        calm = host.stop_reason.startswith(("no waiting links", "max_pages"))
        return _cut(host.stop_reason, "green" if calm else "yellow")
    if host.robots_state != "ready":
        return _cut("robots.txt…", "dim")
    if host.active:
        return _cut("crawling", "cyan")
    return _cut("finishing", "dim")


def _warnings_panel(warnings: list[tuple[float, str, str]]) -> RenderableType:
    if not warnings:
        return Text("no warnings", style="dim")
    lines = [Text("recent warnings", style="bold yellow")]
    for created, level, message in warnings:
        stamp = datetime.fromtimestamp(created).strftime("%H:%M:%S")
        style = "red" if level in ("ERROR", "CRITICAL") else "yellow"
        lines.append(Text.assemble(f"  {stamp} ", (terminal_safe(message), style), no_wrap=True))
    return Group(*lines)


# -- numbers ---------------------------------------------------------------------


def _busy(busy: int, total: int) -> Text:
    busy = min(busy, total)  # several processes may share the crawl (SPEC §9)
    return Text.assemble((f"{busy}", "bold"), f"/{total} busy, {total - busy} idle")


def _delay(seconds: float) -> str:
    return f"{seconds * 1000:.0f}ms" if seconds < 1 else f"{seconds:.1f}s"


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _eta(stats: CrawlStats, pages_rate: float) -> str:
    """Time left for the pages already queued, at the current rate and crawl delays.

    It is an estimate (``~``) only when every unfinished site is at its page budget,
    so no new page can join; otherwise it is a lower bound (``≥``): pages not
    found yet are bound to add to it.
    """
    unfinished = [host for host in stats.hosts if not host.stop_reason]
    if not unfinished:
        return "done"
    queued = sum(host.active for host in unfinished)
    if pages_rate <= 0 or queued == 0:
        return "?"
    # A site cannot go faster than one request per crawl delay.
    seconds = max(queued / pages_rate, *(host.waiting * host.crawl_delay for host in unfinished))
    bounded = all(host.budget_hit for host in unfinished)
    return f"{'~' if bounded else '≥ '}{_duration(seconds)}"


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


# -- the report ------------------------------------------------------------------


def _bytes(size: int) -> str:
    if size < 1000:
        return f"{size} B"
    value, unit = float(size), "B"
    for unit in ("kB", "MB", "GB"):  # noqa: B007  # the unit the loop stops at is the one
        value /= 1000
        if value < 1000:
            break
    return f"{value:,.1f} {unit}"


def report_table(report: Mapping[str, Any]) -> Table:
    """The information retrieval report as a table: per site pages, errors by kind,
    duplicates, bytes, elapsed and why it stopped (the same figures as report.json)."""
    sites: Mapping[str, Mapping[str, Any]] = report.get("sites", {})
    table = Table(
        title="information retrieval report",
        title_style="bold",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1, 0, 0),
    )
    table.add_column("site", no_wrap=True)
    for name in ("done", "errors", "dups", "skipped"):
        table.add_column(name, justify="right")
    table.add_column("errors by kind")
    table.add_column("bytes", justify="right", no_wrap=True)
    table.add_column("elapsed", justify="right", no_wrap=True)
    table.add_column("why it stopped")
    for host, site in sites.items():
        kinds = ", ".join(
            f"{kind} {n}" for kind, n in sorted(site.get("errors_by_kind", {}).items())
        )
        errors = int(site.get("errors", 0))
        table.add_row(
            HostCell(host),
            f"{site.get('pages_done', 0):,}",
            Text(f"{errors:,}", style="red" if errors else ""),
            f"{site.get('duplicates', 0):,}",
            f"{site.get('skipped', 0):,}",
            kinds or "-",
            _bytes(int(site.get("bytes", 0))),
            f"{float(site.get('elapsed_s', 0.0)):.1f} s",
            Text(terminal_safe(site.get("stop_reason") or "-")),
        )
    if len(sites) > 1:
        table.add_section()
        table.add_row(
            "total",
            f"{sum(s.get('pages_done', 0) for s in sites.values()):,}",
            f"{sum(s.get('errors', 0) for s in sites.values()):,}",
            f"{sum(s.get('duplicates', 0) for s in sites.values()):,}",
            f"{sum(s.get('skipped', 0) for s in sites.values()):,}",
            "",
            _bytes(int(report.get("bytes", 0))),
            f"{float(report.get('elapsed_s', 0.0)):.1f} s",
            str(report.get("stop_reason", "")),
            style="bold",
        )
    return table


def print_report(
    report: Mapping[str, Any],
    output_dir: Path | str | None = None,
    *,
    console: Console | None = None,
) -> None:
    """Print the report table (and where the results are) to ``console`` (stdout)."""
    console = console if console is not None else Console()
    console.print()
    console.print(report_table(report))
    if output_dir is not None:
        console.print(f"results in {output_dir}", highlight=False)
