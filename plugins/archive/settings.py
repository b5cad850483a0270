"""The ``archive:`` section of settings.yaml: where WARC files go and when they rotate."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rccrawler.config import unknown_key
from rccrawler.exceptions import ConfigError

if TYPE_CHECKING:
    from rccrawler.config import Settings

ARCHIVE_KEYS = ("max_file_bytes", "prefix", "operator")
MIN_FILE_BYTES = 64 * 1024
MAX_FILE_BYTES = 2**40


@dataclass(frozen=True, slots=True)
class ArchiveSettings:
    """The ``archive:`` section, validated."""

    max_file_bytes: int = 1_000_000_000
    """A WARC file is closed, and the next begun, once it holds this many bytes (as
    Heritrix's 1 GB default); a record is never split, so a file may pass it by one."""
    prefix: str = "rccrawler"
    """The start of every file name: ``<prefix>-<UTC time>-<n>-<pid>.warc.gz``."""
    operator: str = ""
    """Who ran the crawl, for the ``warcinfo`` record (e.g. an e-mail address)."""


def archive_settings(settings: Settings) -> ArchiveSettings:
    """Read and check ``archive:``; every problem is a ConfigError naming the key."""
    section: Any = settings.sections.get("archive") or {}
    if not isinstance(section, Mapping):
        raise ConfigError("archive", "must be a mapping")
    for key in section:
        if key not in ARCHIVE_KEYS:
            raise unknown_key(f"archive.{key}", ARCHIVE_KEYS)
    defaults = ArchiveSettings()
    size = section.get("max_file_bytes", defaults.max_file_bytes)
    if isinstance(size, bool) or not isinstance(size, int):
        raise ConfigError("archive.max_file_bytes", "must be a whole number of bytes")
    if not MIN_FILE_BYTES <= size <= MAX_FILE_BYTES:
        raise ConfigError(
            "archive.max_file_bytes", f"must be between {MIN_FILE_BYTES} and {MAX_FILE_BYTES}"
        )
    prefix = section.get("prefix", defaults.prefix)
    if not isinstance(prefix, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", prefix):
        raise ConfigError("archive.prefix", "must be 1-64 letters, digits, '.', '_' or '-'")
    operator = section.get("operator", "")
    if not isinstance(operator, str) or any(ord(c) < 32 for c in operator):
        raise ConfigError("archive.operator", "must be a one-line string")
    return ArchiveSettings(max_file_bytes=size, prefix=prefix, operator=operator)
