"""The fenced blocks of README.md and docs/*.md, with the marker line that says what the
docs test does with each (docs/README.md, "Writing in these pages").

A marker is an HTML comment alone on the line right before a fence, invisible once the
page is rendered:

- ``<!-- run -->``: a shell block the test runs, as written, after the blocks above it;
- ``<!-- skip: why -->``: a shell block the test does not run, and why;
- ``<!-- file: PATH -->``: a block the test writes to PATH before the blocks below it run.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
SHELL_LANGUAGES = frozenset({"sh", "bash", "shell", "console"})
SAMPLE_SITE = "127.0.0.1:8765"
"""The sample site's address as the pages and config/ write it (``rccrawler demo --serve``)."""

_FENCE = re.compile(r"^(```+)(\S*)\s*$")
_MARKER = re.compile(r"^<!--\s*(run|skip|file)\s*(?::\s*(.*?))?\s*-->\s*$")


@dataclass(frozen=True, slots=True)
class Block:
    """One fenced block of a page."""

    page: Path
    line: int
    """The line of its opening fence, counting from 1."""
    language: str
    text: str
    marker: str | None
    """``run``, ``skip``, ``file`` or None (no marker line before the fence)."""
    argument: str
    """What follows the marker's colon: why it is skipped, or the file's path."""

    @property
    def is_shell(self) -> bool:
        return self.language in SHELL_LANGUAGES

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def pages() -> list[Path]:
    """The pages whose blocks the docs test reads: README.md first, then docs/ by name."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(page: Path) -> Iterator[Block]:
    """The fenced blocks of ``page`` in order, each with the marker line right above it."""
    lines = page.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        fence, language = opening.groups()
        end = index + 1
        while end < len(lines) and lines[end].strip() != fence:
            end += 1
        marker = _MARKER.match(lines[index - 1]) if index > 0 else None
        yield Block(
            page=page,
            line=index + 1,
            language=language,
            text="\n".join(lines[index + 1 : end]) + "\n",
            marker=marker.group(1) if marker else None,
            argument=(marker.group(2) or "") if marker else "",
        )
        index = end + 1


def dangling_markers(page: Path) -> list[int]:
    """Lines of marker comments that no fence follows (a marker that marks nothing)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    return [
        number
        for number, line in enumerate(lines, 1)
        if _MARKER.match(line) and (number >= len(lines) or not _FENCE.match(lines[number]))
    ]


def command_words(block_text: str) -> Iterator[tuple[str, str]]:
    """(first word, command) of each command of a shell block: its lines joined where
    they end with a backslash, split at ``&&``, ``||``, ``;`` and ``|``; comments left
    out."""
    joined = re.sub(r"\\\n\s*", " ", block_text)
    for line in joined.splitlines():
        code = re.sub(r"(^|\s)#.*$", "", line).strip()
        for command in re.split(r"&&|\|\||;|\|", code):
            words = command.split()
            if words:
                yield words[0], command.strip()


def slug(heading: str) -> str:
    """The anchor a Markdown renderer (GitHub's) gives a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of ``page``'s headings (outside fenced blocks)."""
    found: set[str] = set()
    inside = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            inside = not inside
        elif not inside and (heading := re.match(r"^#{1,6} (.*)$", line)):
            found.add(slug(heading.group(1)))
    return found


def links(page: Path) -> Iterator[tuple[int, str]]:
    """(line, target) of every relative Markdown link of ``page`` (outside fenced
    blocks): a file, a file and an anchor, or an anchor of the page itself."""
    inside = False
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if _FENCE.match(line):
            inside = not inside
            continue
        if inside:
            continue
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            if not re.match(r"^[a-z]+:", target):
                yield number, target
