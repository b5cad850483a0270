"""Which crawl a command means: the one ``--config FILE`` describes, the one saved in
``--state DIR``, or the quick crawl of some URLs (``./rccrawler-NAME/``) (SPEC §3).

A crawl keeps the settings of its last run in its state_dir
(:class:`rccrawler.state.RunSettings`): ``--state DIR`` and the URLs of a quick crawl
find the crawl, its task and its storage there, so ``status``, ``stop``, ``export``,
``drop`` and a task's commands need no settings file.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from rccrawler.config import Settings, apply_overrides, flat_settings
from rccrawler.exceptions import ConfigError, StateError
from rccrawler.loading import importable_beside, load_class
from rccrawler.state import RunSettings

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

    from rccrawler.manager import ApplicationManager

Crawl = tuple["type[ApplicationManager]", Settings]
"""A crawl as the commands use it: its task and its settings."""

QUICK_PREFIX = "rccrawler-"
QUICK_NAME_MAX = 64
"""Characters of a quick crawl's folder name made of its hosts; a longer set of sites is
named by its first host, how many more, and a hash of them all."""
QUICK_STATE = "state"
"""The state_dir of a quick crawl, in its folder (the output goes beside it)."""


def quick_folder(urls: Sequence[str]) -> Path:
    """``./rccrawler-NAME/``, NAME made of the whole set of sites, in any order:
    ``rccrawler-a.test`` for ``crawl a.test``, ``rccrawler-a.test+b.test`` for
    ``crawl b.test a.test``. A start URL other than a site's root, or many sites, add a
    hash of the start URLs, so ``crawl a.test/docs/`` is not ``crawl a.test``.

    Raises:
        ConfigError: a URL that is not a site.
    """
    from rccrawler.unloaders import host_file_stem
    from rccrawler.web.urls import host_of, site_start_url

    starts: set[str] = set()
    for url in urls:
        try:
            starts.add(site_start_url(url))
        except ValueError as exc:
            raise ConfigError("URL", f"{url!r}: {exc}") from exc
    stems = sorted({host_file_stem(host_of(url)) for url in starts})
    name = "+".join(stems)
    roots = all(urlsplit(url).path in ("", "/") and not urlsplit(url).query for url in starts)
    if roots and len(name) <= QUICK_NAME_MAX:
        return Path(f"{QUICK_PREFIX}{name}")
    digest = hashlib.sha1("\n".join(sorted(starts)).encode()).hexdigest()[:8]
    head = stems[0] if len(stems) == 1 else f"{stems[0]}+{len(stems) - 1}"
    return Path(f"{QUICK_PREFIX}{head[:QUICK_NAME_MAX]}-{digest}")


def saved_run(state_dir: Path) -> RunSettings | None:
    """The settings of the last run saved in ``state_dir`` (or in its ``state/``, the
    state_dir of a quick crawl whose folder was named)."""
    for folder in (state_dir, state_dir / QUICK_STATE):
        saved = RunSettings.read(folder)
        if saved is not None:
            return RunSettings({**saved.mapping, "state_dir": str(folder)}, saved.source)
    return None


def crawl_of_mapping(raw: dict[str, Any], source: Path | None = None) -> Crawl:
    """The task and validated settings of a settings mapping."""
    from rccrawler.manager import settings_of_mapping

    if source is not None:
        importable_beside(source)  # a task module beside the settings file
    return settings_of_mapping(raw, source=source)


def crawl_of_state(state_dir: str | Path, overrides: Sequence[str] = ()) -> Crawl:
    """The crawl saved in ``state_dir`` with the settings of its last run (``--state``).

    Raises:
        StateError: no crawl saved its settings there.
    """
    saved = saved_run(Path(state_dir))
    if saved is None:
        raise StateError(
            f"no crawl's settings in {state_dir} (a crawl saves them there from its first "
            "run on): name the crawl with --config FILE"
        )
    return crawl_of_mapping(apply_overrides(saved.mapping, overrides), saved.source)


def quick_crawl(urls: Sequence[str], overrides: Sequence[str] = ()) -> Crawl:
    """The quick crawl of ``urls`` with the default settings and ``-s`` overrides.

    A quick crawl run before keeps what defines it (its task, its storage: the keys of
    the task's ``identity_keys``) from its last run unless ``-s`` sets them: ``crawl
    URL -s manager=…`` once, then ``crawl URL`` resumes that crawl.
    """
    from rccrawler.manager import ApplicationManager

    folder = quick_folder(urls)
    state_dir = folder / QUICK_STATE
    raw: dict[str, Any] = {"sites": list(urls), "state_dir": str(state_dir),
                           "output_dir": str(folder)}  # fmt: skip
    raw = apply_overrides(raw, overrides)
    saved = RunSettings.read(state_dir)
    if saved is not None:
        manager_path = raw.get("manager", saved.mapping.get("manager"))
        if isinstance(manager_path, str):
            manager_cls = load_class("manager", manager_path, ApplicationManager)
            given, last = flat_settings(raw), flat_settings(saved.mapping)
            for key in manager_cls.identity_keys:
                if key not in given and key in last:
                    section, _, name = key.rpartition(".")
                    target = raw.setdefault(section, {}) if section else raw
                    if isinstance(target, dict):
                        target[name] = last[key]
    return crawl_of_mapping(raw)


def crawl_of_reader(urls: Sequence[str]) -> Crawl:
    """The quick crawl of ``urls`` as a command that reads it finds it: with the
    settings of its last run when it has run, else the defaults."""
    folder = quick_folder(urls)
    saved = saved_run(folder / QUICK_STATE)
    if saved is not None:
        return crawl_of_mapping(saved.mapping, saved.source)
    return quick_crawl(urls)


def add_crawl_arguments(parser: argparse.ArgumentParser, *, urls: str = "positional") -> None:
    """The ways a command names its crawl: ``--config FILE``, ``--state DIR``, or the
    URLs of a quick crawl (``urls``: ``positional``, or ``option`` for a task's command,
    whose positional arguments are its own: ``--site URL``)."""
    parser.add_argument("--config", "-c", metavar="FILE", help="settings.yaml of the crawl")
    parser.add_argument("--state", metavar="DIR",
                        help="the crawl saved in DIR (with its last run's settings)")  # fmt: skip
    if urls == "positional":
        parser.add_argument("urls", nargs="*", metavar="URL",
                            help="the sites of a quick crawl (rccrawler crawl URL...)")  # fmt: skip
    else:
        parser.add_argument("--site", dest="urls", action="append", default=[], metavar="URL",
                            help="a site of a quick crawl, as rccrawler crawl URL... (again "
                            "for each site)")  # fmt: skip


NAME_THE_CRAWL = "give --config FILE, --state DIR or the URLs of a quick crawl"


def chosen_crawl(args: argparse.Namespace) -> Crawl:
    """The crawl a reading command's arguments name (one way only).

    Raises:
        ConfigError: none or several ways, or bad settings.
        StateError: ``--state DIR`` holds no crawl's settings.
    """
    ways = [bool(args.config), bool(args.state), bool(args.urls)]
    if sum(ways) != 1:
        raise ConfigError("--config", NAME_THE_CRAWL + " (one of them)")
    if args.config:
        from rccrawler.manager import load_settings

        return load_settings(args.config)
    if args.state:
        return crawl_of_state(args.state)
    return crawl_of_reader(args.urls)
