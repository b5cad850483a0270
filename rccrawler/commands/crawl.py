"""``rccrawler crawl``: the crawl a settings file describes, the one saved in a state
folder, or a quick crawl of URLs; ``-s KEY=VALUE`` changes a setting for one run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rccrawler.commands.runner import start_crawl

if TYPE_CHECKING:
    import argparse


def crawl_command(
    args: argparse.Namespace, *, fresh: bool, refresh: bool = False, tui: bool | None = None
) -> int:
    """Run or resume the crawl that ``--config``, ``--state`` or the URLs name, with the
    ``-s`` overrides (``args.set``); ``refresh`` begins a new run of a finished one."""
    from rccrawler.commands.selection import crawl_of_state, quick_crawl

    if args.config:
        from rccrawler.manager import load_settings

        manager_cls, settings = load_settings(args.config, args.set)
    elif args.state:
        manager_cls, settings = crawl_of_state(args.state, args.set)
    else:
        manager_cls, settings = quick_crawl(args.urls, args.set)
    return start_crawl(manager_cls, settings, fresh=fresh, refresh=refresh, tui=tui)
