"""One way to reach a crawl's storage: build, open read-only, test, discard.

The crawl, ``status``, ``stop``, ``export``, ``search``, ``words`` and ``serve`` all
come here; no module outside ``rccrawler/data/`` knows a state file name or a
PostgreSQL schema name.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from rccrawler.data.sqlite import STATE_FILE, SQLiteDataManager
from rccrawler.exceptions import ConfigError, StateError
from rccrawler.policy import CrawlLimits

if TYPE_CHECKING:
    from pathlib import Path

    from rccrawler.config import Settings
    from rccrawler.data.postgres import PostgresDataManager
    from rccrawler.data.sql import SQLDataManager
    from rccrawler.data.tables import TaskTable


def is_shared(settings: Settings) -> bool:
    """Whether the crawl lives in shared storage (PostgreSQL), not in its state_dir."""
    return settings.storage != "sqlite"


def _postgres() -> type[PostgresDataManager]:
    try:
        from rccrawler.data.postgres import PostgresDataManager
    except ImportError as exc:
        raise ConfigError(
            "storage", f"needs psycopg: pip install 'rccrawler[postgres]' ({exc})"
        ) from exc
    return PostgresDataManager


def _schema(settings: Settings) -> str:
    from rccrawler.data.postgres import schema_for

    return schema_for(settings.crawl_name)


def create_storage(
    settings: Settings,
    *,
    task_tables: Sequence[TaskTable] = (),
    read_only: bool = False,
    sqlite_cls: type[SQLiteDataManager] = SQLiteDataManager,
    synchronous: str = "NORMAL",
) -> SQLDataManager:
    """The DataManager of these settings, not opened yet.

    Args:
        settings: the crawl's settings (``storage:``, ``state_dir``, ``name:``, ``crawl:``).
        task_tables: the tables the crawl task declares.
        read_only: for a reader beside a running crawl (or a read-only disk).
        sqlite_cls: the SQLite class (a subclass may change how it stores).
        synchronous: SQLite's synchronous pragma.
    """
    crawl = settings.crawl
    limits = CrawlLimits(
        max_pages=crawl.max_pages,
        max_download_attempts=crawl.max_download_attempts,
        max_redirects=crawl.max_redirects,
    )
    if is_shared(settings):
        backend = _postgres()
        data: SQLDataManager = backend(
            settings.storage, _schema(settings), limits=limits, task_tables=task_tables,
            read_only=read_only, download_slots=settings.downloading_most,
            storage_wait_s=settings.storage_wait_s,
        )  # fmt: skip
        return data
    return sqlite_cls(
        settings.state_dir / STATE_FILE, limits=limits, task_tables=task_tables,
        read_only=read_only, synchronous=synchronous,
    )  # fmt: skip


def state_exists(settings: Settings) -> bool:
    """Whether a saved crawl of these settings exists (nothing is created to find out)."""
    if is_shared(settings):
        return bool(_postgres().exists(settings.storage, _schema(settings)))
    return (settings.state_dir / STATE_FILE).exists()


@contextlib.contextmanager
def open_storage(
    settings: Settings, *, task_tables: Sequence[TaskTable] = (), read_only: bool = True
) -> Iterator[SQLDataManager]:
    """The saved crawl of these settings, opened (read-only by default), closed after.

    Raises:
        StateError: there is no saved crawl, or it cannot be read.
    """
    if not state_exists(settings):
        where = settings.storage if is_shared(settings) else settings.state_dir
        raise StateError(f"no saved crawl in {where}: run the crawl first")
    data = create_storage(settings, task_tables=task_tables, read_only=read_only)
    data.open()
    try:
        yield data
    finally:
        data.close()


def state_files(settings: Settings) -> list[Path]:
    """The files of the crawl's storage in its state_dir (none for shared storage)."""
    if is_shared(settings):
        return []
    return SQLiteDataManager.files(settings.state_dir)


def discard_storage(settings: Settings) -> None:
    """Remove the crawl's own saved state (``--fresh``): its database files, or its
    PostgreSQL schema. The caller holds the state lock; nothing else is touched."""
    if is_shared(settings):
        _postgres().drop(settings.storage, _schema(settings))
        return
    for path in state_files(settings):
        path.unlink(missing_ok=True)
