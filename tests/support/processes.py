"""Which processes another one started, and whether a process still runs (Linux /proc)."""

from __future__ import annotations

import contextlib
from pathlib import Path


def child_pids(pid: int | str) -> set[int]:
    """The processes ``pid`` started (Linux: /proc/<pid>/task/*/children)."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError):
            found.update(int(child) for child in task.read_text().split())
    return found


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie that nobody here reaps counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
