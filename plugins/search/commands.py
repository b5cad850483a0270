"""The search task's commands: ``rccrawler search`` and ``rccrawler words`` (``serve``
comes from the web-graph task and serves the search page here)."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from rccrawler.commands import EXIT_OK, EXIT_USAGE
from rccrawler.exceptions import ConfigError, RCCrawlerError, StateError
from rccrawler.ui.safetext import json_terminal_safe, terminal_safe

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

    from rccrawler.config import Settings
    from rccrawler.manager import ApplicationManager


def search_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("terms", nargs="+", metavar="QUERY", help="the query")
    parser.add_argument("--json", action="store_true", help="one JSON object per hit")
    parser.add_argument("--limit", type=int, default=10, metavar="N",
                        help="at most N hits (default 10)")  # fmt: skip


def search_command(
    manager_cls: type[ApplicationManager], settings: Settings, args: argparse.Namespace
) -> int:
    """Answer a query from the crawl's saved index."""
    from plugins.search.manager import SearchManager

    assert issubclass(manager_cls, SearchManager)
    query, limit, as_json = " ".join(args.terms), args.limit, args.json
    if not query.strip():
        print("rccrawler search: a QUERY is required", file=sys.stderr)
        return EXIT_USAGE
    if limit < 1:
        print("rccrawler search: --limit must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    try:
        hits = manager_cls.search(settings, query, limit)
    except RCCrawlerError as exc:
        if isinstance(exc, (ConfigError, StateError)):
            raise
        print(f"rccrawler search: {exc}", file=sys.stderr)
        return EXIT_USAGE
    bold = sys.stdout.isatty()
    for rank, hit in enumerate(hits, 1):
        # Titles, URLs and snippets are crawled text (terminal_safe).
        if as_json:
            print(json_terminal_safe(json.dumps(hit, ensure_ascii=False)))
        else:
            print(f"{rank}. {terminal_safe(str(hit['title']))}  ({hit['score']})\n"
                  f"   {terminal_safe(str(hit['url']))}")  # fmt: skip
            text = hit.get("snippet") or hit.get("summary") or ""
            if text:
                print(f"   {marked(str(text), hit.get('marks', ()), bold=bold)}")
    if not hits and not as_json:
        print("no hits")
    return EXIT_OK


def marked(text: str, marks: Sequence[Sequence[int]], *, bold: bool) -> str:
    """``text`` made safe for a terminal, the (start, end) spans in ANSI bold or in
    brackets (``[…]`` when the output is not a terminal)."""
    opening, closing = ("\x1b[1m", "\x1b[22m") if bold else ("[", "]")
    parts, at = [], 0
    for start, end in marks:
        parts += [terminal_safe(text[at:start]), opening, terminal_safe(text[start:end]), closing]
        at = end
    parts.append(terminal_safe(text[at:]))
    return "".join(parts)


def words_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("prefix", nargs="?", default="", metavar="PREFIX",
                        help="only words starting with PREFIX")  # fmt: skip
    parser.add_argument("--limit", type=int, default=None, metavar="N",
                        help="at most N words (default all)")  # fmt: skip


def words_command(
    manager_cls: type[ApplicationManager], settings: Settings, args: argparse.Namespace
) -> int:
    """List the indexed words (starting with ``prefix``) with their document counts."""
    from plugins.search.manager import SearchManager

    assert issubclass(manager_cls, SearchManager)
    if args.limit is not None and args.limit < 1:
        print("rccrawler words: --limit must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    for word, count in manager_cls.words(settings, args.prefix)[: args.limit]:
        print(f"{word}\t{count}")
    return EXIT_OK
