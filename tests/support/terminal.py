"""Run a command in a pseudo-terminal and read its screen, as a user would see it.

The tests of the live view and the benchmark's screen capture use it: the live view
redraws in place with cursor movements, so the raw bytes are not what a user sees,
while :class:`VirtualScreen` (just enough of a VT100 for rich's output) is.
Standard library only; POSIX only (``pty``).
"""

from __future__ import annotations

import codecs
import fcntl
import os
import pty
import re
import struct
import subprocess
import termios
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

__all__ = ["TerminalSession", "VirtualScreen", "strip_ansi"]

_TOKEN = re.compile(
    r"\x1b\[(?P<params>[0-9;?]*)(?P<final>[A-Za-z])"  # CSI: cursor moves, erase, colours
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC: window titles, hyperlinks
    r"|\x1b[()][A-Za-z0-9]|\x1b[=>78]"  # charset and keypad switches, save/restore cursor
    r"|(?P<ctrl>[\r\n\b])"
    r"|(?P<text>[^\x1b\r\n\b]+)"
)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()=>78]")


def strip_ansi(text: str) -> str:
    """``text`` without escape sequences (colours, cursor moves)."""
    return _ANSI.sub("", text)


class VirtualScreen:
    """A terminal's text: writes overwrite, CR/LF/cursor-up/erase-line move and clear.

    Lines scrolled off the top are kept (scrollback); :meth:`display` shows the
    last ``height`` lines, like the terminal window.

    Args:
        height: lines of the window.
    """

    def __init__(self, height: int = 40) -> None:
        self.height = height
        self.lines: list[list[str]] = [[]]
        self.row = 0
        self.col = 0

    def feed(self, data: str) -> None:
        for match in _TOKEN.finditer(data):
            text, ctrl, final = match.group("text"), match.group("ctrl"), match.group("final")
            if text is not None:
                self._write(text)
            elif ctrl == "\r":
                self.col = 0
            elif ctrl == "\n":
                self.row += 1
                self.col = 0  # the tty's onlcr turns LF into CR LF
                while len(self.lines) <= self.row:
                    self.lines.append([])
            elif ctrl == "\b":
                self.col = max(0, self.col - 1)
            elif final is not None:
                self._csi(match.group("params"), final)

    def _write(self, text: str) -> None:
        line = self.lines[self.row]
        if len(line) < self.col:
            line.extend(" " * (self.col - len(line)))
        line[self.col : self.col + len(text)] = text
        self.col += len(text)

    def _csi(self, params: str, final: str) -> None:
        if params.startswith("?"):  # private modes (cursor shown/hidden): no text effect
            return
        count = int(params.split(";")[0] or 1) if final in "ABCDG" else 0
        if final == "A":
            self.row = max(0, self.row - count)
        elif final == "B":
            self.row += count
            while len(self.lines) <= self.row:
                self.lines.append([])
        elif final == "C":
            self.col += count
        elif final == "D":
            self.col = max(0, self.col - count)
        elif final == "G":
            self.col = count - 1
        elif final == "K":
            line = self.lines[self.row]
            if params in ("", "0"):
                del line[self.col :]
            elif params == "1":
                line[: self.col] = " " * min(self.col, len(line))
            else:
                line.clear()
        elif final == "J" and params == "2":
            self.lines = [[] for _ in range(self.height)]
            self.row = min(self.row, self.height - 1)

    def display(self) -> str:
        """The visible window: the last ``height`` lines, trailing blanks trimmed."""
        lines = ["".join(line).rstrip() for line in self.lines[-self.height :]]
        while lines and not lines[-1]:
            lines.pop()
        return "\n".join(lines)


class TerminalSession:
    """A child process whose stdin, stdout and stderr are a pseudo-terminal.

    A reader thread feeds everything it writes to a :class:`VirtualScreen`.

    Args:
        argv: the command.
        width: columns of the terminal.
        height: lines of the terminal.
        env: the child's environment (``TERM`` is set to xterm-256color if missing).
        cwd: the child's working directory.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        width: int = 120,
        height: int = 40,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
    ) -> None:
        self.screen = VirtualScreen(height)
        self._raw: list[str] = []
        self._lock = threading.Lock()
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", height, width, 0, 0))
        child_env = dict(os.environ if env is None else env)
        child_env.setdefault("TERM", "xterm-256color")
        child_env["COLUMNS"], child_env["LINES"] = str(width), str(height)
        try:
            self.process = subprocess.Popen(
                list(argv),
                stdin=slave,
                stdout=slave,
                stderr=slave,
                env=child_env,
                cwd=cwd,
                start_new_session=True,
            )
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(slave)
        self._master = master
        self._reader = threading.Thread(target=self._read, name="pty-reader", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        try:
            while True:
                try:
                    data = os.read(self._master, 65536)
                except OSError:  # EIO: the child closed its end
                    break
                if not data:
                    break
                text = decoder.decode(data)
                with self._lock:
                    self._raw.append(text)
                    self.screen.feed(text)
        finally:
            os.close(self._master)

    def display(self) -> str:
        """What the terminal window shows now."""
        with self._lock:
            return self.screen.display()

    @property
    def raw(self) -> str:
        """Everything the child wrote so far, escape sequences included."""
        with self._lock:
            return "".join(self._raw)

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the child to exit and for its last output to be read; its exit code."""
        code = self.process.wait(timeout)
        self._reader.join(timeout)
        return code

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._reader.join(5)
