"""Process-wide memory settings: keep the crawler's resident set flat with many threads."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

logger = logging.getLogger(__name__)

_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
MMAP_THRESHOLD = 256 * 1024
"""Bodies larger than this get their own mapping, returned to the OS when freed."""
ARENA_MAX = 2
"""glibc gives each thread its own heap arena by default; a dozen crawler threads
each holding freed megabytes of response bodies is most of a crawl's memory."""


def tune_malloc() -> bool:
    """Cap glibc's malloc arenas and fix its mmap threshold; call before threads start.

    Returns:
        False where the C library is not glibc (nothing changed).
    """
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # A fixed threshold also stops glibc from raising it after big frees,
    # which would move later multi-megabyte bodies into the fragmenting heap.
    ok = bool(mallopt(_M_ARENA_MAX, ARENA_MAX)) and bool(
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    )
    logger.debug("malloc tuned: %s", ok)
    return ok
