"""ApplicationManager: reads the settings, builds the DataManager, owns the threads of a crawl."""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
import warnings
from http.cookiejar import LWPCookieJar
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, ClassVar

from rccrawler.config import Settings, read_settings_file, settings_from_mapping
from rccrawler.data.sql import SQLDataManager
from rccrawler.data.sqlite import SQLiteDataManager
from rccrawler.data.storage import create_storage, discard_storage, is_shared
from rccrawler.data.tables import TaskTable
from rccrawler.exceptions import ConfigError, StateError
from rccrawler.fetch import Fetcher
from rccrawler.finisher import ApplicationFinisher
from rccrawler.loading import dotted_path, importable_beside, load_class
from rccrawler.memory import tune_gc, tune_malloc
from rccrawler.records import HostData
from rccrawler.runlog import RunLog
from rccrawler.threads.downloading import DownloadingThread
from rccrawler.threads.parsing import ParsingThread
from rccrawler.threads.routine import RoutineThread
from rccrawler.traps import QueryVariantLimit
from rccrawler.unloaders import ReportUnloader, ResultUnloader
from rccrawler.urls import host_of, normalize_url, request_url

if TYPE_CHECKING:
    from rccrawler.threads.base import CrawlerThread

logger = logging.getLogger(__name__)

LOCK_FILE = "lock"
STOP_FILE = "stop.request"
COOKIE_FILE = "cookies.txt"


def state_in_use(state_dir: Path) -> bool:
    """Whether a crawl process holds the lock of this state directory right now."""
    try:
        with open(state_dir / LOCK_FILE, encoding="utf-8") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                return True
            fcntl.flock(handle, fcntl.LOCK_UN)
            return False
    except OSError:
        return False


def load_settings(path: str | Path) -> tuple[type[ApplicationManager], Settings]:
    """Read and validate settings.yaml, resolving every dotted path (SPEC §2).

    Raises:
        ConfigError: naming the key, before anything is written.
    """
    path = Path(path)
    raw = read_settings_file(path)
    importable_beside(path)
    manager_path = raw.get("manager", Settings.__dataclass_fields__["manager"].default)
    manager_cls = load_class("manager", manager_path, ApplicationManager)
    settings = settings_from_mapping(
        raw, source=path, allowed_sections=frozenset(manager_cls.settings_sections)
    )
    manager_cls.check_settings(settings)
    return manager_cls, settings


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
    cookie_save_interval: ClassVar[float] = 1.0
    """Seconds at least between two saves of the cookie jar during a crawl."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.stopping = threading.Event()
        """Set to stop: downloaders take no new page, the crawl winds down."""
        self.parsing_stopping = threading.Event()
        """Set after `stopping`, once the downloaded pages are parsed (nothing is lost)."""
        self.stop_reason = ""
        self.finished = False
        self.report: dict[str, Any] = {}
        self.failed_sites: dict[str, str] = {}
        """Sites of a finished crawl that fetched nothing, with why (exit code 1)."""
        self.unload_failures: list[str] = []
        """Output that could not be written, one line each (set by unload())."""
        self.view: Any = None
        """The live status view when one is shown (set by the command line)."""
        self.threads: list[CrawlerThread] = []
        self._started = 0.0
        self._ended = 0.0
        self._lock_handle: IO[str] | None = None
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
        if settings.unloaders is not None:
            self.unloader_classes = tuple(
                load_class(f"unloaders[{i}]", path, ResultUnloader)
                for i, path in enumerate(settings.unloaders)
            )
        self.data: SQLDataManager = self.create_data_manager()
        self.finisher = self.finisher_cls(self)
        self.cookie_jar = LWPCookieJar(str(self.state_dir / COOKIE_FILE))
        self._cookie_save_lock = threading.Lock()
        self._cookies_saved_at = 0.0
        self._cookie_timer: threading.Timer | None = None
        self.fetcher = Fetcher(
            settings.crawl, self.cookie_jar, on_cookies_changed=self.cookies_changed
        )
        self.query_variants = QueryVariantLimit(settings.crawl.max_query_variants)
        """Shared by the parsing threads: the query-string trap limit (crawl.max_query_variants)."""

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

    @classmethod
    def search(cls, settings: Settings, query: str, limit: int = 10) -> list[dict[str, Any]] | None:
        """Hook for ``rccrawler search``: ranked hits (url, title, summary, score) of a
        query over the saved state. None (the default) means this task has no search."""
        return None

    @classmethod
    def words(cls, settings: Settings, prefix: str = "") -> list[tuple[str, int]] | None:
        """Hook for ``rccrawler words``: indexed words starting with ``prefix`` and their
        document counts. None (the default) means this task has no index."""
        return None

    @classmethod
    def serve(cls, settings: Settings, host: str, port: int) -> bool:
        """Hook for ``rccrawler serve``: run the search web page until interrupted.
        False (the default) means this task has no search page."""
        return False

    # -- paths -------------------------------------------------------------
    @property
    def state_dir(self) -> Path:
        return self.settings.state_dir

    @property
    def stop_file(self) -> Path:
        return self.state_dir / STOP_FILE

    @property
    def elapsed(self) -> float:
        if not self._started:
            return 0.0
        return (self._ended or time.monotonic()) - self._started

    def create_data_manager(self) -> SQLDataManager:
        """The storage backend named by ``storage:``, with this task's tables."""
        return create_storage(
            self.settings,
            task_tables=self.task_tables,
            sqlite_cls=self.sqlite_data_manager_cls,
            synchronous=self.sqlite_synchronous,
        )

    # -- state -------------------------------------------------------------
    @staticmethod
    def discard_state(settings: Settings) -> None:
        """Remove a saved crawl (``--fresh``): its storage and the files beside it."""
        discard_storage(settings)
        for name in (COOKIE_FILE, f"{COOKIE_FILE}.tmp", STOP_FILE):
            (settings.state_dir / name).unlink(missing_ok=True)

    def lock_state(self) -> None:
        """Take the state_dir lock, so a second process on the same state refuses to start.

        PostgreSQL storage is shared by design (SPEC §9): no exclusive lock then.
        Taking it again while held (``--fresh`` took it before ``run``) is a no-op.
        """
        if self._lock_handle is not None:
            return
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            if is_shared(self.settings):
                return
            handle = open(self.state_dir / LOCK_FILE, "a+", encoding="utf-8")  # noqa: SIM115
        except OSError as exc:
            raise StateError(f"cannot write the state directory {self.state_dir}: {exc}") from exc
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            handle.seek(0)
            owner = handle.read().strip() or "another process"
            handle.close()
            raise StateError(
                f"the state in {self.state_dir} is in use by {owner}; "
                "stop that crawl first (rccrawler stop --config ...)"
            ) from exc
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}\n")
        handle.flush()
        self._lock_handle = handle

    def unlock_state(self) -> None:
        if self._lock_handle is not None:
            self._lock_handle.close()
            self._lock_handle = None

    def open(self) -> None:
        """Lock and open the state, check it belongs to this crawl, queue the sites."""
        self.lock_state()
        try:
            self.stop_file.unlink(missing_ok=True)
            self.data.open()
            self.data.check_identity(dotted_path(type(self)))
            recovered = self.data.recover()
            if recovered:
                logger.info("resuming: %d pages in progress were queued again", recovered)
            self.add_sites()
            self.load_cookies()
        except BaseException:
            self.data.close()
            self.unlock_state()
            raise

    def add_sites(self) -> None:
        for site in self.settings.sites:
            crawl = self.settings.crawl_for(host_of(site))
            normalized = normalize_url(site, crawl.normalize_options)
            if normalized is None:
                raise ConfigError("sites", f"{site!r} is not an http(s) URL")
            host = HostData(
                host=host_of(site),
                scheme=site.split(":", 1)[0],
                base=site,
                crawl_delay=crawl.crawl_delay_ms / 1000.0,
                max_downloads_at_time=crawl.max_downloads_at_time,
            )
            if self.data.add_site(host, request_url(site), normalized):
                logger.info("site %s queued", site)

    def load_cookies(self) -> None:
        if (self.state_dir / COOKIE_FILE).exists():
            try:
                # http.cookiejar warns "bug!" with a traceback on a garbage file; the
                # warning below says it in one line, and the crawl goes on without them.
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    self.cookie_jar.load(ignore_discard=True, ignore_expires=False)
            except (OSError, ValueError) as exc:
                self.cookie_jar.clear()
                logger.warning("cookies of the last run could not be read: %s", exc)

    def cookies_changed(self) -> None:
        """A response set or removed cookies: save the jar now, or ``cookie_save_interval``
        after the last save, so a killed crawl keeps them without a write per response."""
        with self._cookie_save_lock:
            if self._cookie_timer is not None:
                return  # the save already scheduled will include this change
            wait = self._cookies_saved_at + self.cookie_save_interval - time.monotonic()
            if wait > 0:
                self._cookie_timer = threading.Timer(wait, self.save_cookies)
                self._cookie_timer.daemon = True
                self._cookie_timer.start()
                return
        self.save_cookies()

    def save_cookies(self) -> None:
        """Write the jar to ``state_dir/cookies.txt`` whole: a temporary file, then a rename."""
        if not self.settings.crawl.cookies:
            return
        with self._cookie_save_lock:
            timer, self._cookie_timer = self._cookie_timer, None
            self._cookies_saved_at = time.monotonic()
        if timer is not None:
            timer.cancel()  # this save supersedes it
        path = self.state_dir / COOKIE_FILE
        try:
            # The fetcher's lock keeps the jar still while it is written out.
            with self.fetcher.cookie_lock:
                self.cookie_jar.save(str(path) + ".tmp", ignore_discard=True, ignore_expires=False)
                os.replace(str(path) + ".tmp", path)
        except OSError as exc:
            logger.warning("cookies could not be saved: %s", exc)

    # -- running -----------------------------------------------------------
    def create_threads(self) -> list[CrawlerThread]:
        threads: list[CrawlerThread] = [
            self.downloading_thread_cls(self, i) for i in range(self.settings.downloading_threads)
        ]
        threads += [self.parsing_thread_cls(self, i) for i in range(self.settings.parsing_threads)]
        threads.append(self.routine_thread_cls(self, 0))
        return threads

    def request_stop(self, reason: str = "stopped") -> None:
        """Ask the crawl to stop and save its state (signal handlers call only this)."""
        if not self.stop_reason:
            self.stop_reason = reason
        self.stopping.set()

    def run(self) -> bool:
        """Run (or resume) the crawl until it is over or a stop is requested.

        Returns:
            True when the crawl finished, False when it was stopped (resumable).
        """
        tune_malloc()
        self.open()
        tune_gc()
        self._started = time.monotonic()
        run_log = RunLog(self.state_dir)
        run_log.begin()
        try:
            self.threads = self.create_threads()
            for thread in self.threads:
                thread.start()
            self.wait_until_done()
            self.stopping.set()
            self.data.wake_all()  # not from request_stop: a signal handler must not lock
            self.join_threads()
            crashed = [t.error for t in self.threads if t.error is not None]
            if crashed:
                raise crashed[0]
            self._ended = time.monotonic()
            self.save_cookies()
            if self.finished:
                self.failed_sites = self.finisher.failed_sites(self.data.statistics())
            # Of several workers sharing a crawl, one writes the files (SPEC §9).
            if self.finished and self.data.try_elect("unload"):
                self.unload()
            return self.finished
        finally:
            run_log.end()
            self.fetcher.close()
            self.data.close()
            self.stop_file.unlink(missing_ok=True)
            self.unlock_state()

    def wait_until_done(self) -> None:
        """Ask the finisher every tick; record each site's stop reason as it ends."""
        while not self.stopping.is_set():
            stats = self.data.statistics()
            for host in stats.hosts:
                if not host.stop_reason:
                    reason = self.finisher.site_stop_reason(host)
                    if reason is not None:
                        self.data.set_stop_reason(host.host, reason)
                        logger.info("site %s finished: %s", host.host, reason)
            if self.finisher.crawl_finished(self.data.statistics()):
                self.finished = True
                self.stop_reason = "finished"
                return
            # A short tick: a crawl of a thousand small pages takes about a second.
            self.stopping.wait(0.02)

    def abort(self) -> None:
        """Stop every thread at once (a thread crashed)."""
        self.stopping.set()
        self.parsing_stopping.set()

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
        for cls in self.unloader_classes:
            unloader = None
            try:
                unloader = cls(self)
                files = unloader.unload()
            except Exception as exc:
                logger.exception("unloader %s failed", cls.__name__)
                self.unload_failures.append(f"{cls.__name__} failed: {exc}")
                continue
            finally:
                if unloader is not None:
                    self.unload_failures += unloader.failures
            for path in files:
                logger.info("wrote %s", path)
        return self.unload_failures
