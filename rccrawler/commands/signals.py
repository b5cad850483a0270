"""Ctrl-C and SIGTERM during a crawl: the first asks it to stop cleanly (resumable), a
second stops the process at once."""

from __future__ import annotations

import contextlib
import os
import signal
from typing import TYPE_CHECKING

from rccrawler.commands import EXIT_INTERRUPTED

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from types import FrameType


@contextlib.contextmanager
def stop_on_signals(
    request_stop: Callable[[str], None], before_exit: Callable[[], None] | None = None
) -> Iterator[None]:
    """For the ``with`` block, the first SIGINT/SIGTERM calls ``request_stop(reason)``; a
    second calls ``before_exit()`` (the live view gives the terminal back) and exits 130.

    Every committed call is on disk (WAL), and the running pages are queued again on
    resume, so exiting at once loses nothing saved.
    """
    interrupts = 0

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal interrupts
        interrupts += 1
        if interrupts > 1:
            if before_exit is not None:
                before_exit()
            os._exit(EXIT_INTERRUPTED)
        request_stop(f"stopped by {signal.Signals(signum).name}")

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
