"""Process-wide memory settings: keep the crawler's resident set flat with many threads."""

from __future__ import annotations

import ctypes
import functools
import gc
import logging
from collections.abc import Callable

logger = logging.getLogger(__name__)

_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
MMAP_THRESHOLD = 1024 * 1024
"""Bodies larger than this get their own mapping, returned to the OS when freed. Not
lower: lexbor's working memory for an ordinary page (a few hundred KiB) would then be
mapped and unmapped, and its pages faulted in afresh, for every page parsed."""
ARENA_MAX = 2
"""glibc gives each thread its own heap arena by default; a dozen crawler threads
each holding freed megabytes of response bodies is most of a crawl's memory."""


def tune_malloc() -> bool:
    """Cap glibc's malloc arenas and fix its mmap threshold; call before threads start.

    Returns:
        False where the C library is not glibc (nothing changed).
    """
    mallopt = _libc_function("mallopt")
    if mallopt is None:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # A fixed threshold also stops glibc from raising it after big frees,
    # which would move later multi-megabyte bodies into the fragmenting heap.
    ok = bool(mallopt(_M_ARENA_MAX, ARENA_MAX)) and bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    logger.debug("malloc tuned: %s", ok)
    return ok


GC_YOUNG_THRESHOLD = 10_000
"""Allocations between two young-generation collections (CPython's default is 700).
A crawl allocates a few hundred short-lived objects per page, almost none in cycles;
collecting every 700 was 7% of the GIL-holding samples of a crawl (py-spy, issue 14)."""


def tune_gc() -> None:
    """Collect less often, and never scan what start-up allocated; call before threads start.

    ``gc.freeze()`` moves the modules, classes and settings loaded so far into the
    permanent generation, so full collections during the crawl skip them.
    """
    gc.freeze()
    _young, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)


def release_memory() -> None:
    """Give freed heap memory back to the OS (glibc ``malloc_trim``); a no-op elsewhere.

    Parsed pages leave freed holes in the C heap; the RoutineThread calls this
    every few seconds so the resident set tracks what is really in use.
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    trim = _libc_function("malloc_trim")
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def _libc_function(name: str) -> ctypes._NamedFuncPointer | None:
    """A function of the C library the interpreter runs on, from its own symbols
    (``dlopen(NULL)``: ``ctypes.util.find_library`` would run ``ldconfig`` in a
    subprocess at every start); None where there is no such function (not glibc)."""
    try:
        return ctypes.CDLL(None)[name]
    except (OSError, AttributeError):
        return None
