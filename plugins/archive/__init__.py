"""The WARC archive task: every response a crawl fetched, as WARC 1.1 files."""

from plugins.archive.manager import ArchiveManager

__all__ = ["ArchiveManager"]
