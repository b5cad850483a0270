"""What a crawl owns, and ``--fresh``: discard exactly that, and only when nobody uses it.

A crawl owns its saved state (the storage backend's files or schema, the cookie jar,
the stop request, the run log) and the output files its unloaders declare
(:attr:`rccrawler.unloaders.ResultUnloader.output_names`). Everything else in
``output_dir`` and ``state_dir`` belongs to the user and is never touched: an
``output_dir: .`` beside ``settings.yaml`` keeps the settings and the user's notes.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from rccrawler.data.runlog import RunLog
from rccrawler.exceptions import StateError
from rccrawler.unloaders import ResultUnloader, host_file_stem
from rccrawler.web.urls import host_of

if TYPE_CHECKING:
    from pathlib import Path

    from rccrawler.config import Settings
    from rccrawler.manager import ApplicationManager

logger = logging.getLogger(__name__)


def discard_stored_state(manager_cls: type[ApplicationManager], settings: Settings) -> None:
    """Remove the crawl's saved state (``--fresh``): its storage (SQLite files or
    PostgreSQL schema), cookie jar and stop request, through the manager's one way.

    The caller holds the state lock (SQLite), so no running crawl loses its files.
    """
    manager_cls.discard_state(settings)


def refuse_if_running(manager_cls: type[ApplicationManager], settings: Settings) -> None:
    """Raise StateError when workers of this crawl are alive in shared storage (SQLite
    crawls are kept out by the state lock instead): --fresh must change nothing then."""
    from rccrawler.data.storage import is_shared, open_storage, state_exists

    if not is_shared(settings) or not state_exists(settings):
        return
    from rccrawler.data.postgres import PostgresDataManager

    with open_storage(settings, task_tables=manager_cls.task_tables) as data:
        alive = data.workers() if isinstance(data, PostgresDataManager) else []
    running = [f"pid {pid} on {machine}" for _owner, machine, pid, live in alive if live]
    if running:
        raise StateError(
            f"the crawl {settings.crawl_name} is running ({', '.join(running)}); "
            "stop it first (rccrawler stop --config ...)"
        )


def crawl_hosts(manager_cls: type[ApplicationManager], settings: Settings) -> set[str]:
    """Every site host the crawl has written files for: those of the settings, and
    those of the saved state (a site removed from ``sites:`` since still has files)."""
    from rccrawler.data.storage import open_storage, state_exists

    hosts = {host_of(site) for site in settings.sites}
    try:
        if state_exists(settings):
            with open_storage(settings, task_tables=manager_cls.task_tables) as data:
                hosts.update(host.host for host in data.hosts())
    except Exception as exc:  # an unreadable state still lets --fresh discard it
        logger.debug("saved state unreadable: %s", exc)
    return hosts


def owned_output_files(
    unloaders: tuple[type[ResultUnloader], ...], output_dir: Path, hosts: set[str]
) -> list[Path]:
    """The files in ``output_dir`` that these unloaders write for these hosts, as they
    are on disk now (patterns expanded), with the temporary files a crash left."""
    names: set[str] = set()
    for cls in unloaders:
        for pattern in cls.output_names:
            if "{stem}" in pattern:
                names.update(pattern.format(stem=host_file_stem(host)) for host in hosts)
            else:
                names.add(pattern)
    if not output_dir.is_dir():
        return []
    found: set[Path] = set()
    for name in names:
        # A name may be a glob (e.g. "{stem}.*.warc.gz"); atomic_write's leftovers are
        # ".<name>.<random>".
        for pattern in (name, f".{name}.*"):
            found.update(p for p in output_dir.glob(pattern) if p.is_file() or p.is_symlink())
    return sorted(found)


def start_fresh(manager: ApplicationManager) -> list[Path]:
    """Discard what this crawl owns before it runs (``--fresh``).

    Takes the state lock first (SQLite), or looks for live workers (PostgreSQL), so a
    crawl that is running is refused (StateError) before anything changes; the lock
    stays held for the run that follows.

    Returns:
        The output files removed.
    """
    manager.lock_state()
    cls, settings = type(manager), manager.settings
    refuse_if_running(cls, settings)
    hosts = crawl_hosts(cls, settings)
    removed = owned_output_files(manager.unloader_classes, settings.output_dir, hosts)
    discard_stored_state(cls, settings)
    RunLog(settings.state_dir).discard()
    for path in removed:
        path.unlink(missing_ok=True)
    logger.info("--fresh: saved state discarded, %d output files removed", len(removed))
    return removed
