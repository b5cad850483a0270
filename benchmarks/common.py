"""Helpers the benchmark scripts share: settings files and peak memory of a child.

Importing it puts tests/ on ``sys.path``: the benchmarks crawl the tests' loopback server
and generated sites (``support.loopback``, ``support.sites``), which ship in no package.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

TESTS = Path(__file__).resolve().parents[1] / "tests"
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))


def count_args(doc: str | None, **counts: int) -> argparse.Namespace:
    """The command line of a benchmark that takes only counts: ``--name N`` for each, with
    its default, and the first line of the script's docstring as the description."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    for name, default in counts.items():
        parser.add_argument(f"--{name}", type=int, default=default)
    return parser.parse_args()


def write_settings(
    folder: Path,
    sites: list[str],
    *,
    resolve: dict[str, str] | None = None,
    threads: dict[str, Any] | None = None,
    storage: str | None = None,
    **crawl: Any,
) -> Path:
    """A settings.yaml for a fast crawl (no delay, 8 downloaders) with state and output
    under ``folder``; ``threads`` and ``crawl`` keys override the defaults of theirs. A
    ``storage`` URL keeps the state there, under a name of its own."""
    settings: dict[str, Any] = {
        "sites": sites,
        "state_dir": str(folder / "state"),
        "output_dir": str(folder / "output"),
        "threads": {"downloading": 8, "parsing": 2, **(threads or {})},
        "crawl": {
            "crawl_delay_ms": 0,
            "max_downloads_at_time": 8,
            "timeout_s": 30,
            "resolve": resolve or {},
            **crawl,
        },
    }
    if storage is not None:
        settings["storage"] = storage
        settings["name"] = f"bench-{folder.name}"
    path = folder / "settings.yaml"
    path.write_text(yaml.safe_dump(settings), encoding="utf-8")
    return path


def spread(values: list[float], scale: float = 1.0, digits: int = 2) -> str:
    """The median and the range of ``values`` (times ``scale``): ``1.23 (1.10–1.40)``."""
    return (
        f"{statistics.median(values) * scale:.{digits}f} "
        f"({min(values) * scale:.{digits}f}–{max(values) * scale:.{digits}f})"
    )


def vm_hwm_kb(pid: int | str) -> int:
    """VmHWM of a live process (``"self"`` for this one): its peak resident set so far."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def private_kb(pid: int | str) -> int:
    """The memory only this process maps (Private_Clean + Private_Dirty), in kB: what a
    fork costs beyond the pages it shares with its parent (which its RSS counts again)."""
    total = 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                total += int(line.split()[1])
    except OSError:
        return 0
    return total


def children_private_kb(pid: int | str) -> int:
    """The private memory of every process ``pid`` started (a search crawl's index
    workers), summed."""
    from support.processes import child_pids  # the tests' kit: on sys.path (see above)

    return sum(private_kb(child) for child in child_pids(pid))
