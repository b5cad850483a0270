"""``rccrawler status``: the progress of a running or saved crawl."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from rccrawler.commands import EXIT_FAILED, EXIT_OK
from rccrawler.ui.safetext import terminal_safe

if TYPE_CHECKING:
    from collections.abc import Mapping

    from rccrawler.config import Settings
    from rccrawler.records import HostStats


def status_command(settings: Settings, *, as_json: bool) -> int:
    from rccrawler.data.storage import is_shared, open_storage, state_exists
    from rccrawler.state import read_activity, state_in_use

    if not state_exists(settings):
        where = settings.storage if is_shared(settings) else settings.state_dir
        print(f"no saved crawl in {where}")
        return EXIT_FAILED
    with open_storage(settings) as data:
        stats = data.statistics()
        runs = data.runs()
        # SQLite: the state lock is held; PostgreSQL: a worker's advisory lock is.
        running = data.live_workers() > 0 if is_shared(settings) else (
            state_in_use(settings.state_dir))  # fmt: skip
    unfinished = "running" if running else "stopped (run the crawl again to resume)"
    # A running crawl of one process knows its requests in flight; its rows do not.
    activity = read_activity(settings.state_dir) if running and not is_shared(settings) else None
    # The figures of report.json under the same names (docs/output.md).
    rows = [
        {
            "host": h.host, "done": h.done, "waiting": h.waiting,
            **work_in_progress(h, activity, running=running),
            "errors": h.errors, "errors_by_kind": dict(h.errors_by_kind),
            "duplicates": h.duplicates, "bytes": h.bytes,
            "stop_reason": h.stop_reason or unfinished,
        }
        for h in stats.hosts
    ]  # fmt: skip
    run = runs[-1] if runs else None
    # As the running crawl last noted them (every worker's, on shared storage).
    threads = {"busy": stats.downloading, "total": stats.downloading_threads} if running else None
    if as_json:
        print(json.dumps({"running": running, "sites": rows, "downloading_threads": threads,
                          "pages_done": sum(h.done for h in stats.hosts),
                          "run": run.run if run else None, "run_kind": run.kind if run else None,
                          "run_started_at": run.started_at if run else None}))  # fmt: skip
        return EXIT_OK
    if run is not None:
        started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(run.started_at))
        over = ", finished" if run.finished_at else ""
        print(f"run {run.run} ({'first crawl' if run.kind == 'crawl' else run.kind}), "
              f"started {started}{over}")  # fmt: skip
    print(
        f"{'host':30} {'done':>7} {'waiting':>8} {'running':>8} {'parsing':>8} {'errors':>7} "
        f"{'dups':>6}  stop reason"
    )
    for row in rows:
        print(terminal_safe(
            f"{row['host']:30} {row['done']:>7} {row['waiting']:>8} {row['running']:>8} "
            f"{row['parsing']:>8} {row['errors']:>7} {row['duplicates']:>6}  "
            f"{row['stop_reason'] or '-'}"
        ))  # fmt: skip
    if threads is not None:
        print(f"downloading threads: {threads['busy']} busy of {threads['total']}")
    return EXIT_OK


def work_in_progress(
    host: HostStats, activity: Mapping[str, tuple[int, int]] | None, *, running: bool
) -> dict[str, int]:
    """A site's ``running`` (requests in flight) and ``parsing`` (pages waiting for a
    parser, or in one): from the crawl's own account when it keeps one, else from its
    storage; none of either once the crawl is not running."""
    if not running:
        return {"running": 0, "parsing": 0}
    if activity is not None:
        requests, to_parse = activity.get(host.host, (0, 0))
        return {"running": requests, "parsing": to_parse}
    return {"running": host.requests, "parsing": host.to_parse}
