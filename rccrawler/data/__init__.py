"""DataManager: the lock-protected store that is the only channel between threads."""

from __future__ import annotations

from rccrawler.data.base import DataManager

__all__ = ["DataManager"]
