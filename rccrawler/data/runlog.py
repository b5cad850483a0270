"""RunLog: when each run of a crawl began and ended, so elapsed times leave out the
time a crawl was stopped (``state_dir/runs.log``)."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

logger = logging.getLogger(__name__)

RUN_LOG = "runs.log"


class RunLog:
    """Lines ``start T`` and ``end T`` in wall-clock seconds. A run without its end is
    going on, or was killed: it then counts until the next run began.

    Args:
        state_dir: the crawl's state folder.
        clock: wall-clock time source (the storage's clock is wall-clock too).
    """

    def __init__(self, state_dir: Path, clock: Callable[[], float] = time.time) -> None:
        self.path = state_dir / RUN_LOG
        self.clock = clock

    def intervals(self, now: float | None = None) -> list[tuple[float, float]]:
        """The runs as (start, end) pairs, oldest first."""
        now = self.clock() if now is None else now
        try:
            lines = self.path.read_text(encoding="ascii").splitlines()
        except (OSError, UnicodeDecodeError):
            return []
        runs: list[list[float | None]] = []
        for line in lines:
            kind, _, value = line.partition(" ")
            try:
                moment = float(value)
            except ValueError:
                continue
            if kind == "start":
                runs.append([moment, None])
            elif kind == "end" and runs and runs[-1][1] is None:
                runs[-1][1] = moment
        result = []
        for index, (start, end) in enumerate(runs):
            assert start is not None
            if end is None:  # still running, or killed: until the next run began
                end = runs[index + 1][0] if index + 1 < len(runs) else now
                assert end is not None
            result.append((start, max(start, end)))
        return result

    def begin(self) -> None:
        """Record that a run starts now."""
        self._append(f"start {self.clock():.3f}\n")

    def end(self) -> None:
        """Record that the run begun last ends now."""
        self._append(f"end {self.clock():.3f}\n")

    def _append(self, line: str) -> None:
        try:
            with open(self.path, "a", encoding="ascii") as handle:
                handle.write(line)
        except OSError as exc:  # elapsed times are a report nicety, not worth a crash
            logger.warning("cannot record the run in %s: %s", self.path, exc)

    def active_seconds(self, start: float, end: float, now: float | None = None) -> float:
        """Seconds of [start, end] during which the crawl was running."""
        if start <= 0 or end <= start:
            return 0.0
        runs = self.intervals(now)
        if not runs:
            return end - start
        return sum(max(0.0, min(end, b) - max(start, a)) for a, b in runs)

    def discard(self) -> None:
        self.path.unlink(missing_ok=True)
