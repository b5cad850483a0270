"""``rccrawler crawl``: the crawl a settings file describes, or a quick crawl of URLs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rccrawler.commands.runner import start_crawl
from rccrawler.exceptions import ConfigError

if TYPE_CHECKING:
    from collections.abc import Sequence


def crawl_command(config: str, *, fresh: bool, tui: bool | None = None) -> int:
    from rccrawler.manager import load_settings

    manager_cls, settings = load_settings(config)
    return start_crawl(manager_cls, settings, fresh=fresh, tui=tui)


def quick_crawl_command(
    urls: Sequence[str], overrides: Sequence[str], *, fresh: bool, tui: bool | None = None
) -> int:
    """``rccrawler crawl URL...``: the default task and settings, no settings file; the
    state and the output go to ``./rccrawler-HOST/`` (HOST of the first URL)."""
    import yaml

    from rccrawler.config import Settings, settings_from_mapping
    from rccrawler.loading import load_class
    from rccrawler.manager import ApplicationManager
    from rccrawler.unloaders import host_file_stem
    from rccrawler.web.urls import host_of, site_start_url

    try:
        first = host_of(site_start_url(urls[0]))
    except ValueError as exc:
        raise ConfigError("URL", f"{urls[0]!r}: {exc}") from exc
    folder = Path(f"rccrawler-{host_file_stem(first)}")
    raw: dict[str, Any] = {"sites": list(urls), "state_dir": str(folder / "state"),
                           "output_dir": str(folder)}  # fmt: skip
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ConfigError("-s", f"{item!r} is not KEY=VALUE")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(key, f"{text!r} is not a YAML value") from exc
        target = raw
        *parents, last = key.split(".")
        for part in parents:
            target = target.setdefault(part, {})
            if not isinstance(target, dict):
                raise ConfigError(key, f"{part} is not a section")
        target[last] = value
    manager_path = raw.get("manager", Settings.__dataclass_fields__["manager"].default)
    manager_cls = load_class("manager", manager_path, ApplicationManager)
    settings = settings_from_mapping(raw, allowed_sections=frozenset(manager_cls.settings_sections))
    manager_cls.check_settings(settings)
    return start_crawl(manager_cls, settings, fresh=fresh, tui=tui)
