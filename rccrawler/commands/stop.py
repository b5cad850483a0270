"""``rccrawler stop``: ask a running crawl to stop and save its state."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from rccrawler.commands import EXIT_FAILED, EXIT_OK

if TYPE_CHECKING:
    from rccrawler.config import Settings


def stop_command(settings: Settings) -> int:
    from rccrawler.data.storage import is_shared, open_storage, state_exists
    from rccrawler.state import STOP_FILE, state_in_use

    if is_shared(settings):
        # Workers may run on other machines: the request goes through the database.
        if not state_exists(settings):
            print(f"rccrawler stop: no crawl {settings.crawl_name} in {settings.storage}",
                  file=sys.stderr)  # fmt: skip
            return EXIT_FAILED
        with open_storage(settings) as shared:
            shared.request_stop()
        print(f"stop requested for every worker of the crawl {settings.crawl_name}")
        return EXIT_OK
    if not state_in_use(settings.state_dir):
        print(f"rccrawler stop: no crawl is running in {settings.state_dir}", file=sys.stderr)
        return EXIT_FAILED
    (settings.state_dir / STOP_FILE).write_text("stop\n", encoding="utf-8")
    print(f"stop requested for the crawl in {settings.state_dir}")
    return EXIT_OK
