"""ApplicationManager: the lifecycle of a crawl. It builds the storage, the fetcher and the
crawl's context, starts and joins the threads, asks the finisher when it is over and runs
the unloaders."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Self, TypeVar, overload

from rccrawler.config import (
    Settings,
    apply_overrides,
    describe_change,
    machine_limits,
    read_settings_file,
    settings_changes,
    settings_from_mapping,
    settings_mapping,
    storage_without_password,
)
from rccrawler.context import CrawlContext
from rccrawler.data.runlog import RunLog
from rccrawler.data.sql import SQLDataManager
from rccrawler.data.sqlite import STATE_FILE, SQLiteDataManager
from rccrawler.data.storage import create_storage, discard_storage, is_shared, state_exists
from rccrawler.data.tables import TaskTable
from rccrawler.exceptions import ConfigError, StateError
from rccrawler.finisher import ApplicationFinisher
from rccrawler.loading import dotted_path, importable_beside, load_class
from rccrawler.policy import page_change
from rccrawler.records import HostData, PageChange, RobotsState
from rccrawler.state import STOP_FILE, RunSettings, SavedCookies, StateLock, discard_state_files
from rccrawler.threads.downloading import DownloadingThread
from rccrawler.threads.parsing import ParsingThread
from rccrawler.threads.pool import DownloadingPool, memory_cap
from rccrawler.threads.routine import RoutineThread
from rccrawler.unloaders import (
    ReportUnloader,
    ResultUnloader,
    change_counts,
    is_refresh,
    release_shared,
    site_pages,
)
from rccrawler.web.robots import RobotsRules
from rccrawler.web.traps import QueryVariantLimit
from rccrawler.web.urls import host_of, normalize_url, request_url

if TYPE_CHECKING:
    import argparse
    import threading
    from collections.abc import Callable, Sequence

    from rccrawler.config import CrawlSettings
    from rccrawler.context import StatusSink
    from rccrawler.data.base import TaskRows
    from rccrawler.records import PageData
    from rccrawler.threads.base import CrawlerThread
    from rccrawler.web.fetch import Fetcher

logger = logging.getLogger(__name__)
T = TypeVar("T")


def load_settings(
    path: str | Path, overrides: Sequence[str] = ()
) -> tuple[type[ApplicationManager], Settings]:
    """Read and validate settings.yaml, resolving every dotted path (SPEC §2).

    Args:
        path: the settings file.
        overrides: ``-s KEY=VALUE`` items that change it for one run.

    Raises:
        ConfigError: naming the key, before anything is written.
    """
    path = Path(path)
    raw = apply_overrides(read_settings_file(path), overrides)
    importable_beside(path)
    return settings_of_mapping(raw, source=path)


def settings_of_mapping(
    raw: dict[str, Any], *, source: Path | None = None
) -> tuple[type[ApplicationManager], Settings]:
    """The task and validated settings of a settings mapping (a file's, a quick crawl's,
    or the one a state saved of its last run).

    Raises:
        ConfigError: naming the key, before anything is written.
    """
    manager_path = raw.get("manager", Settings.__dataclass_fields__["manager"].default)
    manager_cls = load_class("manager", manager_path, ApplicationManager)
    settings = settings_from_mapping(
        raw, source=source, allowed_sections=frozenset(manager_cls.settings_sections)
    )
    manager_cls.check_settings(settings)
    return manager_cls, settings


@dataclass(frozen=True)
class TaskCommand:
    """A subcommand a task adds to the command line: ``rccrawler NAME --config FILE ...``.

    The command line knows it once it has read the settings that name the task.
    """

    help: str
    """One line for ``--help``."""
    run: Callable[[type[ApplicationManager], Settings, argparse.Namespace], int]
    """Does the work with the task's class, its settings and the parsed arguments;
    returns the exit code (see rccrawler.commands)."""
    arguments: Callable[[argparse.ArgumentParser], None] | None = None
    """Adds the command's own arguments to its parser (``--config`` is there already)."""


class _InContext(Generic[T]):
    """A manager attribute that is its crawl context's attribute of the same name (the
    threads read the context; the command line and tests read the manager)."""

    def __init__(self, *, writable: bool = False) -> None:
        self.writable = writable
        self.name = ""

    def __set_name__(self, owner: type[ApplicationManager], name: str) -> None:
        self.name = name

    @overload
    def __get__(self, manager: None, owner: type[ApplicationManager]) -> Self: ...
    @overload
    def __get__(self, manager: ApplicationManager, owner: type[ApplicationManager]) -> T: ...
    def __get__(
        self, manager: ApplicationManager | None, owner: type[ApplicationManager]
    ) -> T | Self:
        if manager is None:
            return self
        value: T = getattr(manager.context, self.name)
        return value

    def __set__(self, manager: ApplicationManager, value: T) -> None:
        if not self.writable:
            raise AttributeError(f"{self.name} is the crawl context's; it cannot be set")
        setattr(manager.context, self.name, value)


def robots_delay(host: HostData, crawl: CrawlSettings) -> float:
    """The Crawl-delay (seconds) of a site's stored robots.txt for this run's user agent,
    capped at ``crawl.max_crawl_delay_ms``; 0 when it has none (or none is stored)."""
    if host.robots_state is not RobotsState.READY or not host.robots_text:
        return 0.0
    rules = RobotsRules.from_response(
        host.robots_status, host.robots_text.encode("utf-8"), crawl.user_agent
    )
    delay = rules.crawl_delay
    return min(delay, crawl.max_crawl_delay_ms / 1000.0) if delay else 0.0


TICK_S = 0.02
"""How often the manager asks the finisher whether sites or the crawl ended, at least."""


def tick_after(snapshot_s: float) -> float:
    """Seconds until the manager asks the finisher again, after a look whose statistics
    snapshots took ``snapshot_s``: :data:`TICK_S`, or ten times that, so a snapshot,
    O(sites) under the DataManager's lock, takes a tenth of the time at most (2,000
    sites took a quarter of the crawl's time at 0.02 s). Only the snapshots count:
    counting the sites' stop reasons written too (235 polite sites ending at once on
    PostgreSQL, 1.2 s), the next look came 12 s later, and so did the crawl's end."""
    return max(TICK_S, 10 * snapshot_s)


class ApplicationManager:
    """Runs one crawl: builds the DataManager, starts and joins the threads,
    asks the finisher when it is over and runs the unloaders.

    A crawl task is a subclass that overrides the class attributes below (or
    names its classes in settings.yaml, which wins).

    Args:
        settings: validated settings.
    """

    downloading_thread_cls: type[DownloadingThread] = DownloadingThread
    parsing_thread_cls: type[ParsingThread] = ParsingThread
    routine_thread_cls: type[RoutineThread] = RoutineThread
    finisher_cls: type[ApplicationFinisher] = ApplicationFinisher
    unloader_classes: tuple[type[ResultUnloader], ...] = (ReportUnloader,)
    sqlite_data_manager_cls: ClassVar[type[SQLiteDataManager]] = SQLiteDataManager
    """The DataManager of ``storage: sqlite`` (a subclass may change how it stores)."""
    task_tables: ClassVar[tuple[TaskTable, ...]] = ()
    """Tables this task keeps its per-page results in (see rccrawler.data.tables)."""
    sqlite_synchronous: ClassVar[str] = "NORMAL"
    """SQLite's synchronous mode: NORMAL survives a killed process, FULL a power cut too."""
    settings_sections: ClassVar[tuple[str, ...]] = ()
    """Extra top-level settings keys this task reads (validated by check_settings)."""
    commands: ClassVar[Mapping[str, TaskCommand]] = {}
    """The subcommands this task adds to the command line (``search``, ``serve``...)."""
    cookie_save_interval: ClassVar[float] = 1.0
    """Seconds at least between two saves of the cookie jar during a crawl."""
    identity_keys: ClassVar[tuple[str, ...]] = (
        "manager", "storage", "name", "crawl.add_trailing_slash", "crawl.ip_to_domain",
    )  # fmt: skip
    """Settings (dotted keys) that define the crawl: what it is, where it is kept, what
    makes two URLs one page. A resumed run that changes one is refused (SPEC §3); every
    other key takes effect for the work that waits. A task adds its own (the search
    task: how its index is built)."""
    section_defaults: ClassVar[Mapping[str, Mapping[str, object]]] = {}
    """What a key of this task's own settings section means when it is left out: a
    resumed run compares settings by what they mean, so writing a default out (``search:
    {language: english}``) changes nothing."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.report: dict[str, Any] = {}
        """What report.json says, once the unloaders ran."""
        self.failed_sites: dict[str, str] = {}
        """Sites of a finished crawl that fetched nothing, with why (exit code 1)."""
        self.unload_failures: list[str] = []
        """Output that could not be written, one line each (set by unload())."""
        self.threads: list[CrawlerThread] = []
        """Every thread of the crawl that may still run (the pool's change as it goes)."""
        self.pool: DownloadingPool
        """The DownloadingThreads, made when the crawl runs (:meth:`create_pool`)."""
        self.resume_note = ""
        """``resuming: N done, M waiting; changed: …`` once a saved crawl is opened
        (the command line prints it); empty for a new crawl."""
        self.changes: list[tuple[str, object, object]] = []
        """(dotted key, last run's value, this run's) of the settings a resumed run changed."""
        self._settings_known = True
        self._opened = False
        self._started = 0.0
        self._ended = 0.0
        self.downloading_thread_cls = self._resolve(
            "downloading_thread", settings.downloading_thread, DownloadingThread,
            type(self).downloading_thread_cls,
        )  # fmt: skip
        self.parsing_thread_cls = self._resolve(
            "parsing_thread", settings.parsing_thread, ParsingThread, type(self).parsing_thread_cls
        )
        self.routine_thread_cls = self._resolve(
            "routine_thread", settings.routine_thread, RoutineThread, type(self).routine_thread_cls
        )
        self.finisher_cls = self._resolve(
            "finisher", settings.finisher, ApplicationFinisher, type(self).finisher_cls
        )
        self.unloader_classes = self.unloaders_for(settings)
        self.state_lock = StateLock(settings.state_dir)
        self.cookies = SavedCookies(
            settings.state_dir,
            enabled=settings.crawl.cookies,
            save_interval=self.cookie_save_interval,
        )
        # The HTTP layer (urllib3, ssl, http.client) is loaded by a crawl, not by the
        # commands that only read one (status, search, words) and load this module.
        from rccrawler.web.fetch import Fetcher

        # Every host of a polite crawl is asked again before long: its connection is kept
        # (urllib3 kept 64 hosts', and 200 polite HTTPS hosts had 1,381 TLS handshakes
        # for 1,400 requests, the crawl 13 times its politeness limit on loopback).
        fetcher = Fetcher(
            settings.crawl, self.cookies.jar, on_cookies_changed=self.cookies.changed,
            hosts_kept=machine_limits()["hosts_kept"],
        )  # fmt: skip
        self.cookies.jar_lock = fetcher.cookie_lock
        self.context = self.create_context(self.create_data_manager(), fetcher)
        """What the threads, the finisher and the unloaders see of this crawl."""
        self.finisher = self.finisher_cls(self.context)

    @classmethod
    def unloaders_for(cls, settings: Settings) -> tuple[type[ResultUnloader], ...]:
        """The unloaders of a crawl: ``unloaders:`` of its settings, else the task's."""
        if settings.unloaders is None:
            return cls.unloader_classes
        return tuple(load_class(f"unloaders[{i}]", path, ResultUnloader)
                     for i, path in enumerate(settings.unloaders))  # fmt: skip

    @staticmethod
    def _resolve(key: str, path: str | None, base: type[Any], default: type[Any]) -> type[Any]:
        return load_class(key, path, base) if path is not None else default

    @classmethod
    def check_settings(cls, settings: Settings) -> None:
        """Validate this task's extra sections and dotted paths; raise ConfigError."""
        for key, path, base in (
            ("downloading_thread", settings.downloading_thread, DownloadingThread),
            ("parsing_thread", settings.parsing_thread, ParsingThread),
            ("routine_thread", settings.routine_thread, RoutineThread),
            ("finisher", settings.finisher, ApplicationFinisher),
        ):
            if path is not None:
                load_class(key, path, base)
        for index, path in enumerate(settings.unloaders or ()):
            load_class(f"unloaders[{index}]", path, ResultUnloader)

    def create_context(self, data: SQLDataManager, fetcher: Fetcher) -> CrawlContext:
        """The context of this crawl; a task whose threads need more returns a subclass."""
        return CrawlContext(
            settings=self.settings,
            data=data,
            fetcher=fetcher,
            query_variants=QueryVariantLimit(self.settings.crawl.max_query_variants),
            stop_file=self.settings.state_dir / STOP_FILE,
        )

    # -- the context's parts, for the command line and tests -------------------
    data: _InContext[SQLDataManager] = _InContext(writable=True)
    """The storage (``export`` sets one that reads the saved state read-only)."""
    fetcher: _InContext[Fetcher] = _InContext()
    stopping: _InContext[threading.Event] = _InContext()
    parsing_stopping: _InContext[threading.Event] = _InContext()
    finished: _InContext[bool] = _InContext(writable=True)
    stop_reason: _InContext[str] = _InContext(writable=True)
    status: _InContext[StatusSink | None] = _InContext(writable=True)
    """Shows the crawl's progress (the command line's live view)."""
    stop_file: _InContext[Path] = _InContext()

    @property
    def state_dir(self) -> Path:
        return self.settings.state_dir

    @property
    def elapsed(self) -> float:
        if not self._started:
            return 0.0
        return (self._ended or time.monotonic()) - self._started

    @classmethod
    def tables_for(cls, settings: Settings) -> tuple[TaskTable, ...]:
        """The task's tables for these settings: ``task_tables``, which a task may tune
        from its own settings section (the search task's partition count)."""
        return cls.task_tables

    def create_data_manager(self) -> SQLDataManager:
        """The storage backend named by ``storage:``, with this task's tables."""
        return create_storage(
            self.settings,
            task_tables=self.tables_for(self.settings),
            sqlite_cls=self.sqlite_data_manager_cls,
            synchronous=self.sqlite_synchronous,
        )

    # -- state -------------------------------------------------------------
    @staticmethod
    def discard_state(settings: Settings) -> None:
        """Remove a saved crawl (``--fresh``, ``drop``): its storage and the files beside
        it, and the SQLite file of its state_dir when it has moved to shared storage."""
        discard_storage(settings)
        if is_shared(settings):
            for path in SQLiteDataManager.files(settings.state_dir):
                path.unlink(missing_ok=True)
        discard_state_files(settings.state_dir)

    def lock_state(self) -> None:
        """Take the state_dir lock, so a second process on the same state refuses to start.

        PostgreSQL storage is shared by design (SPEC §9): no exclusive lock then.
        Taking it again while held (``--fresh`` took it before ``run``) is a no-op.
        """
        if is_shared(self.settings):
            self.state_lock.make_dir()
            return
        self.state_lock.acquire()

    def unlock_state(self) -> None:
        self.state_lock.release()

    def open(self, *, refresh: bool = False) -> None:
        """Lock and open the state, check it belongs to this crawl, queue the sites.

        A saved crawl takes this run's settings (SPEC §3): its sites' politeness, and its
        ``max_pages`` and ``max_depth`` (what the last run's limits held back is queued);
        a run that changes a key of :attr:`identity_keys` is refused (StateError) with
        the state as it was. :attr:`resume_note` says what was found and what changed.

        Args:
            refresh: begin a new run of the crawl if its last run is over (SPEC §10);
                one under way (a refresh that was stopped) resumes.
        """
        self.lock_state()
        try:
            resuming = self.check_resume()
            self.stop_file.unlink(missing_ok=True)
            self.data.open()
            self.data.check_identity(dotted_path(type(self)))
            new_run = self.data.begin_refresh() if refresh else None
            if new_run is not None:
                logger.info("refresh: run %d of the crawl begins", new_run)
            elif refresh:
                logger.info("refresh: the last run is not over yet, it resumes")
            recovered = self.data.recover()
            if recovered:
                logger.info("resuming: %d pages in progress were queued again", recovered)
            self.add_sites()
            if resuming and self.limits_changed():
                self.apply_limits()
            self.cookies.load()
            self.run_settings().save(self.state_dir)
            if new_run is not None:
                self.resume_note = self.describe_resume(f"refresh: run {new_run} begins")
            elif resuming:
                self.resume_note = self.describe_resume()
        except BaseException:
            self.data.close()
            self.unlock_state()
            raise
        self._opened = True

    def run_settings(self) -> RunSettings:
        """This run's settings as the state keeps them: every key, the task by its
        class's dotted path, the storage without its password."""
        mapping = settings_mapping(self.settings)
        mapping["manager"] = dotted_path(type(self))
        mapping["storage"] = storage_without_password(self.settings.storage)
        source = self.settings.source
        return RunSettings(mapping, source.absolute() if source is not None else None)

    def check_resume(self) -> bool:
        """Whether this run resumes a saved crawl; compares its settings with the last
        run's (:attr:`changes`).

        Raises:
            StateError: a key of :attr:`identity_keys` changed (the state is untouched).
        """
        settings = self.settings
        try:
            saved = RunSettings.read(settings.state_dir)
        except StateError as exc:  # this run's settings replace them
            logger.warning("%s; this run's settings are compared with none", exc)
            saved = None
        self._settings_known = saved is not None
        resuming = state_exists(settings)
        old_sqlite = (settings.state_dir / STATE_FILE).exists()
        if saved is None:
            if is_shared(settings) and old_sqlite and not resuming:
                # Saved by an older version: the crawl was kept in SQLite in this state_dir.
                raise self.refusal("storage", "sqlite", self.run_settings().mapping["storage"])
            return resuming
        changes = settings_changes(
            self.with_section_defaults(saved.mapping),
            self.with_section_defaults(self.run_settings().mapping),
        )
        for key in self.identity_keys:
            for changed, old, new in changes:
                if changed != key:
                    continue
                if key == "storage":
                    # Found in this run's storage, it is the crawl (another spelling of
                    # the same server: check_identity tells); else it stayed in the last.
                    if not resuming and (old != "sqlite" or old_sqlite):
                        raise self.refusal(key, old, new)
                elif resuming:
                    raise self.refusal(key, old, new)
        if resuming:
            self.changes = changes
        return resuming

    @classmethod
    def with_section_defaults(cls, mapping: Mapping[str, Any]) -> dict[str, Any]:
        """A settings mapping with the keys of the task's sections it leaves out
        written as their defaults (:attr:`section_defaults`)."""
        filled = dict(mapping)
        for name, defaults in cls.section_defaults.items():
            section = filled.get(name)
            if section is None or isinstance(section, Mapping):
                filled[name] = {**defaults, **(section or {})}
        return filled

    def refusal(self, key: str, old: object, new: object) -> StateError:
        """The one line that refuses a resumed run changing ``key`` of :attr:`identity_keys`.

        A shared crawl may have other workers: the way out is then its own settings or
        another name, never ``--fresh`` (which would drop their crawl); a crawl that moved
        storage starts over in the new one with ``--fresh``, the old one left as it is.
        """
        settings = self.settings
        saved_in = str(old) if key == "storage" else storage_without_password(settings.storage)
        if saved_in != "sqlite":
            where = f"{old if key == 'name' else settings.crawl_name!r} in {saved_in}"
        else:
            where = f"in {settings.state_dir}"
        if saved_in != "sqlite" and key != "storage":
            hint = ("other workers may be running it: use its settings, or give this crawl "
                    "another name: in the settings (name:)")  # fmt: skip
        else:
            hint = "use --fresh to start over"
        was = f"belongs to manager {old!r}" if key == "manager" else f"was run with {key} {old!r}"
        return StateError(
            f"{key}: the saved crawl {where} {was}, this run has {new!r}; {key} defines the "
            f"crawl and cannot change when it resumes: {hint}"
        )

    def limits_changed(self) -> bool:
        """Whether ``max_pages`` or a ``max_depth`` changed since the last run (or the
        last run's settings are not known)."""
        return not self._settings_known or any(
            key == "crawl.max_pages" or key.endswith(".max_depth")
            for key, _old, _new in self.changes
        )

    def apply_limits(self) -> None:
        """Each site takes this run's ``max_pages`` and ``max_depth``: what the last run's
        held back is queued, what a lower budget leaves out waits no more."""
        for host in self.data.hosts():
            crawl = self.settings.crawl_for(host.host)
            added = self.data.apply_limits(host.host, crawl.max_depth)
            if added:
                logger.info("%s: %d links held back by the last run's limits queued",
                            host.host, added)  # fmt: skip

    def describe_resume(self, line: str = "") -> str:
        """``resuming: N done, M waiting; changed: crawl_delay_ms 1000 → 0`` (SPEC §3), or
        ``line`` (a refresh's) in place of what it resumes."""
        if not line:
            stats = self.data.statistics()
            done = sum(h.done for h in stats.hosts)
            line = f"resuming: {done} done, {sum(h.active for h in stats.hosts)} waiting"
        if not self._settings_known:
            return f"{line}; the last run's settings were not saved (this run's are)"
        if not self.changes:
            return f"{line}; no setting changed"
        return f"{line}; changed: " + ", ".join(describe_change(*c) for c in self.changes)

    def add_sites(self) -> None:
        """Queue each site's start page; a site known from the last run takes this run's
        politeness (its robots.txt Crawl-delay, read again, still wins when larger)."""
        # One read of the known sites and one transaction for all: a round trip or two a
        # site made 300 sites on PostgreSQL wait 0.6 s for their first request.
        known_hosts = {host.host: host for host in self.data.hosts()}
        sites: list[tuple[HostData, str, str]] = []
        for site in self.settings.sites:
            name = host_of(site)
            crawl = self.settings.crawl_for(name)
            normalized = normalize_url(site, crawl.normalize_options)
            if normalized is None:
                raise ConfigError("sites", f"{site!r} is not an http(s) URL")
            delay = crawl.crawl_delay_ms / 1000.0
            known = known_hosts.get(name)
            host = HostData(
                host=name,
                scheme=site.split(":", 1)[0],
                base=site,
                crawl_delay=delay,
                min_crawl_delay=max(delay, robots_delay(known, crawl)) if known else delay,
                max_downloads_at_time=crawl.max_downloads_at_time,
            )
            sites.append((host, request_url(site), normalized))
        added = self.data.add_sites(sites)
        for site, new in zip(self.settings.sites, added, strict=True):
            if new:
                logger.info("site %s queued", site)

    def save_cookies(self) -> None:
        """Write the cookie jar to ``state_dir/cookies.txt`` now (the crawl's end)."""
        self.cookies.save()

    # -- running -----------------------------------------------------------
    def create_pool(self) -> DownloadingPool:
        """The crawl's DownloadingThreads (``threads.downloading``): a fixed number, or
        ``auto``, as many as politeness allows now, within ``threads.max_downloading``,
        the open-file limit and the memory their bodies may take."""
        settings = self.settings
        cap = min(
            settings.max_downloading,
            machine_limits()["threads"],
            memory_cap(settings.crawl.max_body_bytes),
        )
        return DownloadingPool(
            lambda index: self.downloading_thread_cls(self.context, index),
            self.data,
            fixed=settings.downloading_threads,
            cap=cap,
        )

    def create_threads(self) -> list[CrawlerThread]:
        """The threads to start: the pool's first DownloadingThreads, the ParsingThreads
        and the RoutineThread (an automatic pool starts more as the crawl goes)."""
        context, settings = self.context, self.settings
        threads: list[CrawlerThread] = list(self.pool.first_threads())
        threads += [self.parsing_thread_cls(context, i) for i in range(settings.parsing_threads)]
        threads.append(self.routine_thread_cls(context, 0))
        return threads

    def adjust_pool(self) -> None:
        """Start the DownloadingThreads the pool wants now; forget the retired ones gone."""
        for thread in self.pool.adjust():
            thread.start()
        pool = self.pool.threads()
        members = set(pool)
        self.threads = pool + [t for t in self.threads if t not in members and not t.retiring]

    def request_stop(self, reason: str = "stopped") -> None:
        """Ask the crawl to stop and save its state (not from a signal handler: see
        ``CrawlContext.note_signal``)."""
        self.context.request_stop(reason)

    def prepare(self) -> None:
        """Hook for crawl tasks: called by the command line before any other thread of
        the process starts (the live view's among them), then :meth:`run`. A task that
        starts worker processes as forks of this one starts them here: a fork copies
        the locks other threads hold. The default starts the large pages' worker
        (``threads.parse_worker``), a fork then."""
        if self.context.large_pages is not None:
            self.context.large_pages.start()

    def run(self, *, refresh: bool = False) -> bool:
        """Run (or resume) the crawl until it is over or a stop is requested.

        Args:
            refresh: begin a new run of a finished crawl first (``--refresh``), when
                :meth:`open` was not called yet.

        Returns:
            True when the crawl finished, False when it was stopped (resumable).
        """
        if not self._opened:  # the command line opens it first, to print resume_note
            self.open(refresh=refresh)
        self._started = time.monotonic()
        run_log = RunLog(self.state_dir)
        run_log.begin()
        try:
            self.pool = self.create_pool()
            self.threads = self.create_threads()
            for thread in self.threads:
                thread.start()
            self.wait_until_done()
            self.stopping.set()
            self.data.wake_all()  # not from request_stop: a signal handler must not lock
            self.join_threads()
            self.close_workers()
            crashed = [t.error for t in self.threads if t.error is not None]
            if crashed:
                raise crashed[0]
            self._ended = time.monotonic()
            self.save_cookies()
            if self.finished:
                self.failed_sites = self.finisher.failed_sites(self.data.statistics())
            # Of several workers sharing a crawl, one writes the files (SPEC §9).
            if self.finished:
                with self.data.elected("unload") as elected:
                    if elected:
                        self.finish_run()
                        self.unload()
            return self.finished
        finally:
            run_log.end()
            self.close()

    def close(self) -> None:
        """Release what :meth:`open` (and :meth:`prepare`) took: the workers, the
        connections, the storage, the stop request and the state lock. Idempotent."""
        self.close_workers()
        self.fetcher.close()
        if self._opened:
            self._opened = False
            self.data.close()
            self.stop_file.unlink(missing_ok=True)
            self.unlock_state()

    def finish_run(self) -> None:
        """The run is over: record what changed in it (a refresh), after the task's
        :meth:`process_removed` had its say about each page it removed."""
        changes: dict[str, dict[str, int]] = {}
        rows: dict[int, TaskRows] = {}
        if is_refresh(self.context):
            self.data.forget_unreached()  # before the graph is read: they are no nodes
            for host in self.data.hosts():
                changes[host.host] = change_counts(self.context, host.host)
                for page in site_pages(self.context, host.host):
                    change = page_change(page)
                    if change in (PageChange.REMOVED, PageChange.REDIRECTED):
                        page_rows = self.process_removed(page, change)
                        if page_rows:
                            rows[page.id] = page_rows
        self.data.finish_run(changes, rows)

    def process_removed(self, page: PageData, change: PageChange) -> TaskRows | None:
        """Hook for crawl tasks, at the end of a refresh (SPEC §10): a page of the last
        run's graph that is not in this one (``removed``: not reached any more, or an
        error, another type...; ``redirected``: its URL redirects now). Its rows in the
        task's per-page tables are deleted with its links; rows returned here are
        stored for it instead (a tombstone, say). Runs once per such page, on the
        process that writes the output, before the unloaders. None (the default)
        keeps nothing.

        Args:
            page: the page as this run left it, with what the last run knew of it in its
                ``prev_`` fields (``prev_url``, ``prev_hash``…).
            change: ``removed`` or ``redirected``.
        """
        return None

    def close_workers(self) -> None:
        """End the worker processes of the crawl's threads (they are done with them)."""
        if self.context.large_pages is not None:
            self.context.large_pages.close()

    def wait_until_done(self) -> None:
        """Ask the finisher every tick; record each site's stop reason as it ends."""
        while not self.stopping.is_set():
            if self.context.signalled:
                self.request_stop(self.context.signalled)
                return
            started = time.monotonic()
            stats = self.data.statistics()
            snapshot_s = time.monotonic() - started
            ended: dict[str, str] = {}
            for host in stats.hosts:
                if not host.stop_reason:
                    reason = self.finisher.site_stop_reason(host)
                    if reason is not None:
                        ended[host.host] = reason
            if ended:
                self.data.set_stop_reasons(ended)
                self.context.fetcher.forget_hosts(ended)
                for host_name, reason in ended.items():
                    logger.info("site %s finished: %s", host_name, reason)
                started = time.monotonic()
                stats = self.data.statistics()
                snapshot_s += time.monotonic() - started
            if self.finisher.crawl_finished(stats):
                self.finished = True
                self.stop_reason = "finished"
                return
            self.adjust_pool()
            # A short tick: a crawl of a thousand small pages takes about a second.
            self._wait_tick(tick_after(snapshot_s))

    def _wait_tick(self, seconds: float) -> None:
        """Wait ``seconds`` for a stop, looking for a signal every :data:`TICK_S`: a signal
        is only noted (see ``CrawlContext.note_signal``), and a tick grows with the time
        a snapshot takes (on PostgreSQL under load, a good part of a second): a SIGTERM
        at 200 requests of a site of 800 pages had stopped the crawl only at 767.

        The pool is adjusted meanwhile, at its own pace (a look every 0.1 s at most, at
        the demand in this process's memory; a new size is noted for ``status``). Once a
        tick, it had grown by one doubling per snapshot: 300 polite hosts on PostgreSQL
        (a 0.6 s tick) took 3 s to reach their 256 threads, and their robots.txt and
        first pages came up to 2 s late."""
        until = time.monotonic() + seconds
        while not self.context.signalled:
            left = until - time.monotonic()
            if left <= 0 or self.stopping.wait(min(TICK_S, left)):
                return
            if self.data.a_site_may_have_ended():
                return  # its finisher's look is due now, not at the end of a long tick
            self.adjust_pool()

    def abort(self) -> None:
        """Stop every thread at once (a thread crashed)."""
        self.context.abort()

    def join_threads(self) -> None:
        """Join every thread with a bound: first the downloaders (an in-flight download
        ends within its timeout), then the parsers once no downloaded page is left."""
        bound = 2 * self.settings.crawl.timeout_s + 5.0
        deadline = time.monotonic() + bound
        parsers = [t for t in self.threads if t.stopping is self.parsing_stopping]
        for thread in self.threads:
            if thread not in parsers:
                thread.join(max(0.1, deadline - time.monotonic()))
        # This process's own bodies, not a statistics snapshot: a snapshot may be a
        # moment old, and on shared storage it counts other workers' bodies too.
        while time.monotonic() < deadline and any(t.is_alive() for t in parsers):
            if not self.data.bodies_waiting():
                break
            self.parsing_stopping.wait(0.02)
        self.parsing_stopping.set()
        self.data.wake_all()
        for thread in parsers:
            thread.join(max(0.1, deadline - time.monotonic()))
        alive = [t.name for t in self.threads if t.is_alive()]
        if alive:
            logger.warning("threads still busy after %.0f s: %s", bound, ", ".join(alive))

    def unload(self) -> list[str]:
        """Run every ResultUnloader; a failing one (or site) is logged and the others still run.

        Returns:
            What failed, one line each; also kept in ``unload_failures`` (exit code 1).
        """
        try:
            self.settings.output_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            logger.error("cannot write the output directory %s: %s", self.settings.output_dir, exc)
            self.unload_failures.append(f"cannot write {self.settings.output_dir}: {exc}")
            return self.unload_failures
        self.data.prepare_output()
        try:
            for cls in self.unloader_classes:
                unloader = None
                try:
                    unloader = cls(self.context, self.finisher)
                    files = unloader.unload()
                except Exception as exc:
                    logger.exception("unloader %s failed", cls.__name__)
                    self.unload_failures.append(f"{cls.__name__} failed: {exc}")
                    continue
                finally:
                    if unloader is not None:
                        self.unload_failures += unloader.failures
                if unloader.report is not None:
                    self.report = unloader.report
                for path in files:
                    logger.info("wrote %s", path)
        finally:
            release_shared(self.context)  # the sites read once for all the unloaders
        return self.unload_failures
