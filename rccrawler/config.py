"""Typed, validated settings: the only place where settings.yaml is read and defaults live."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rccrawler.exceptions import ConfigError
from rccrawler.urls import NormalizeOptions

DEFAULT_USER_AGENT = "rccrawler/0.1 (+https://github.com/rccrawler/rccrawler)"
PARSERS = ("lexbor", "html5lib")


@dataclass(frozen=True, slots=True)
class CrawlSettings:
    """The ``crawl:`` section (SPEC §4)."""

    max_depth: int = 10
    max_pages: int = 0
    crawl_delay_ms: int = 1000
    max_downloads_at_time: int = 2
    timeout_s: float = 30.0
    max_body_bytes: int = 10_000_000
    max_download_attempts: int = 3
    obey_robots: bool = True
    user_agent: str = DEFAULT_USER_AGENT
    from_: str = ""
    proxy: str | None = None
    cookies: bool = True
    include: tuple[str, ...] = ()
    resolve: Mapping[str, str] = field(default_factory=dict)
    verify_tls: bool = True
    auto_throttle: bool = False
    max_redirects: int = 10
    add_trailing_slash: bool = False
    ip_to_domain: bool = False

    @property
    def normalize_options(self) -> NormalizeOptions:
        """The URL normalization switches (SPEC §6): one identity rule for the whole crawl."""
        return NormalizeOptions(
            add_trailing_slash=self.add_trailing_slash, ip_to_domain=self.ip_to_domain
        )


@dataclass(frozen=True, slots=True)
class Settings:
    """The whole settings.yaml, typed."""

    sites: tuple[str, ...]
    manager: str = "plugins.webgraph.WebGraphManager"
    state_dir: Path = Path("state/default")
    output_dir: Path = Path("output/default")
    downloading_threads: int = 8
    parsing_threads: int = 2
    crawl: CrawlSettings = field(default_factory=CrawlSettings)
    storage: str = "sqlite"
    parser: str = "lexbor"
    downloading_thread: str | None = None
    parsing_thread: str | None = None
    routine_thread: str | None = None
    finisher: str | None = None
    unloaders: tuple[str, ...] | None = None
    sections: Mapping[str, Any] = field(default_factory=dict)
    """Extra top-level sections that the manager class declares (e.g. ``search:``)."""
    source: Path | None = None
    """The file these settings came from."""
    name: str = ""
    """The crawl's identity in shared storage (SPEC §9); empty means its state_dir."""

    @property
    def crawl_name(self) -> str:
        """The crawl's identity: ``name:``, else the absolute state_dir (so ``~/x`` and
        its absolute spelling are one crawl, and two projects' ``state/x`` are two)."""
        return self.name or str(self.state_dir.expanduser().resolve())


# key -> (type check, description) tables; a type list allows several.
_CRAWL_KEYS: dict[str, tuple[tuple[type, ...], str]] = {
    "max_depth": ((int,), "a whole number >= 0"),
    "max_pages": ((int,), "a whole number >= 0 (0 = no limit)"),
    "crawl_delay_ms": ((int, float), "a number of milliseconds >= 0"),
    "max_downloads_at_time": ((int,), "a whole number >= 1"),
    "timeout_s": ((int, float), "a number of seconds > 0"),
    "max_body_bytes": ((int,), "a whole number of bytes > 0"),
    "max_download_attempts": ((int,), "a whole number >= 1"),
    "obey_robots": ((bool,), "true or false"),
    "user_agent": ((str,), "a string"),
    "from": ((str,), "an e-mail address string"),
    "proxy": ((str, type(None)), "null or http://host:port"),
    "cookies": ((bool,), "true or false"),
    "include": ((list,), "a list of strings"),
    "resolve": ((dict,), 'a mapping like {"site.test:80": "127.0.0.1:8080"}'),
    "verify_tls": ((bool,), "true or false"),
    "auto_throttle": ((bool,), "true or false"),
    "max_redirects": ((int,), "a whole number >= 0"),
    "add_trailing_slash": ((bool,), "true or false"),
    "ip_to_domain": ((bool,), "true or false"),
}

_TOP_KEYS = {
    "manager", "sites", "state_dir", "output_dir", "threads", "crawl", "storage", "parser",
    "downloading_thread", "parsing_thread", "routine_thread", "finisher", "unloaders", "name",
}  # fmt: skip


def _check_type(key: str, value: object, types: tuple[type, ...], what: str) -> None:
    # bool is an int in Python; a number key must not accept `true`.
    if isinstance(value, bool) and bool not in types:
        raise ConfigError(key, f"must be {what}, not a boolean")
    if not isinstance(value, types):
        raise ConfigError(key, f"must be {what}, not {type(value).__name__} {value!r}")


def _crawl_settings(raw: object) -> CrawlSettings:
    if raw is None:
        return CrawlSettings()
    if not isinstance(raw, dict):
        raise ConfigError("crawl", f"must be a mapping, not {type(raw).__name__}")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        dotted = f"crawl.{key}"
        if key not in _CRAWL_KEYS:
            raise ConfigError(dotted, "unknown key (allowed: " + ", ".join(_CRAWL_KEYS) + ")")
        types, what = _CRAWL_KEYS[key]
        _check_type(dotted, value, types, what)
        values["from_" if key == "from" else key] = value
    for key in ("max_depth", "max_pages", "crawl_delay_ms", "max_redirects"):
        if values.get(key, 0) < 0:
            raise ConfigError(f"crawl.{key}", "must be >= 0")
    for key in ("max_downloads_at_time", "max_download_attempts", "max_body_bytes"):
        if values.get(key, 1) < 1:
            raise ConfigError(f"crawl.{key}", "must be >= 1")
    if values.get("timeout_s", 1) <= 0:
        raise ConfigError("crawl.timeout_s", "must be > 0")
    if "include" in values:
        if not all(isinstance(item, str) and item for item in values["include"]):
            raise ConfigError("crawl.include", "must be a list of non-empty strings")
        values["include"] = tuple(values["include"])
    if "resolve" in values:
        for name, target in values["resolve"].items():
            if not (isinstance(name, str) and isinstance(target, str)):
                raise ConfigError("crawl.resolve", "keys and values must be strings")
            if ":" not in name or ":" not in target:
                raise ConfigError(f"crawl.resolve.{name}", "must map host:port to ip:port")
            if not target.rsplit(":", 1)[1].isdigit() or not name.rsplit(":", 1)[1].isdigit():
                raise ConfigError(f"crawl.resolve.{name}", "ports must be numbers")
        values["resolve"] = {k.lower(): v for k, v in values["resolve"].items()}
    proxy = values.get("proxy")
    if proxy is not None and not proxy.startswith(("http://", "https://")):
        raise ConfigError("crawl.proxy", "must be an http:// or https:// proxy URL")
    if "user_agent" in values and not values["user_agent"].strip():
        raise ConfigError("crawl.user_agent", "must not be empty")
    return CrawlSettings(**values)


def _sites(raw: object) -> tuple[str, ...]:
    from rccrawler.urls import site_start_url

    if raw is None:
        raise ConfigError("sites", "is required: a list of domain names or start URLs")
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise ConfigError("sites", "must be a non-empty list of domain names or start URLs")
    sites: list[str] = []
    for index, site in enumerate(raw):
        if not isinstance(site, str):
            raise ConfigError(f"sites[{index}]", f"must be a string, not {type(site).__name__}")
        try:
            sites.append(site_start_url(site))
        except ValueError as exc:
            raise ConfigError(f"sites[{index}]", str(exc)) from exc
    return tuple(sites)


def _path(key: str, raw: object, default: Path) -> Path:
    if raw is None:
        return default
    if not isinstance(raw, str) or not raw.strip():
        raise ConfigError(key, "must be a non-empty path string")
    return Path(os.path.expanduser(raw))


def _dotted(key: str, raw: object) -> str | None:
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise ConfigError(key, f"must be a dotted path string, not {type(raw).__name__}")
    return raw


def settings_from_mapping(
    raw: object, *, source: Path | None = None, allowed_sections: frozenset[str] = frozenset()
) -> Settings:
    """Validate a parsed settings mapping.

    Args:
        raw: what yaml.safe_load() returned.
        source: the file, for defaults named after it.
        allowed_sections: extra top-level keys the manager declares.
    """
    if not isinstance(raw, dict):
        raise ConfigError("settings", "the file must hold a YAML mapping of keys")
    for key in raw:
        if not isinstance(key, str):
            raise ConfigError(str(key), "keys must be strings")
        if key not in _TOP_KEYS and key not in allowed_sections:
            allowed = sorted(_TOP_KEYS | allowed_sections)
            raise ConfigError(key, "unknown key (allowed: " + ", ".join(allowed) + ")")
    stem = source.stem if source else "default"
    threads = raw.get("threads") or {}
    if not isinstance(threads, dict):
        raise ConfigError("threads", "must be a mapping like {downloading: 8, parsing: 2}")
    for key, value in threads.items():
        if key not in ("downloading", "parsing"):
            raise ConfigError(f"threads.{key}", "unknown key (allowed: downloading, parsing)")
        _check_type(f"threads.{key}", value, (int,), "a whole number >= 1")
        if value < 1:
            raise ConfigError(f"threads.{key}", "must be >= 1")
    storage = raw.get("storage", "sqlite")
    if not isinstance(storage, str) or not (
        storage == "sqlite" or storage.startswith(("postgresql://", "postgres://"))
    ):
        raise ConfigError("storage", "must be 'sqlite' or a postgresql:// URL")
    parser = raw.get("parser", "lexbor")
    if parser not in PARSERS:
        raise ConfigError("parser", f"must be one of {', '.join(PARSERS)}, not {parser!r}")
    unloaders = raw.get("unloaders")
    if unloaders is not None:
        if isinstance(unloaders, str):
            unloaders = [unloaders]
        if not isinstance(unloaders, list) or not all(isinstance(u, str) for u in unloaders):
            raise ConfigError("unloaders", "must be a list of dotted paths")
        unloaders = tuple(unloaders)
    manager = raw.get("manager", Settings.__dataclass_fields__["manager"].default)
    if not isinstance(manager, str):
        raise ConfigError("manager", "must be a dotted path string")
    name = raw.get("name", "")
    if not isinstance(name, str) or len(name) > 200 or any(ord(c) < 32 for c in name):
        raise ConfigError("name", "must be a string of at most 200 printable characters")
    return Settings(
        name=name,
        sites=_sites(raw.get("sites")),
        manager=manager,
        state_dir=_path("state_dir", raw.get("state_dir"), Path("state") / stem),
        output_dir=_path("output_dir", raw.get("output_dir"), Path("output") / stem),
        downloading_threads=threads.get("downloading", 8),
        parsing_threads=threads.get("parsing", 2),
        crawl=_crawl_settings(raw.get("crawl")),
        storage=storage,
        parser=parser,
        downloading_thread=_dotted("downloading_thread", raw.get("downloading_thread")),
        parsing_thread=_dotted("parsing_thread", raw.get("parsing_thread")),
        routine_thread=_dotted("routine_thread", raw.get("routine_thread")),
        finisher=_dotted("finisher", raw.get("finisher")),
        unloaders=unloaders,
        sections={k: raw[k] for k in allowed_sections if k in raw},
        source=source,
    )


def read_settings_file(path: str | Path) -> dict[str, Any]:
    """Read settings.yaml into a mapping; every problem is a ConfigError."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ConfigError("--config", f"no such file: {path}") from exc
    except OSError as exc:
        raise ConfigError("--config", f"cannot read {path}: {exc.strerror}") from exc
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError("settings", f"{path} is not valid YAML{where}") from exc
    if raw is None:
        raise ConfigError("sites", f"is required ({path} is empty)")
    if not isinstance(raw, dict):
        raise ConfigError("settings", f"{path} must hold a YAML mapping of keys")
    return raw
