"""``rccrawler drop``: remove a crawl's saved state (its SQLite file, or its PostgreSQL
schema) once it is done with, and with ``--output`` the output files it wrote."""

from __future__ import annotations

import contextlib
import sys
from typing import TYPE_CHECKING

from rccrawler.commands import EXIT_FAILED, EXIT_OK
from rccrawler.ui.safetext import terminal_safe

if TYPE_CHECKING:
    from rccrawler.config import Settings
    from rccrawler.manager import ApplicationManager


def drop_command(
    manager_cls: type[ApplicationManager], settings: Settings, *, yes: bool, output: bool
) -> int:
    """Remove the crawl's saved state, after asking (unless ``yes``).

    Refused (StateError, exit 2) while a process of the crawl runs: the state lock
    (SQLite) is taken first and held while the files go; a shared crawl's live workers
    are looked for (PostgreSQL). Only what the crawl owns is removed: its storage, the
    files it keeps beside it in its state_dir, and with ``output`` the output files its
    unloaders declare (never other files); folders are removed only once empty.
    """
    from rccrawler.commands.fresh import discard_crawl, refuse_if_running
    from rccrawler.config import storage_without_password
    from rccrawler.data.storage import is_shared, open_storage, state_exists
    from rccrawler.state import LOCK_FILE, StateLock

    shared = is_shared(settings)
    where = (f"{settings.crawl_name!r} in {storage_without_password(settings.storage)}"
             if shared else f"in {settings.state_dir}")  # fmt: skip
    if not state_exists(settings):
        print(terminal_safe(f"rccrawler drop: no saved crawl {where}"), file=sys.stderr)
        return EXIT_FAILED
    lock = StateLock(settings.state_dir)
    if not shared:
        lock.acquire()  # refused while a crawl runs here; held until the files are gone
    try:
        refuse_if_running(manager_cls, settings)
        with open_storage(settings, task_tables=manager_cls.task_tables) as data:
            pages = sum(h.done + h.active + h.errors + h.skipped + h.duplicates
                        for h in data.statistics().hosts)  # fmt: skip
        what = f"the saved crawl {where} ({pages} pages)"
        if output:
            what += f" and the output files it wrote in {settings.output_dir}"
        if not yes and not confirmed(f"drop {what}? [y/N] "):
            print("rccrawler drop: not confirmed; nothing was removed", file=sys.stderr)
            return EXIT_FAILED
        unloaders = manager_cls.unloaders_for(settings) if output else ()
        removed = discard_crawl(manager_cls, settings, unloaders, output=output)
        if not shared:
            (settings.state_dir / LOCK_FILE).unlink(missing_ok=True)  # held: no one waits
    finally:
        lock.release()
    for folder in (settings.state_dir, *([settings.output_dir] if output else [])):
        with contextlib.suppress(OSError):
            folder.rmdir()  # only an empty folder: the user's files stay
    if output:
        done = f"dropped the saved crawl {where} and {len(removed)} output files"
    else:
        done = (f"dropped the saved crawl {where}; its output files stay in "
                f"{settings.output_dir} (--output removes them)")  # fmt: skip
    print(terminal_safe(done))
    return EXIT_OK


def confirmed(question: str) -> bool:
    """Ask on stderr and read one line of standard input: yes only for "y" or "yes"."""
    print(question, end="", file=sys.stderr, flush=True)
    answer = sys.stdin.readline()
    return answer.strip().lower() in ("y", "yes")
