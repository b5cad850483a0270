"""Terminal-safe text: crawled data is shown, never obeyed, by the user's terminal.

A page title, a URL or a redirect target may hold ``ESC ]0;…`` (retitle the window),
``ESC [2J`` (clear the screen) or a C1 ``CSI``; printed raw they act on the terminal.
Everything the command line, the log and the live view print from crawled data goes
through :func:`terminal_safe` (one rule, one place).
"""

from __future__ import annotations

import logging
import re
from typing import Any

__all__ = [
    "TerminalSafeFormatter",
    "TerminalSafeLogRecord",
    "json_terminal_safe",
    "terminal_safe",
]

# C0 controls but tab, DEL, and the C1 controls (U+0080..U+009F).
_CONTROLS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
# The same, newlines kept: a traceback is many lines of the crawler's own making.
_CONTROLS_BUT_NEWLINE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_C1 = re.compile(r"[\x7f-\x9f]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}"


def terminal_safe(text: str) -> str:
    """``text`` with every C0/C1 control character (tab kept) written as ``\\xNN``.

    Newlines are escaped too: a crawled string must not start a line of its own in a
    log, where it could pass for one the crawler wrote.
    """
    return _CONTROLS.sub(_escape, text) if _CONTROLS.search(text) else text


def json_terminal_safe(line: str) -> str:
    """A JSON text made safe to print: JSON escapes C0 itself, but a serializer with
    ``ensure_ascii=False`` leaves DEL and C1 raw, so those become ``\\u00NN``."""
    return _C1.sub(lambda match: f"\\u{ord(match.group()):04x}", line)


class TerminalSafeLogRecord(logging.LogRecord):
    """A log record whose message is terminal-safe, whatever handler prints it.

    Installed by the command line with ``logging.setLogRecordFactory``: log messages
    carry URLs, titles and server answers, and every handler (the terminal, the log
    file, the live view's warnings) gets the escaped text. Tracebacks are left alone.
    """

    def getMessage(self) -> str:
        return terminal_safe(super().getMessage())


class TerminalSafeFormatter(logging.Formatter):
    """Escapes control characters in tracebacks too (an exception's message may quote a
    URL or an answer), keeping their line breaks."""

    def formatException(self, ei: Any) -> str:
        return _CONTROLS_BUT_NEWLINE.sub(_escape, super().formatException(ei))
