"""Run a command in a pseudo-terminal and read its screen, as a user would see it.

The tests of the live view and the benchmark's screen capture use it: the live view
redraws in place with cursor movements, so the raw bytes are not what a user sees,
while a ``pyte`` screen fed with them is. POSIX only (``pty``).
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import termios
import threading
from typing import TYPE_CHECKING

import pyte

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

__all__ = ["TerminalSession", "screen_text", "strip_ansi"]

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()=>78]")


def strip_ansi(text: str) -> str:
    """``text`` without escape sequences: every character written, overwritten or not."""
    return _ANSI.sub("", text)


def screen_text(screen: pyte.Screen) -> str:
    """The window's text, each line and the end trimmed of blanks (pyte pads them)."""
    return "\n".join(line.rstrip() for line in screen.display).rstrip("\n")


class TerminalSession:
    """A child process whose stdin, stdout and stderr are a pseudo-terminal.

    A reader thread feeds everything it writes to a ``pyte`` screen.

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
        self.screen = pyte.Screen(width, height)
        self._stream = pyte.ByteStream(self.screen)
        self._raw = bytearray()
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
        try:
            while True:
                try:
                    data = os.read(self._master, 65536)
                except OSError:  # EIO: the child closed its end
                    break
                if not data:
                    break
                with self._lock:
                    self._raw += data
                    self._stream.feed(data)
        finally:
            os.close(self._master)

    def display(self) -> str:
        """What the terminal window shows now."""
        with self._lock:
            return screen_text(self.screen)

    @property
    def raw(self) -> str:
        """Everything the child wrote so far, escape sequences included."""
        with self._lock:
            return self._raw.decode("utf-8", errors="replace")

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
