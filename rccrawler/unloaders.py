"""ResultUnloader: writes what a crawl produced once it is over; the report lives here."""

from __future__ import annotations

import csv
import hashlib
import itertools
import json
import logging
import os
import threading
import weakref
from array import array
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, ClassVar, TypeVar

from rccrawler.data.runlog import RunLog
from rccrawler.policy import is_node, last_visit, page_change, page_status, redirect_chain
from rccrawler.records import PageArc, PageChange, PageData, PageId, PageState, SkipReason

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence

    from rccrawler.context import CrawlContext
    from rccrawler.data.base import DataManager
    from rccrawler.finisher import ApplicationFinisher
    from rccrawler.records import CrawlRun, HostData, HostStats

logger = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")


MAX_STEM_BYTES = 150
"""Longest file stem taken from a host name. File names may hold 255 bytes; the rest is
room for the suffixes (``.skipped.csv``, a task's own) and atomic_write's temporary name."""


def host_file_stem(host: str) -> str:
    """A site's output file stem: the host, with ':' written as '_' (SPEC §8).

    A host name may be 253 characters, more than a file name can hold with its suffix,
    so a long one is cut and ends with a hash of the whole name: still readable, and
    two long hosts that share a beginning never share a file.
    """
    stem = host.replace(":", "_").replace("/", "_")
    if len(stem.encode("utf-8")) <= MAX_STEM_BYTES:
        return stem
    digest = hashlib.sha256(host.encode("utf-8")).hexdigest()[:16]
    return f"{stem[: MAX_STEM_BYTES - len(digest) - 1]}-{digest}"


_temporary_names = itertools.count()
"""Numbers of atomic_write's temporary files, with the process id: a name is new without
drawing random letters (mkstemp's letters, its fchmod and a read of the umask had been a
third of writing 1,800 small files)."""


def _create_temporary(path: Path) -> tuple[int, str]:
    """A new file beside ``path``, open for writing: ``.<name>.<pid>-<n>``, no dot after
    the name's (``--fresh`` knows such leftovers by it). Its mode is what a plain open()
    gives (0666 less the umask, applied by the system), not mkstemp's private 0600:
    output files are for sharing."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _attempt in range(100):
        tmp = os.path.join(path.parent, f".{path.name}.{os.getpid()}-{next(_temporary_names)}")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue  # another process of the same id wrote here once, and crashed
        except FileNotFoundError:
            path.parent.mkdir(parents=True, exist_ok=True)
    raise FileExistsError(f"no free temporary name beside {path}")


@contextmanager
def atomic_write(path: Path, newline: str | None = None) -> Iterator[IO[str]]:
    """Write a text file whole or not at all (a crash never leaves half a file)."""
    fd, tmp = _create_temporary(path)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline=newline) as handle:
            yield handle
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


_shared: weakref.WeakKeyDictionary[CrawlContext, dict[tuple[str, str], Any]] = (
    weakref.WeakKeyDictionary()
)
_shared_lock = threading.Lock()


def shared_result(context: CrawlContext, key: str, host: str, compute: Callable[[], T]) -> T:
    """A result several unloaders of one crawl need (PageRank, broken links, the report...):
    the first to ask computes it, the others get the same object.

    Args:
        context: the finished crawl's context (the cache lives as long as it).
        key: what is computed, e.g. ``"webgraph.analysis"``.
        host: the site.
        compute: makes the result when it is not known yet.
    """
    with _shared_lock:
        known = _shared.setdefault(context, {})
        if (key, host) in known:
            return known[(key, host)]  # type: ignore[no-any-return]
    result = compute()
    with _shared_lock:
        return _shared[context].setdefault((key, host), result)  # type: ignore[no-any-return]


class ResultUnloader:
    """Base of the result writers named in ``unloaders:``.

    Args:
        context: the finished crawl: its ``data``, ``settings`` and how it ended.
        finisher: the crawl's finisher, which says why each site stopped or failed.
    """

    output_names: ClassVar[tuple[str, ...]] = ()
    """The files this unloader writes in ``output_dir``: names or glob patterns, where
    ``{stem}`` stands for each site's file stem (see :func:`host_file_stem`). ``--fresh``
    removes exactly these, and nothing else the folder holds."""

    def __init__(self, context: CrawlContext, finisher: ApplicationFinisher) -> None:
        self.context = context
        self.finisher = finisher
        self.data = context.data
        self.settings = context.settings
        self.output_dir = context.settings.output_dir
        self.failures: list[str] = []
        """One line per site whose files could not be written (the manager reports them)."""
        self.report: dict[str, Any] | None = None
        """The crawl's report when this unloader builds it (ReportUnloader); the manager
        keeps it for the summary it prints."""

    def unload(self) -> list[Path]:
        """Write the results; return the files written."""
        raise NotImplementedError

    def unload_per_site(self, write: Callable[[HostData], list[Path]]) -> list[Path]:
        """Call ``write`` for every site; one site's failure never costs the others theirs.

        A failure (a full disk, a name the file system refuses) is logged and kept in
        :attr:`failures`, so the crawl can end with exit code 1.
        """
        written: list[Path] = []
        for host in self.data.hosts():
            try:
                written += write(host)
            except Exception as exc:
                problem = f"{host.host}: {type(self).__name__} failed: {exc}"
                logger.error("%s", problem)
                self.failures.append(problem)
        return written

    def write_site_csvs(
        self,
        suffix: str,
        header: Sequence[str],
        rows_of: Callable[[str], Iterable[Sequence[object]]],
    ) -> list[Path]:
        """Write ``H.<suffix>`` for every site: ``header``, then ``rows_of(host)``
        (through :meth:`unload_per_site`, so one site's failure spares the others).

        Returns:
            The files written.
        """

        def write(host: HostData) -> list[Path]:
            path = self.output_dir / f"{host_file_stem(host.host)}.{suffix}"
            with atomic_write(path, newline="") as handle:
                writer = csv.writer(handle)
                writer.writerow(header)
                writer.writerows(rows_of(host.host))
            return [path]

        return self.unload_per_site(write)


def page_skip_reason(page: PageData) -> str:
    """Why a page that was queued is not a node of the graph ('' when it is one)."""
    if page.state is PageState.SKIPPED:
        return page.error_code or "error"
    if page.state is PageState.ERROR:
        return "redirect_loop" if page.error_code == "redirect_loop" else "error"
    if page.state is PageState.WAITING:
        return SkipReason.WAITING.value  # still queued: the crawl stopped before it
    return ""


SHARED_SITE_PAGES = 5_000
"""Pages of a crawl's sites read once for all its unloaders (:func:`site_pages`,
:func:`site_arcs`, :func:`site_skipped`), kept in memory while they run: about 0.8 KB
a page with its arcs (a 10,000-page site shared took 8 MB more at its peak, so the
budget stays a few MB). The sites beyond this many pages, counted from the first one
read, are read again by each unloader (the small ones several at a time, as many as
this many pages), so writing the output never takes memory in proportion to the
crawl."""


def _site_sizes(context: CrawlContext) -> dict[str, int]:
    """Each site's pages, from one statistics snapshot for all the unloaders: a snapshot
    costs O(sites), and asking one per site made a crawl of 2,000 sites spend most of
    its end there."""

    def count() -> dict[str, int]:
        return {
            h.host: h.active + h.done + h.errors + h.skipped + h.duplicates
            for h in context.data.statistics().hosts
        }

    return shared_result(context, "site sizes", "", count)


def _site_is_shared(context: CrawlContext, host: str) -> bool:
    """Whether a site's reads are shared: it is one of the first sites read, within
    :data:`SHARED_SITE_PAGES` pages in all (decided once per site)."""

    def decide() -> bool:
        pages = _site_sizes(context).get(host)
        if pages is None:
            return False
        with _shared_lock:
            held = _shared.setdefault(context, {})
            budget = held.get(("pages budget", ""), SHARED_SITE_PAGES)
            if pages > budget:
                return False
            held[("pages budget", "")] = budget - pages
            return True

    return shared_result(context, "shared", host, decide)


SHARED_READ_SITES = 100
"""Small sites read together at most, in one query per kind (see :func:`_site_rows`)."""


def _site_rows(
    context: CrawlContext,
    key: str,
    host: str,
    read_sites: Callable[[Sequence[str]], dict[str, list[R]]],
    keep: Callable[[list[R]], T],
    stream: Callable[[], T],
) -> T:
    """A site's rows of one kind (``key``) for an unloader, as ``keep`` keeps them:

    * a shared site's (see :func:`_site_is_shared`) are read with those of the shared
      sites after it not read yet, and kept for all the unloaders;
    * a small site's beyond the shared budget, with the small sites after it, and kept
      until the unloader moves past them (a window of :data:`SHARED_SITE_PAGES` pages
      at most, per kind);
    * a larger site's are streamed (``stream``) for each caller.

    Up to :data:`SHARED_READ_SITES` sites in one read: on PostgreSQL a read per site and
    kind had been most of the end of a crawl of 300 small sites (1,800 round trips)."""
    if _site_is_shared(context, host):

        def unread(name: str) -> bool:
            with _shared_lock:
                read = (key, name) in _shared.get(context, {})
            return not read and _site_is_shared(context, name)

        def shared() -> T:
            found = read_sites(_sites_from(context, host, unread))
            for name, rows in found.items():
                if name != host:
                    kept = keep(rows)
                    with _shared_lock:
                        _shared.setdefault(context, {}).setdefault((key, name), kept)
            return keep(found.get(host, []))

        return shared_result(context, key, host, shared)
    sizes, window_key = _site_sizes(context), ("window", key)
    if sizes.get(host, SHARED_SITE_PAGES + 1) > SHARED_SITE_PAGES:
        return stream()
    _order, position = _site_order(context)
    with _shared_lock:
        window, end = _shared.get(context, {}).get(window_key, ({}, 0))
        if host in window:
            return window[host]  # type: ignore[no-any-return]
    if position.get(host, -1) < end:
        # Behind the window: an unloader going over the sites in another order reads
        # each alone, not a window of sites it may have passed already.
        return keep(read_sites([host]).get(host, []))
    room = [SHARED_SITE_PAGES - sizes[host]]

    def fits(name: str) -> bool | None:
        size = sizes.get(name, SHARED_SITE_PAGES + 1)
        if size > SHARED_SITE_PAGES or _site_is_shared(context, name):
            return False  # read otherwise: passed over
        if size > room[0]:
            return None  # the window ends before it
        room[0] -= size
        return True

    group = _sites_from(context, host, fits)
    found = read_sites(group)
    window = {name: keep(rows) for name, rows in found.items()}
    with _shared_lock:
        _shared.setdefault(context, {})[window_key] = (window, position[group[-1]] + 1)
    return window.get(host) or keep([])


def _sites_from(
    context: CrawlContext, host: str, wanted: Callable[[str], bool | None]
) -> list[str]:
    """``host`` and the sites after it that are ``wanted`` (True: read it; False: pass it
    over; None: stop there), up to :data:`SHARED_READ_SITES` in all, in the order the
    unloaders go over them."""
    order, position = _site_order(context)
    group = [host]
    for name in order[position[host] + 1 :] if host in position else ():
        if len(group) >= SHARED_READ_SITES:
            break
        take = wanted(name)
        if take is None:
            break
        if take:
            group.append(name)
    return group


def _site_order(context: CrawlContext) -> tuple[list[str], dict[str, int]]:
    """The sites in the order the unloaders go over them (``DataManager.hosts()``), and
    where each is in it."""

    def read() -> tuple[list[str], dict[str, int]]:
        order = [host.host for host in context.data.hosts()]
        return order, {host: n for n, host in enumerate(order)}

    return shared_result(context, "site order", "", read)


def site_pages(context: CrawlContext, host: str) -> Iterable[PageData]:
    """A site's pages in id order, for an unloader: the reports, the graph files and the
    link analysis each go over them, and a small site is read from storage only once
    (see :func:`_site_rows`), with the next ones. The records are shared: do not change
    them."""
    data = context.data
    return _site_rows(context, "pages", host, data.pages_of_sites, list,
                      lambda: data.iter_pages(host))  # fmt: skip


@dataclass(frozen=True, slots=True)
class SiteArcs:
    """The arcs of a site's graph (:func:`graph_arcs`), as one read of them found them."""

    sources: array[int]
    targets: array[int]
    self_links: int
    """Links of a page to itself, left out of the graph."""

    def __len__(self) -> int:
        return len(self.sources)

    def __iter__(self) -> Iterator[PageArc]:
        return map(PageArc._make, zip(self.sources, self.targets, strict=True))


def site_arcs(context: CrawlContext, host: str) -> Iterable[PageArc]:
    """The arcs of a site's graph (:func:`graph_arcs`), read once for all the unloaders of
    a small site (a :class:`SiteArcs`, see :func:`_site_rows`), else streamed from
    storage for each caller."""
    data = context.data
    return _site_rows(context, "arcs", host, data.arcs_of_sites, _site_arcs,
                      lambda: graph_arcs(data, host))  # fmt: skip


def _site_arcs(arcs: Iterable[PageArc]) -> SiteArcs:
    """The arcs of a site's graph as kept in memory: two arrays of ids, 16 bytes an arc."""
    sources, targets = array("q"), array("q")
    self_links = [0]
    for source, target in without_self_links(arcs, self_links):
        sources.append(source)
        targets.append(target)
    return SiteArcs(sources, targets, self_links[0])


def count_arcs(context: CrawlContext, host: str) -> tuple[int, int]:
    """How many arcs a site's graph has, and how many self-links were left out of it."""
    graph = site_arcs(context, host)
    if isinstance(graph, SiteArcs):
        return len(graph), graph.self_links
    self_links = [0]
    return sum(1 for _arc in graph_arcs(context.data, host, self_links)), self_links[0]


def site_skipped(context: CrawlContext, host: str) -> Iterable[tuple[str, str, str]]:
    """A site's links that never became pages (``DataManager.iter_skipped``), read once
    for all the unloaders of a small site (see :func:`_site_rows`), else streamed for
    each caller."""
    data = context.data
    return _site_rows(context, "skipped", host, data.skipped_of_sites, list,
                      lambda: data.iter_skipped(host))  # fmt: skip


def release_shared(context: CrawlContext) -> None:
    """Forget what the unloaders of a crawl shared (the manager calls it once they ran)."""
    with _shared_lock:
        _shared.pop(context, None)


def graph_arcs(
    data: DataManager, host: str, self_links: list[int] | None = None
) -> Iterator[PageArc]:
    """The arcs of a site's graph: links between nodes, each once, without self-links.

    A page that links to itself (a ``#fragment`` link, a "top of page" link) adds nothing
    to the graph's structure, so the link is left out of ``H.arcs.csv`` and
    ``H.graphml`` and counted in the report as ``self_links``.

    Args:
        data: the crawl's storage.
        host: the site.
        self_links: when given, its first item is increased by the self-links left out.
    """
    return without_self_links(data.iter_arcs(host), self_links)


def without_self_links(
    arcs: Iterable[PageArc], self_links: list[int] | None = None
) -> Iterator[PageArc]:
    """``arcs`` but those of a page to itself (see :func:`graph_arcs`), counted in
    ``self_links[0]`` when given."""
    for arc in arcs:
        if arc.from_id == arc.to_id:
            if self_links is not None:
                self_links[0] += 1
            continue
        yield arc


# -- what changed since the last run (SPEC §10) ------------------------------------------
CHANGES_HEADER = (
    "url", "change", "old_status", "new_status", "old_hash", "new_hash", "old_run", "new_run",
    "redirect_to",
)  # fmt: skip
"""``H.changes.csv``: one row per page that was a node in the last run or is one now."""
ARC_CHANGES_HEADER = ("from_url", "to_url", "change")
"""``H.arcs_changes.csv``: the arcs of the graph added or removed since the last run."""


def crawl_runs(context: CrawlContext) -> list[CrawlRun]:
    """The crawl's runs, read once for all the unloaders (the last is the current one)."""
    return shared_result(context, "runs", "", context.data.runs)


def is_refresh(context: CrawlContext) -> bool:
    """Whether the crawl's current run is a refresh (then the change files are written)."""
    runs = crawl_runs(context)
    return len(runs) > 1


def change_rows(page: PageData, change: PageChange, run: int) -> list[tuple[object, ...]]:
    """A page's rows of ``H.changes.csv`` (two for a page that moved to a new URL: the
    old one redirected, the new one added), in :data:`CHANGES_HEADER` order."""
    before = last_visit(page)
    reached_before = page.prev_state not in ("", PageState.UNREACHED)
    old = (page_status(before), before.content_hash, page.prev_run or "") if reached_before else (
        "", "", "")  # fmt: skip
    reached = page.state is not PageState.UNREACHED
    new = (page_status(page), page.content_hash, run) if reached else ("", "", "")
    if change is not PageChange.REDIRECTED:
        url = page.normalized_url if reached or not page.prev_url else page.prev_url
        return [(url, change.value, old[0], new[0], old[1], new[1], old[2], new[2], "")]
    if page.normalized_url == page.prev_url:  # an alias of another page now
        target = redirect_chain(page)[-1]
        return [(page.prev_url, change.value, old[0], "redirect", old[1], "", old[2], new[2],
                 target)]  # fmt: skip
    rows: list[tuple[object, ...]] = [
        (page.prev_url, change.value, old[0], "redirect", old[1], "", old[2], new[2],
         page.normalized_url)
    ]  # fmt: skip
    if is_node(page):
        rows.append((page.normalized_url, PageChange.ADDED.value, "", new[0], "", new[1], "",
                     new[2], ""))  # fmt: skip
    return rows


def site_change_rows(context: CrawlContext, host: str) -> Iterable[tuple[object, ...]]:
    """The rows of a site's ``H.changes.csv``, by page id; a page not reached yet is not
    called removed until the run is over (``export`` of a refresh under way). Derived
    once for the counts and the files of a small site (see :func:`site_pages`)."""
    if not _site_is_shared(context, host):
        return _change_rows(context, host)
    return shared_result(context, "change rows", host, lambda: list(_change_rows(context, host)))


def _change_rows(context: CrawlContext, host: str) -> Iterator[tuple[object, ...]]:
    run = crawl_runs(context)[-1].run
    for page in site_pages(context, host):
        change = page_change(page, run_over=context.finished)
        if change is not None:
            yield from change_rows(page, change, run)


def site_arc_changes(context: CrawlContext, host: str) -> Iterable[tuple[str, str, str]]:
    """(from URL, to URL, ``added`` or ``removed``) of the arcs of a site's graph that
    this run added or removed, by page ids: the arcs as the last run left them, merged
    with those of now (both sorted, read as streams). Derived once for the counts and
    the files of a small site."""
    if not _site_is_shared(context, host):
        return _arc_changes(context, host)
    return shared_result(context, "arc changes", host, lambda: list(_arc_changes(context, host)))


def _arc_changes(context: CrawlContext, host: str) -> Iterator[tuple[str, str, str]]:
    urls: dict[int, tuple[str, str]] = {
        page.id: (page.prev_url or page.normalized_url, page.normalized_url)
        for page in site_pages(context, host)
    }
    old = (arc for arc in context.data.iter_last_arcs(host) if arc.from_id != arc.to_id)
    new = iter(site_arcs(context, host))
    end = PageArc(PageId(1 << 62), PageId(1 << 62))
    before, after = next(old, end), next(new, end)
    while before != end or after != end:
        if before == after:
            before, after = next(old, end), next(new, end)
        elif before < after:
            yield urls[before.from_id][0], urls[before.to_id][0], "removed"
            before = next(old, end)
        else:
            yield urls[after.from_id][1], urls[after.to_id][1], "added"
            after = next(new, end)


def change_counts(context: CrawlContext, host: str) -> dict[str, int]:
    """How many pages of a site each change holds (every kind named, 0 too), and how
    many arcs were added and removed: what report.json and the runs record say."""

    def count() -> dict[str, int]:
        counts: Counter[str] = Counter({change.value: 0 for change in PageChange})
        counts.update(str(row[1]) for row in site_change_rows(context, host))
        arcs = Counter(change for _from, _to, change in site_arc_changes(context, host))
        return {**counts, "arcs_added": arcs["added"], "arcs_removed": arcs["removed"]}

    return shared_result(context, "change counts", host, count)


def site_counts(
    context: CrawlContext,
    finisher: ApplicationFinisher,
    host: HostStats,
    run_log: RunLog,
    taken_at: float,
) -> dict[str, Any]:
    """One site's figures in report.json; each is defined once, in docs/output.md, and
    ``status --json`` and the files agree with it. ``taken_at`` is when the
    statistics ``host`` comes from were taken (the end of a site still crawling)."""
    skipped: Counter[str] = Counter(
        reason for _url, reason, _on in site_skipped(context, host.host)
    )
    truncated = 0
    for page in site_pages(context, host.host):
        reason = page_skip_reason(page)
        if reason:
            skipped[reason] += 1
        truncated += page.truncated
    arcs, self_links = count_arcs(context, host.host)
    end = host.finished_at or taken_at
    return {
        "pages_done": host.done,
        "errors": host.errors,
        "errors_by_kind": dict(host.errors_by_kind),
        "duplicates": host.duplicates,
        "skipped": sum(skipped.values()),
        "skipped_by_reason": dict(sorted(skipped.items())),
        "arcs": arcs,
        "self_links": self_links,
        "truncated": truncated,
        "waiting": host.waiting,
        "bytes": host.bytes,
        "crawl_delay_s": host.crawl_delay,
        "elapsed_s": round(run_log.active_seconds(host.started_at, end), 3),
        "stop_reason": host.stop_reason or finisher.site_stop_reason(host) or "",
        "failed": finisher.site_failure(host) or "",
    }


def build_report(context: CrawlContext, finisher: ApplicationFinisher) -> dict[str, Any]:
    """The information retrieval report: per site pages, errors by kind, duplicates, bytes,
    elapsed, why it stopped, and every URL not crawled counted by reason (as H.skipped.csv)."""
    stats = context.data.statistics()
    run_log = RunLog(context.settings.state_dir)
    sites = {
        host.host: site_counts(context, finisher, host, run_log, stats.taken_at)
        for host in stats.hosts
    }
    crawl_run = crawl_runs(context)[-1]
    refresh = is_refresh(context)
    if refresh:
        history = {run.run: json.loads(run.changes) for run in crawl_runs(context) if run.changes}
        for host, site in sites.items():
            site["changes"] = {"run": crawl_run.run, "since_run": crawl_run.run - 1,
                               **change_counts(context, host)}  # fmt: skip
            site["changes_by_run"] = [
                {"run": run, **counts[host]}
                for run, counts in sorted(history.items())
                if host in counts and run != crawl_run.run
            ] + [site["changes"]]
    runs = run_log.intervals()
    # A refresh's time is its own: from when it began (its stops left out).
    elapsed = (
        run_log.active_seconds(crawl_run.started_at, stats.taken_at)
        if refresh
        else sum(end - start for start, end in runs)
    )
    return {
        "manager": context.settings.manager,
        "finished": context.finished,
        "stop_reason": context.stop_reason,
        "run": crawl_run.run,
        "run_kind": crawl_run.kind,
        "run_started_at": crawl_run.started_at,
        "pages_done": sum(site["pages_done"] for site in sites.values()),
        "errors": sum(site["errors"] for site in sites.values()),
        "duplicates": sum(site["duplicates"] for site in sites.values()),
        "skipped": sum(site["skipped"] for site in sites.values()),
        "bytes": stats.bytes,
        "elapsed_s": round(elapsed, 3),
        "runs": len(runs),
        "failed_sites": {host: site["failed"] for host, site in sites.items() if site["failed"]},
        "sites": sites,
    }


REPORT_KEY = "report"
"""The :func:`shared_result` key of the crawl's report (the one in report.json)."""


class ReportUnloader(ResultUnloader):
    """Writes ``report.json`` (SPEC §8); a task's subclass adds its own keys in build().
    The web-graph task's HtmlReportUnloader draws the same figures in ``report.html``."""

    output_names: ClassVar[tuple[str, ...]] = ("report.json",)

    def build(self) -> dict[str, Any]:
        """The report to write (a task's subclass adds its keys)."""
        return build_report(self.context, self.finisher)

    def unload(self) -> list[Path]:
        path = self.output_dir / "report.json"
        # Shared, so that the HTML report draws these very figures, a task's keys included.
        report = shared_result(self.context, REPORT_KEY, "", self.build)
        with atomic_write(path) as handle:
            json.dump(report, handle, indent=2, sort_keys=False)
            handle.write("\n")
        self.report = report
        return [path]
