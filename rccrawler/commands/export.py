"""``rccrawler export``: the output files of a stopped or running crawl, from its state."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from rccrawler.commands import EXIT_FAILED, EXIT_OK

if TYPE_CHECKING:
    from rccrawler.config import Settings
    from rccrawler.manager import ApplicationManager


def export_command(manager_cls: type[ApplicationManager], settings: Settings) -> int:
    """Write the output files of a stopped or running crawl from its saved state, read
    the way ``status`` reads it: a running crawl goes on undisturbed."""
    from rccrawler.data.storage import is_shared, open_storage
    from rccrawler.state import state_in_use

    manager = manager_cls(settings)
    try:
        with open_storage(settings, task_tables=manager_cls.task_tables) as data:
            manager.data = data
            manager.finished = manager.finisher.crawl_finished(data.statistics())
            running = not is_shared(settings) and state_in_use(settings.state_dir)
            manager.stop_reason = (
                "finished" if manager.finished else "running" if running else "stopped"
            )
            manager.unload()
    finally:
        manager.fetcher.close()
    if manager.unload_failures:
        failures = ", ".join(manager.unload_failures)
        print(f"rccrawler export: writing the output failed ({failures}); the log says why",
              file=sys.stderr)  # fmt: skip
        return EXIT_FAILED
    print(f"exported the {manager.stop_reason} crawl to {settings.output_dir}")
    return EXIT_OK
