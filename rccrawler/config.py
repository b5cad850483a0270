"""Typed, validated settings: the only place where settings.yaml is read and defaults live."""

from __future__ import annotations

import contextlib
import difflib
import math
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import yaml

from rccrawler.exceptions import ConfigError
from rccrawler.policy import ScopeRules
from rccrawler.web.html import PARSERS
from rccrawler.web.urls import NormalizeOptions

DEFAULT_USER_AGENT = "rccrawler/0.1 (+https://github.com/rccrawler/rccrawler)"


@dataclass(frozen=True, slots=True, kw_only=True)
class CrawlSettings:
    """The ``crawl:`` section (SPEC §4)."""

    # What is crawled (SPEC §5.3, §6)
    max_depth: int = 10
    """Links followed from a start page at most (its level is 0)."""
    max_pages: int = 0
    """Pages per site at most (0: no limit); links beyond it are skipped."""
    include: tuple[str, ...] = ()
    """If any, a URL must contain one of these to be crawled (reason ``include``)."""
    exclude: tuple[str, ...] = ()
    """A URL containing one of these is not crawled (reason ``exclude``)."""
    include_regex: tuple[str, ...] = ()
    """Python regular expressions; if any, a URL must match one (``re.search``)."""
    exclude_regex: tuple[str, ...] = ()
    """A URL matching one of these (``re.search``) is not crawled (reason ``exclude``)."""
    max_url_length: int = 2048
    """A found URL longer than this is not crawled (reason ``too_long``): it ends traps that
    grow a path or a query string with every page."""
    max_query_variants: int = 1000
    """Distinct query strings crawled per host and path; more are skipped (``too_many_queries``)."""
    add_trailing_slash: bool = False
    """SPEC §6: ``/dir`` and ``/dir/`` are one page (off: they can differ)."""
    ip_to_domain: bool = False
    """SPEC §6: a link to a host's IP address counts as the host (off by default)."""

    # Politeness (SPEC §5.8)
    crawl_delay_ms: int = 1000
    """Milliseconds between two requests to a host, unless robots.txt asks for more."""
    max_crawl_delay_ms: int = 60_000
    """A robots.txt Crawl-delay above this is capped to it, with a warning (SPEC §5.8)."""
    max_downloads_at_time: int = 2
    """Requests in flight to one host at most."""
    obey_robots: bool = True
    """Read each host's robots.txt and obey its rules for our user agent."""
    auto_throttle: bool = False
    """Stretch a host's crawl delay when it answers slowly."""
    user_agent: str = DEFAULT_USER_AGENT
    """The User-Agent header; its product token picks the robots.txt group (RFC 9309)."""
    from_: str = ""
    """The ``From`` header (an operator's e-mail address), when set."""

    # Requests (SPEC §5.2, §5.5)
    timeout_s: float = 30.0
    """Seconds to connect, and between two reads of an answer."""
    max_download_attempts: int = 3
    """Tries of one page before a timeout or 5xx is final."""
    max_redirects: int = 10
    """Redirects followed in a chain; a longer chain ends in ``redirect_loop``."""
    proxy: str | None = None
    """An HTTP proxy URL that every request goes through."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Extra request headers (never Host; no control characters)."""
    cookies: bool = True
    """Keep cookies per host, saved with the state."""
    resolve: Mapping[str, str] = field(default_factory=dict)
    """host -> address to connect to instead of asking DNS (like curl's ``--resolve``)."""
    verify_tls: bool = True
    """Check TLS certificates against the system's authorities."""

    # What one page may take (hostile sites)
    max_body_bytes: int = 10_000_000
    """Bytes of one body kept; a longer body is cut and the page truncated."""
    max_links_per_page: int = 10_000
    """Links kept from one page (document order); the rest are cut and the page is truncated."""
    max_html_depth: int = 512
    """Element nesting kept by the link parser; deeper markup is cut and the page truncated."""
    max_html_tags: int = 250_000
    """Tags (``<``) of one page parsed; the markup after them is cut and the page truncated.
    The largest page of the Python, PostgreSQL and SQLAlchemy docs has 98,000; the parser
    keeps about 180 bytes per element, so this caps one page's parse near 45 MB."""

    # Sitemaps
    sitemaps: bool = True
    """Read robots.txt ``Sitemap:`` lines and ``/sitemap.xml`` for level-1 URLs."""
    max_sitemap_files: int = 50
    """Sitemap files (index files included) fetched per site."""
    max_sitemap_urls: int = 50_000
    """URLs taken from a site's sitemaps; the rest are ignored with a warning."""

    @property
    def scope(self) -> ScopeRules:
        """The include/exclude rules (patterns compiled; ``re`` caches them)."""
        return ScopeRules(
            include=self.include,
            exclude=self.exclude,
            include_regex=tuple(re.compile(p) for p in self.include_regex),
            exclude_regex=tuple(re.compile(p) for p in self.exclude_regex),
        )

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
    """The task: an ApplicationManager subclass by dotted path."""
    state_dir: Path = Path("state/default")
    output_dir: Path = Path("output/default")
    downloading_threads: int | None = None
    """A fixed number of DownloadingThreads; None (``auto``, the default): as many as
    the requests politeness allows right now, up to ``max_downloading`` (see
    :mod:`rccrawler.threads.pool`)."""
    max_downloading: int = 256
    """The most DownloadingThreads an ``auto`` pool runs (memory may allow fewer)."""
    parsing_threads: int = 2
    """ParsingThreads."""
    one_core: bool = True
    """Keep the crawl's threads on one CPU core, moved to an idler one when another
    process keeps it busy (see :mod:`rccrawler.cpus`): handing the GIL between cores
    costs more than parsing small pages in parallel gains."""
    parse_worker: bool = False
    """Parse large pages in a worker process, on another core than the crawl's threads
    (see :class:`rccrawler.workers.LargePageParser`): faster on sites of large pages,
    for a process's memory."""
    crawl: CrawlSettings = field(default_factory=CrawlSettings)
    storage: str = "sqlite"
    """``sqlite`` (a file in state_dir) or a ``postgresql://`` URL (SPEC §9)."""
    storage_wait_s: float = 120.0
    """Seconds a worker waits out a lost connection to shared storage (a restart, a
    failover) before it exits 2 (SPEC §9); 0 exits at the first loss."""
    parser: str = "lexbor"
    """The HTML parser of links and text (:data:`rccrawler.web.html.PARSERS`)."""
    downloading_thread: str | None = None
    """A DownloadingThread subclass by dotted path, instead of the task's."""
    parsing_thread: str | None = None
    """A ParsingThread subclass by dotted path, instead of the task's."""
    routine_thread: str | None = None
    """A RoutineThread subclass by dotted path, instead of the task's."""
    finisher: str | None = None
    """An ApplicationFinisher subclass by dotted path, instead of the task's."""
    unloaders: tuple[str, ...] | None = None
    """ResultUnloader classes by dotted path, instead of the task's."""
    sections: Mapping[str, Any] = field(default_factory=dict)
    """Extra top-level sections that the manager class declares (e.g. ``search:``)."""
    source: Path | None = None
    """The file these settings came from."""
    name: str = ""
    """The crawl's identity in shared storage (SPEC §9); empty means its state_dir."""
    site_crawl: Mapping[str, CrawlSettings] = field(default_factory=dict)
    """Per-site ``crawl:`` (host -> settings) for ``sites:`` entries that override keys."""

    @property
    def downloading_most(self) -> int:
        """The most DownloadingThreads this crawl may run: the fixed number, or the cap of
        an ``auto`` pool (what a PostgreSQL worker leases hosts for, a link checker's
        hosts checked at once)."""
        return self.downloading_threads or self.max_downloading

    def crawl_for(self, host: str) -> CrawlSettings:
        """The crawl settings of one site: its own overrides, else ``crawl:``."""
        return self.site_crawl.get(host, self.crawl)

    @property
    def crawl_name(self) -> str:
        """The crawl's identity: ``name:``, else the absolute state_dir (so ``~/x`` and
        its absolute spelling are one crawl, and two projects' ``state/x`` are two)."""
        return self.name or str(self.state_dir.expanduser().resolve())


MAX_INT = 2**53
"""No count or size in settings is larger: beyond it numbers lose precision as floats."""
MAX_TIMEOUT_S = 86_400.0
MAX_DELAY_MS = 86_400_000
"""A day: a longer per-host delay would not end a crawl in any useful time."""
_LOWER_BOUNDS = {
    "max_depth": 0, "max_pages": 0, "crawl_delay_ms": 0, "max_redirects": 0,
    "max_crawl_delay_ms": 0, "max_downloads_at_time": 1, "max_download_attempts": 1,
    "max_body_bytes": 1, "max_links_per_page": 1, "max_html_depth": 16, "max_html_tags": 1000,
    "max_url_length": 256, "max_query_variants": 1, "max_sitemap_files": 0,
    "max_sitemap_urls": 0,
}  # fmt: skip
_FLAGS = (
    "obey_robots", "cookies", "sitemaps", "verify_tls", "auto_throttle", "add_trailing_slash",
    "ip_to_domain",
)  # fmt: skip
_MILLISECONDS = ((int, float), "a number of milliseconds >= 0")
_PATTERNS = ((str, list, type(None)), "a regular expression or a list of them")
_CRAWL_KEYS: dict[str, tuple[tuple[type, ...], str]] = {
    **{key: ((int,), f"a whole number >= {low}") for key, low in _LOWER_BOUNDS.items()},
    **dict.fromkeys(_FLAGS, ((bool,), "true or false")),
    **dict.fromkeys(("include", "exclude"), ((list,), "a list of strings")),
    **dict.fromkeys(("include_regex", "exclude_regex"), _PATTERNS),
    **dict.fromkeys(("crawl_delay_ms", "max_crawl_delay_ms"), _MILLISECONDS),
    "max_pages": ((int,), "a whole number >= 0 (0 = no limit)"),
    "max_body_bytes": ((int,), "a whole number of bytes > 0"),
    "timeout_s": ((int, float), "a number of seconds > 0"),
    "user_agent": ((str,), "a string"),
    "from": ((str,), "an e-mail address string"),
    "proxy": ((str, type(None)), "null or http://host:port"),
    "headers": ((dict,), "a mapping of header names to strings"),
    "resolve": ((dict,), 'a mapping like {"site.test:80": "127.0.0.1:8080"}'),
}
"""key -> (the types it accepts, how to say so): whole numbers are described by their
lower bound, flags are booleans, and the rest say what they are."""
SITE_KEYS = (
    "max_depth", "crawl_delay_ms", "max_downloads_at_time", "include", "exclude",
    "include_regex", "exclude_regex", "headers", "sitemaps", "max_sitemap_files",
    "max_sitemap_urls",
)  # fmt: skip
"""``crawl:`` keys a ``sites:`` entry may override: the ones that are per host."""
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
"""An HTTP header name (RFC 9110 token)."""


def machine_limits() -> dict[str, int]:
    """Upper bounds that come from what this machine can hold.

    * threads: each one may hold a socket and a file, so at most a quarter of the open
      file limit, and never more than 4096 (each reserves a stack);
    * hosts_kept: hosts whose connection stays open between two of their requests (a
      polite crawl asks each of its hosts every second or so), another quarter;
    * ``max_body_bytes``: every downloading thread may hold one body at once, so one body
      may use at most a sixteenth of the physical memory.
    """
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    files = soft if soft != resource.RLIM_INFINITY else 65_536
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        memory = 4 * 2**30
    quarter = files // 4
    return {
        "threads": max(4, min(4096, quarter)),
        "hosts_kept": max(64, quarter),
        "max_body_bytes": max(2**20, memory // 16),
    }


_TOP_KEYS = {
    "manager", "sites", "sites_file", "state_dir", "output_dir", "threads", "crawl", "storage",
    "parser", "downloading_thread", "parsing_thread", "routine_thread", "finisher",
    "unloaders", "name", "storage_wait_s",
}  # fmt: skip
_THREADS_KEYS = ("downloading", "parsing", "one_core", "parse_worker", "max_downloading")


def unknown_key(key: str, known: Sequence[str], elsewhere: Sequence[str] = ()) -> ConfigError:
    """The error of a key its section does not know, with the closest known one.

    Args:
        key: the dotted key as written (``crawl.crawl_delay``).
        known: the keys of its section (``crawl_delay_ms``...).
        elsewhere: dotted keys of other sections, suggested when the name is one of
            theirs (``crawl_delay_ms`` written at the top level: ``crawl.crawl_delay_ms``).
    """
    prefix, _, name = key.rpartition(".")
    close = difflib.get_close_matches(name, known, n=1)
    if close:
        return ConfigError(key, f"unknown key; did you mean {prefix + '.' if prefix else ''}"
                                f"{close[0]}?")  # fmt: skip
    by_name = {other.rpartition(".")[2]: other for other in elsewhere}
    close = difflib.get_close_matches(name, list(by_name), n=1)
    if close:
        return ConfigError(key, f"unknown key; did you mean {by_name[close[0]]}?")
    return ConfigError(key, "unknown key (known: " + ", ".join(known) + ")")


def _check_type(key: str, value: object, types: tuple[type, ...], what: str) -> None:
    # bool is an int in Python; a number key must not accept `true`.
    if isinstance(value, bool) and bool not in types:
        raise ConfigError(key, f"must be {what}, not a boolean")
    if not isinstance(value, types):
        raise ConfigError(key, f"must be {what}, not {type(value).__name__} {value!r}")
    # YAML reads .inf and .nan as floats; no setting means either (SPEC §4).
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(key, f"must be {what}, not {value!r}")
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
        raise ConfigError(key, f"must be {what}, not a number this large")


def _check_header_text(key: str, value: str) -> None:
    """A value sent in a request header: CR/LF would start a header of the site's choosing."""
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in value):
        raise ConfigError(key, "must not contain control characters (CR, LF, tab...)")


def _crawl_settings(raw: object, prefix: str = "crawl") -> CrawlSettings:
    if raw is None:
        return CrawlSettings()
    if not isinstance(raw, dict):
        raise ConfigError(prefix, f"must be a mapping, not {type(raw).__name__}")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        dotted = f"{prefix}.{key}"
        if key not in _CRAWL_KEYS:
            raise unknown_key(dotted, list(_CRAWL_KEYS))
        types, what = _CRAWL_KEYS[key]
        _check_type(dotted, value, types, what)
        values["from_" if key == "from" else key] = value
    for key, low in _LOWER_BOUNDS.items():
        if values.get(key, low) < low:
            raise ConfigError(f"{prefix}.{key}", f"must be >= {low}")
    if values.get("timeout_s", 1) <= 0:
        raise ConfigError(f"{prefix}.timeout_s", "must be > 0")
    if values.get("timeout_s", 1) > MAX_TIMEOUT_S:
        raise ConfigError(f"{prefix}.timeout_s", f"must be <= {MAX_TIMEOUT_S:.0f} (a day)")
    for key in ("crawl_delay_ms", "max_crawl_delay_ms"):
        if values.get(key, 0) > MAX_DELAY_MS:
            raise ConfigError(f"{prefix}.{key}", f"must be <= {MAX_DELAY_MS} (a day)")
    body_limit = machine_limits()["max_body_bytes"]
    if values.get("max_body_bytes", 1) > body_limit:
        raise ConfigError(
            f"{prefix}.max_body_bytes", f"must be <= {body_limit} (1/16 of this machine's memory)"
        )
    for key in ("user_agent", "from"):
        if key in values or (key == "from" and "from_" in values):
            _check_header_text(f"{prefix}.{key}", values["from_" if key == "from" else key])
    for key in ("include", "exclude"):
        if key in values:
            if not all(isinstance(item, str) and item for item in values[key]):
                raise ConfigError(f"{prefix}.{key}", "must be a list of non-empty strings")
            values[key] = tuple(values[key])
    for key in ("include_regex", "exclude_regex"):
        if key in values:
            values[key] = _patterns(f"{prefix}.{key}", values[key])
    if "headers" in values:
        values["headers"] = _headers(f"{prefix}.headers", values["headers"])
    if "resolve" in values:
        for name, target in values["resolve"].items():
            if not (isinstance(name, str) and isinstance(target, str)):
                raise ConfigError(f"{prefix}.resolve", "keys and values must be strings")
            if ":" not in name or ":" not in target:
                raise ConfigError(f"{prefix}.resolve.{name}", "must map host:port to ip:port")
            if not target.rsplit(":", 1)[1].isdigit() or not name.rsplit(":", 1)[1].isdigit():
                raise ConfigError(f"{prefix}.resolve.{name}", "ports must be numbers")
        values["resolve"] = {k.lower(): v for k, v in values["resolve"].items()}
    proxy = values.get("proxy")
    if proxy is not None:
        _check_proxy(proxy)
    if "user_agent" in values and not values["user_agent"].strip():
        raise ConfigError(f"{prefix}.user_agent", "must not be empty")
    return CrawlSettings(**values)


def _patterns(key: str, raw: str | list[Any] | None) -> tuple[str, ...]:
    """Regular expressions, compiled once here so a bad one stops the crawl before it starts."""
    if raw is None:
        return ()
    patterns = [raw] if isinstance(raw, str) else raw
    for index, pattern in enumerate(patterns):
        if not isinstance(pattern, str) or not pattern:
            raise ConfigError(key, "must be a regular expression or a list of non-empty ones")
        try:
            re.compile(pattern)
        except re.error as exc:
            where = f"[{index}]" if not isinstance(raw, str) else ""
            raise ConfigError(
                f"{key}{where}", f"{pattern!r} is not a valid regular expression ({exc})"
            ) from exc
    return tuple(patterns)


def _headers(key: str, raw: dict[Any, Any]) -> dict[str, str]:
    """Extra request headers: names are tokens, values plain text, and Host is the crawl's."""
    headers: dict[str, str] = {}
    for name, value in raw.items():
        if not isinstance(name, str) or not _TOKEN.fullmatch(name):
            raise ConfigError(key, f"{name!r} is not a header name")
        if not isinstance(value, str):
            raise ConfigError(f"{key}.{name}", f"must be a string, not {type(value).__name__}")
        if name.lower() == "host":
            raise ConfigError(f"{key}.{name}", "cannot be set: the crawl sends each site's Host")
        _check_header_text(f"{key}.{name}", value)
        headers[name] = value
    return headers


def _check_proxy(proxy: str) -> None:
    what = "must be an http:// or https:// proxy URL like http://host:port"
    if not proxy.startswith(("http://", "https://")) or any(c.isspace() for c in proxy):
        raise ConfigError("crawl.proxy", what)
    try:
        parts = urlsplit(proxy)
        _ = parts.port  # raises for a port that is not a number
    except ValueError as exc:
        raise ConfigError("crawl.proxy", f"{what} ({exc})") from exc
    if not parts.hostname:
        raise ConfigError("crawl.proxy", f"{what} (no host)")


MAX_SITES_FILE_BYTES = 64 * 1024 * 1024
"""A ``sites_file`` larger than this is refused (about a million start URLs)."""


def _sites_file(raw: object) -> list[tuple[str, object]]:
    """The entries of ``sites_file:``, one site per line as ``sites:`` takes them (a
    domain name or a start URL); blank lines and lines starting with ``#`` are left out.
    Each is named by its line, so an error says where: ``sites_file seeds.txt:3``."""
    if raw is None:
        return []
    path = _path("sites_file", raw, Path())
    try:
        if path.stat().st_size > MAX_SITES_FILE_BYTES:
            raise ConfigError("sites_file", f"{path} is over {MAX_SITES_FILE_BYTES} bytes")
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError("sites_file", f"{path} is not UTF-8 text: {exc}") from exc
    except OSError as exc:
        raise ConfigError("sites_file", f"cannot read {path}: {exc.strerror or exc}") from exc
    entries: list[tuple[str, object]] = []
    for number, line in enumerate(text.splitlines(), 1):
        site = line.strip()
        if site and not site.startswith("#"):  # a URL may hold a "#": no comment after it
            entries.append((f"sites_file {path}:{number}", site))
    if not entries:
        raise ConfigError("sites_file", f"{path} holds no site (one domain or URL a line)")
    return entries


def _sites(
    raw: object, crawl: object, from_file: Sequence[tuple[str, object]] = ()
) -> tuple[tuple[str, ...], dict[str, CrawlSettings]]:
    """The start URLs, and the crawl settings of the sites that override ``crawl:`` keys.

    ``from_file`` are the entries of ``sites_file:``, after those of ``sites:``. An
    override is the ``crawl:`` section with the entry's keys replaced, validated like it
    (so an error names ``sites[1].crawl.max_depth``).
    """
    from rccrawler.web.urls import host_of, site_start_url

    if raw is None and not from_file:
        raise ConfigError(
            "sites", "is required: a list of domain names or start URLs (or a sites_file)"
        )
    if isinstance(raw, str):
        raw = [raw]
    if raw is not None and (not isinstance(raw, list) or not (raw or from_file)):
        raise ConfigError("sites", "must be a non-empty list of domain names or start URLs")
    entries = [(f"sites[{index}]", site) for index, site in enumerate(raw or ())]
    sites: list[str] = []
    overrides: dict[str, CrawlSettings] = {}
    for key, site in [*entries, *from_file]:
        own: object = None
        if isinstance(site, dict):
            for extra in site:
                if extra not in ("url", "crawl"):
                    raise unknown_key(f"{key}.{extra}", ["url", "crawl"])
            own = site.get("crawl")
            site = site.get("url")
            if site is None:
                raise ConfigError(f"{key}.url", "is required in a site mapping")
            key = f"{key}.url"
        if not isinstance(site, str):
            raise ConfigError(key, f"must be a string, not {type(site).__name__}")
        try:
            url = site_start_url(site)
        except ValueError as exc:
            raise ConfigError(key, str(exc)) from exc
        sites.append(url)
        if own is not None:
            prefix = f"{key.removesuffix('.url')}.crawl"
            if not isinstance(own, dict):
                raise ConfigError(prefix, f"must be a mapping, not {type(own).__name__}")
            for name in own:
                if name not in SITE_KEYS:
                    raise ConfigError(
                        f"{prefix}.{name}", "cannot be set per site (allowed: "
                        + ", ".join(SITE_KEYS) + ")",
                    )  # fmt: skip
            _crawl_settings(own, prefix)  # errors name the site's key
            merged = {**(crawl if isinstance(crawl, dict) else {}), **own}
            overrides[host_of(url)] = _crawl_settings(merged)
    return tuple(sites), overrides


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


def setting_default(name: str) -> Any:
    """The default of a top-level setting (a field of :class:`Settings`): the one place
    it is written, for the settings' reader and for the classes that take it."""
    return Settings.__dataclass_fields__[name].default


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
            elsewhere = [f"crawl.{name}" for name in _CRAWL_KEYS]
            elsewhere += [f"threads.{name}" for name in _THREADS_KEYS]
            raise unknown_key(key, sorted(_TOP_KEYS | allowed_sections), elsewhere)
    stem = source.stem if source else "default"
    threads = raw.get("threads") or {}
    if not isinstance(threads, dict):
        raise ConfigError("threads", "must be a mapping like {downloading: auto, parsing: 2}")
    for key, value in threads.items():
        if key not in _THREADS_KEYS:
            raise unknown_key(f"threads.{key}", _THREADS_KEYS)
        if key in ("one_core", "parse_worker"):
            _check_type(f"threads.{key}", value, (bool,), "true or false")
            continue
        if key == "downloading" and value == "auto":
            continue
        what = "auto or a whole number >= 1" if key == "downloading" else "a whole number >= 1"
        _check_type(f"threads.{key}", value, (int,), what)
        if value < 1:
            raise ConfigError(f"threads.{key}", "must be >= 1")
        most = machine_limits()["threads"]
        if value > most:
            raise ConfigError(
                f"threads.{key}", f"must be <= {most} (from this machine's open-file limit)"
            )
    downloading = threads.get("downloading", "auto")
    storage = raw.get("storage", setting_default("storage"))
    if not isinstance(storage, str) or not (
        storage == "sqlite" or storage.startswith(("postgresql://", "postgres://"))
    ):
        raise ConfigError("storage", "must be 'sqlite' or a postgresql:// URL")
    storage_wait_s = raw.get("storage_wait_s", setting_default("storage_wait_s"))
    _check_type("storage_wait_s", storage_wait_s, (int, float), "a number of seconds >= 0")
    if not 0 <= storage_wait_s <= MAX_TIMEOUT_S:
        raise ConfigError("storage_wait_s", f"must be between 0 and {MAX_TIMEOUT_S:.0f} (a day)")
    parser = raw.get("parser", setting_default("parser"))
    if parser not in PARSERS:
        raise ConfigError("parser", f"must be one of {', '.join(PARSERS)}, not {parser!r}")
    unloaders = raw.get("unloaders")
    if unloaders is not None:
        if isinstance(unloaders, str):
            unloaders = [unloaders]
        if not isinstance(unloaders, list) or not all(isinstance(u, str) for u in unloaders):
            raise ConfigError("unloaders", "must be a list of dotted paths")
        unloaders = tuple(unloaders)
    manager = raw.get("manager", setting_default("manager"))
    if not isinstance(manager, str):
        raise ConfigError("manager", "must be a dotted path string")
    name = raw.get("name", "")
    if not isinstance(name, str) or len(name) > 200 or any(ord(c) < 32 for c in name):
        raise ConfigError("name", "must be a string of at most 200 printable characters")
    crawl = _crawl_settings(raw.get("crawl"))
    from_file = _sites_file(raw.get("sites_file"))
    sites, site_crawl = _sites(raw.get("sites"), raw.get("crawl"), from_file)
    return Settings(
        name=name,
        sites=sites,
        site_crawl=site_crawl,
        manager=manager,
        state_dir=_path("state_dir", raw.get("state_dir"), Path("state") / stem),
        output_dir=_path("output_dir", raw.get("output_dir"), Path("output") / stem),
        downloading_threads=None if downloading == "auto" else downloading,
        max_downloading=threads.get("max_downloading", setting_default("max_downloading")),
        parsing_threads=threads.get("parsing", setting_default("parsing_threads")),
        one_core=threads.get("one_core", setting_default("one_core")),
        parse_worker=threads.get("parse_worker", setting_default("parse_worker")),
        crawl=crawl,
        storage=storage,
        storage_wait_s=float(storage_wait_s),
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
    except UnicodeDecodeError as exc:
        raise ConfigError(
            "--config", f"{path} is not UTF-8 text (byte {exc.start}: {exc.object[exc.start]:#04x})"
        ) from exc
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


def check_writable_dirs(settings: Settings) -> None:
    """Create ``state_dir`` and ``output_dir``, and write and remove a file in each, before
    a crawl's first request: a folder the crawl cannot write is found now, not when the
    crawl ends (a root process "may write" /proc, where nothing can be created).

    A path in the way (a file, a broken link) is named first, before anything is created;
    when a folder fails, the folders created here are removed again. Reading commands
    (status, search) do not call this.

    Raises:
        ConfigError: naming the key.
    """
    folders = (("state_dir", settings.state_dir), ("output_dir", settings.output_dir))
    for key, path in folders:
        target = path.absolute()
        while not target.exists() and target != target.parent:
            if target.is_symlink():  # a dangling link
                raise ConfigError(key, f"{path} is a broken symbolic link")
            target = target.parent
        if not target.is_dir():
            where = "" if target == path.absolute() else f" (in the way: {target})"
            raise ConfigError(key, f"{path} is not a directory{where}")
    created: list[Path] = []
    try:
        for key, path in folders:
            _probe_folder(key, path, created)
    except ConfigError:
        for folder in reversed(created):
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


def _probe_folder(key: str, path: Path, created: list[Path]) -> None:
    """Create ``path`` (noting in ``created`` each folder made), write a file there and
    remove it."""
    missing = []
    target = path.absolute()
    while not target.exists() and target != target.parent:
        missing.append(target)
        target = target.parent
    try:
        for folder in reversed(missing):
            try:
                folder.mkdir()
            except FileExistsError:
                if not folder.is_dir():
                    raise
                continue  # made meanwhile by another process (a worker starting beside)
            created.append(folder)
        handle, probe = tempfile.mkstemp(prefix=".rccrawler-probe-", dir=path)
        try:
            os.write(handle, b"rccrawler\n")
        finally:
            os.close(handle)
            os.unlink(probe)
    except OSError as exc:
        raise ConfigError(key, f"cannot write {path}: {exc.strerror or exc}") from exc


def apply_overrides(raw: Mapping[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """A settings mapping with ``-s KEY=VALUE`` applied (VALUE is YAML, KEY dotted:
    ``crawl.crawl_delay_ms=0``), as a copy: the file's settings, changed for one run.

    Raises:
        ConfigError: an override that is not KEY=VALUE, or not YAML, or whose path
            goes through a key that is not a section.
    """
    result = _copy_sections(raw)
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ConfigError("-s", f"{item!r} is not KEY=VALUE")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(key, f"{text!r} is not a YAML value") from exc
        target = result
        *parents, last = key.split(".")
        for part in parents:
            found = target.setdefault(part, {})
            if not isinstance(found, dict):
                raise ConfigError(key, f"{part} is not a section")
            target = found
        target[last] = value
    return result


def _copy_sections(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a mapping whose nested mappings are copies too (lists are shared)."""
    return {key: _copy_sections(value) if isinstance(value, Mapping) else value
            for key, value in raw.items()}  # fmt: skip


def _plain(value: object) -> object:
    """A settings value as YAML and JSON write it: tuples as lists, paths as text."""
    if isinstance(value, (tuple, list)):
        return [_plain(item) for item in value]
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, Path):
        return str(value)
    return value


def crawl_mapping(crawl: CrawlSettings) -> dict[str, Any]:
    """Every key of a ``crawl:`` section, as settings.yaml spells it."""
    return {("from" if f.name == "from_" else f.name): _plain(getattr(crawl, f.name))
            for f in fields(CrawlSettings)}  # fmt: skip


def settings_mapping(settings: Settings) -> dict[str, Any]:
    """The settings as a settings.yaml mapping with every key written out (defaults too,
    ``sites_file`` as its sites, paths absolute): :func:`settings_from_mapping` reads it
    back to the same settings. A crawl keeps the one of its last run in its state, to
    compare a resumed run with (``rccrawler.state.RunSettings``)."""
    from rccrawler.web.urls import host_of

    crawl = crawl_mapping(settings.crawl)
    sites: list[object] = []
    for url in settings.sites:
        own = settings.site_crawl.get(host_of(url))
        if own is None:
            sites.append(url)
            continue
        mine = crawl_mapping(own)
        sites.append({"url": url, "crawl": {key: mine[key] for key in SITE_KEYS
                                            if mine[key] != crawl[key]}})  # fmt: skip
    return {
        "sites": sites,
        "manager": settings.manager,
        "name": settings.name,
        "storage": settings.storage,
        "storage_wait_s": settings.storage_wait_s,
        "state_dir": str(settings.state_dir.absolute()),
        "output_dir": str(settings.output_dir.absolute()),
        "threads": {
            "downloading": settings.downloading_threads or "auto",
            "max_downloading": settings.max_downloading,
            "parsing": settings.parsing_threads,
            "one_core": settings.one_core,
            "parse_worker": settings.parse_worker,
        },
        "parser": settings.parser,
        "downloading_thread": settings.downloading_thread,
        "parsing_thread": settings.parsing_thread,
        "routine_thread": settings.routine_thread,
        "finisher": settings.finisher,
        "unloaders": _plain(settings.unloaders),
        "crawl": crawl,
        **{name: _plain(section) for name, section in settings.sections.items()},
    }


def storage_without_password(storage: str) -> str:
    """A ``storage:`` URL without its password (what may be written down or shown)."""
    parts = urlsplit(storage)
    if parts.password is None:
        return storage
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}@{host}" if user else host))


NOT_COMPARED = ("state_dir",)
"""Keys a resumed run is not compared on: the state was found there, so it is the same."""


def flat_settings(mapping: Mapping[str, Any]) -> dict[str, object]:
    """A settings mapping as dotted keys (``crawl.crawl_delay_ms``), the sites as one key
    (their start URLs) and a site's own crawl keys as ``sites[URL].max_depth``."""
    flat: dict[str, object] = {}
    for key, value in mapping.items():
        if key in NOT_COMPARED:
            continue
        if key == "sites":
            entries = value if isinstance(value, list) else [value]
            # A set of sites: the same ones in another order are the same crawl.
            flat["sites"] = sorted(e["url"] if isinstance(e, Mapping) else e for e in entries)
            for entry in entries:
                if isinstance(entry, Mapping):
                    for name, own in (entry.get("crawl") or {}).items():
                        flat[f"sites[{entry['url']}].{name}"] = own
        elif key == "storage" and isinstance(value, str):
            flat[key] = storage_without_password(value)
        elif isinstance(value, Mapping):
            for name, item in value.items():
                flat[f"{key}.{name}"] = item
        else:
            flat[key] = value
    return flat


def settings_changes(
    old: Mapping[str, Any], new: Mapping[str, Any]
) -> list[tuple[str, object, object]]:
    """(dotted key, old value, new value) of every key two settings mappings (of
    :func:`settings_mapping`) disagree on, in the order of the new one."""
    before, after = flat_settings(old), flat_settings(new)
    missing = object()
    keys = list(after) + [key for key in before if key not in after]
    return [
        (key, before.get(key), after.get(key))
        for key in keys
        if before.get(key, missing) != after.get(key, missing)
    ]


def describe_change(key: str, old: object, new: object) -> str:
    """One change as the resume line says it: ``crawl_delay_ms 1000 → 0`` (a crawl key
    without its ``crawl.``), ``sites +http://b.test/``."""
    if key == "sites" and isinstance(old, list) and isinstance(new, list):
        added = [f"+{url}" for url in new if url not in old]
        removed = [f"-{url}" for url in old if url not in new]
        listed = added + removed
        shown = " ".join(listed[:3]) + (f" (+{len(listed) - 3} more)" if len(listed) > 3 else "")
        return f"sites {shown}"
    return f"{key.removeprefix('crawl.')} {_shown(old)} → {_shown(new)}"


def _shown(value: object, width: int = 40) -> str:
    """A settings value in a line: YAML's spelling (null, true), cut at ``width``."""
    if value is None or isinstance(value, (bool, list, dict)):
        import json

        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    else:
        text = str(value)
    return text if len(text) <= width else text[: width - 1] + "…"
