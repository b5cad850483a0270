"""What a crawl owns, and ``--fresh``: discard exactly that, and only when nobody uses it.

A crawl owns its saved state (the storage backend's files or schema, the cookie jar,
the stop request, the run log) and the output files its unloaders declare
(:attr:`rccrawler.unloaders.ResultUnloader.output_names`). Everything else in
``output_dir`` and ``state_dir`` belongs to the user and is never touched: an
``output_dir: .`` beside ``settings.yaml`` keeps the settings and the user's notes.
"""

from __future__ import annotations

import fnmatch
import glob
import logging
import os
import re
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

from rccrawler.data.runlog import RunLog
from rccrawler.exceptions import StateError
from rccrawler.unloaders import ResultUnloader, host_file_stem
from rccrawler.web.urls import host_of

if TYPE_CHECKING:
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
            "stop it first (rccrawler stop)"
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


_MAGIC = re.compile(r"[*?\[]")
"""A glob's wildcards (the characters glob.has_magic and glob.escape know)."""


def owned_output_files(
    unloaders: tuple[type[ResultUnloader], ...], output_dir: Path, hosts: set[str]
) -> list[Path]:
    """The files in ``output_dir`` that these unloaders write for these hosts, as they
    are on disk now (patterns expanded), with the temporary files a crash left."""
    names: set[str] = set()
    for cls in unloaders:
        for pattern in cls.output_names:
            if "{stem}" in pattern:
                # An IPv6 host's stem holds "[": a file name, not a wildcard.
                names.update(
                    pattern.format(stem=glob.escape(host_file_stem(host))) for host in hosts
                )
            else:
                names.add(pattern)
    if not output_dir.is_dir():
        return []
    # One listing of the folder for all the names: a glob per name read the folder once
    # per name, and a crawl of 2,000 sites writes 8,000 files (a minute, quadratic).
    exact = {name for name in names if not _MAGIC.search(name)}
    patterns: defaultdict[str, list[str]] = defaultdict(list)
    """Names that are globs (e.g. "{stem}.*.warc.gz"), by the text before their first
    wildcard, so that a file is tried only against those its name starts with."""
    for name in names - exact:
        patterns[_MAGIC.split(name, 1)[0]].append(name)

    def owned(name: str) -> bool:
        if name in exact:
            return True
        return any(
            fnmatch.fnmatchcase(name, pattern)
            for end in range(len(name) + 1)
            for pattern in patterns.get(name[:end], ())
        )

    found = []
    with os.scandir(output_dir) as entries:
        for entry in entries:
            name = entry.name
            # atomic_write's leftovers are ".<name>.<pid>-<n>" (no dot after the name's).
            leftover = name[1:].rpartition(".")[0] if name.startswith(".") else ""
            if (owned(name) or (leftover and owned(leftover))) and (
                entry.is_file() or entry.is_symlink()
            ):
                found.append(Path(entry.path))
    return sorted(found)


def discard_crawl(
    manager_cls: type[ApplicationManager],
    settings: Settings,
    unloaders: tuple[type[ResultUnloader], ...],
    *,
    output: bool = True,
) -> list[Path]:
    """Remove the crawl's saved state and, with ``output``, the output files its
    ``unloaders`` wrote (``--fresh``, ``drop``). The caller holds the state lock (SQLite)
    and has made sure no worker runs (:func:`refuse_if_running`).

    Returns:
        The output files removed.
    """
    hosts = crawl_hosts(manager_cls, settings) if output else set()
    removed = owned_output_files(unloaders, settings.output_dir, hosts) if output else []
    discard_stored_state(manager_cls, settings)
    RunLog(settings.state_dir).discard()
    for path in removed:
        path.unlink(missing_ok=True)
    return removed


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
    removed = discard_crawl(cls, settings, manager.unloader_classes)
    logger.info("--fresh: saved state discarded, %d output files removed", len(removed))
    return removed
