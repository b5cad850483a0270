"""``rccrawler status``: the progress of a running or saved crawl."""

from __future__ import annotations

import json

from rccrawler.commands import EXIT_FAILED, EXIT_OK
from rccrawler.ui.safetext import terminal_safe


def status_command(config: str, *, as_json: bool) -> int:
    from rccrawler.data.storage import is_shared, open_storage, state_exists
    from rccrawler.manager import load_settings
    from rccrawler.state import state_in_use

    _cls, settings = load_settings(config)
    if not state_exists(settings):
        where = settings.storage if is_shared(settings) else settings.state_dir
        print(f"no saved crawl in {where}")
        return EXIT_FAILED
    with open_storage(settings) as data:
        stats = data.statistics()
        # SQLite: the state lock is held; PostgreSQL: a worker's advisory lock is.
        running = data.live_workers() > 0 if is_shared(settings) else (
            state_in_use(settings.state_dir))  # fmt: skip
    unfinished = "running" if running else "stopped (run the crawl again to resume)"
    # The figures of report.json under the same names (docs/output.md).
    rows = [
        {
            "host": h.host, "done": h.done, "waiting": h.waiting,
            "running": h.running + h.downloaded,
            "errors": h.errors, "errors_by_kind": dict(h.errors_by_kind),
            "duplicates": h.duplicates, "bytes": h.bytes,
            "stop_reason": h.stop_reason or unfinished,
        }
        for h in stats.hosts
    ]  # fmt: skip
    if as_json:
        print(json.dumps({"running": running, "sites": rows,
                          "pages_done": sum(h.done for h in stats.hosts)}))  # fmt: skip
        return EXIT_OK
    print(
        f"{'host':30} {'done':>7} {'waiting':>8} {'running':>8} {'errors':>7} {'dups':>6}"
        "  stop reason"
    )
    for row in rows:
        print(terminal_safe(
            f"{row['host']:30} {row['done']:>7} {row['waiting']:>8} {row['running']:>8} "
            f"{row['errors']:>7} {row['duplicates']:>6}  {row['stop_reason'] or '-'}"
        ))  # fmt: skip
    return EXIT_OK
