"""What a crawl keeps in its state_dir beside the storage: the lock that keeps a second
process off the same state, the stop request of ``rccrawler stop``, and the cookie jar,
saved on a timer so a killed crawl keeps its cookies."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from rccrawler.exceptions import StateError

logger = logging.getLogger(__name__)

LOCK_FILE = "lock"
STOP_FILE = "stop.request"
COOKIE_FILE = "cookies.txt"
ACTIVITY_FILE = "activity.json"
"""What a running crawl is doing, per site, as its own memory knows it (requests in
flight, pages waiting for a parser): ``status`` reads it beside the storage, whose rows
cannot tell a request in flight from a page leased for later."""
SETTINGS_FILE = "last-settings.json"
"""The settings of the crawl's last run (every key, as :func:`rccrawler.config.
settings_mapping` writes them, no password): what a resumed run is compared with, and
what ``--state DIR`` reads to find the crawl."""
COOKIE_TMP_SUFFIX = ".tmp"
"""A save writes ``cookies.txt.<random>.tmp`` first: each its own, so workers sharing a
state directory never rename one another's half-written file."""


def state_in_use(state_dir: Path) -> bool:
    """Whether a crawl process holds the lock of this state directory right now."""
    try:
        with open(state_dir / LOCK_FILE, encoding="utf-8") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                return True
            fcntl.flock(handle, fcntl.LOCK_UN)
            return False
    except OSError:
        return False


def discard_state_files(state_dir: Path) -> None:
    """Remove the files this module keeps (``--fresh``, with the state lock held); the
    lock file stays, it is held. ``cookies.txt.tmp`` is what older versions wrote."""
    for name in (COOKIE_FILE, f"{COOKIE_FILE}.tmp", STOP_FILE, SETTINGS_FILE, ACTIVITY_FILE):
        (state_dir / name).unlink(missing_ok=True)
    # A killed save's file, by mkstemp's shape (8 random characters): nothing else.
    leftovers = (f"{COOKIE_FILE}.{'?' * 8}{COOKIE_TMP_SUFFIX}", f".{SETTINGS_FILE}.{'?' * 8}",
                 f".{ACTIVITY_FILE}.{'?' * 8}")  # fmt: skip
    for pattern in leftovers:
        for leftover in state_dir.glob(pattern):
            leftover.unlink(missing_ok=True)


def write_whole(path: Path, text: str) -> None:
    """Write a small file of the state whole: a temporary file beside it, then a rename
    (a reader never sees half of it)."""
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def write_activity(state_dir: Path, activity: dict[str, tuple[int, int]]) -> None:
    """Save what the crawl is doing now: host -> (requests in flight, pages to parse), the
    sites with neither left out (see :data:`ACTIVITY_FILE`). A failure is logged."""
    try:
        write_whole(state_dir / ACTIVITY_FILE, json.dumps(activity))
    except OSError as exc:
        logger.debug("cannot write %s: %s", ACTIVITY_FILE, exc)


def read_activity(state_dir: Path) -> dict[str, tuple[int, int]] | None:
    """What :func:`write_activity` saved last; None when there is nothing to read."""
    try:
        saved = json.loads((state_dir / ACTIVITY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(saved, dict):
        return None
    return {str(host): (int(pair[0]), int(pair[1])) for host, pair in saved.items()
            if isinstance(pair, list) and len(pair) == 2}  # fmt: skip


@dataclass(frozen=True, slots=True)
class RunSettings:
    """The settings a crawl's last run had, as its state_dir keeps them."""

    mapping: dict[str, Any]
    """Every key (:func:`rccrawler.config.settings_mapping`), the storage's password out."""
    source: Path | None
    """The settings file they came from (relative word lists are found beside it)."""

    @classmethod
    def read(cls, state_dir: Path) -> RunSettings | None:
        """The settings saved in ``state_dir``; None when there are none (a new crawl, or
        one last run by a version that did not save them).

        Raises:
            StateError: the file is there but unreadable.
        """
        path = state_dir / SETTINGS_FILE
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise StateError(f"cannot read the settings of the last run, {path}: {exc}") from exc
        if not isinstance(saved, dict) or not isinstance(saved.get("settings"), dict):
            raise StateError(f"{path} does not hold the settings of a run")
        source = saved.get("source")
        return cls(saved["settings"], Path(source) if isinstance(source, str) else None)

    def save(self, state_dir: Path) -> None:
        """Write them to ``state_dir`` whole (a temporary file, then a rename)."""
        text = json.dumps({"source": str(self.source) if self.source else None,
                           "settings": self.mapping}, indent=1, ensure_ascii=False)  # fmt: skip
        write_whole(state_dir / SETTINGS_FILE, text + "\n")


class StateLock:
    """The exclusive ``fcntl`` lock of a state directory, held while a crawl runs there.

    Args:
        state_dir: the directory (created when missing).
    """

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self._handle: IO[str] | None = None

    @property
    def held(self) -> bool:
        return self._handle is not None

    def acquire(self) -> None:
        """Take the lock, writing this process's id into it; a no-op while held.

        Raises:
            StateError: another process holds it, or the directory cannot be written.
        """
        if self._handle is not None:
            return
        self.make_dir()
        try:
            handle = open(self.state_dir / LOCK_FILE, "a+", encoding="utf-8")  # noqa: SIM115
        except OSError as exc:
            raise StateError(f"cannot write the state directory {self.state_dir}: {exc}") from exc
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            handle.seek(0)
            owner = handle.read().strip() or "another process"
            handle.close()
            raise StateError(
                f"the state in {self.state_dir} is in use by {owner}; "
                "stop that crawl first (rccrawler stop --config ...)"
            ) from exc
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}\n")
        handle.flush()
        self._handle = handle

    def make_dir(self) -> None:
        """Create the state directory, or say why it cannot be (StateError)."""
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StateError(f"cannot write the state directory {self.state_dir}: {exc}") from exc

    def release(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


class SavedCookies:
    """The crawl's cookie jar in ``state_dir/cookies.txt``: loaded at start, saved whole
    at most every ``save_interval`` seconds while responses change it, and at the end.

    Args:
        state_dir: where the jar file lives.
        enabled: ``crawl.cookies``; when False nothing is ever saved.
        save_interval: seconds at least between two saves during a crawl.
    """

    def __init__(self, state_dir: Path, *, enabled: bool, save_interval: float) -> None:
        from http.cookiejar import LWPCookieJar  # with urllib.request: a crawl's alone

        self.path = state_dir / COOKIE_FILE
        self.jar = LWPCookieJar(str(self.path))
        self.enabled = enabled
        self.save_interval = save_interval
        self.jar_lock: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
        """Held while the jar is written out: the fetcher's lock, so the jar keeps still."""
        self._lock = threading.Lock()
        self._saved_at = 0.0
        self._timer: threading.Timer | None = None

    def load(self) -> None:
        if self.path.exists():
            try:
                # http.cookiejar warns "bug!" with a traceback on a garbage file; the
                # warning below says it in one line, and the crawl goes on without them.
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    self.jar.load(ignore_discard=True, ignore_expires=False)
            except (OSError, ValueError) as exc:
                self.jar.clear()
                logger.warning("cookies of the last run could not be read: %s", exc)

    def changed(self) -> None:
        """A response set or removed cookies: save the jar now, or ``save_interval``
        after the last save, so a killed crawl keeps them without a write per response."""
        with self._lock:
            if self._timer is not None:
                return  # the save already scheduled will include this change
            wait = self._saved_at + self.save_interval - time.monotonic()
            if wait > 0:
                self._timer = threading.Timer(wait, self.save)
                self._timer.daemon = True
                self._timer.start()
                return
        self.save()

    def save(self) -> None:
        """Write the jar whole: a temporary file, then a rename."""
        if not self.enabled:
            return
        with self._lock:
            timer, self._timer = self._timer, None
            self._saved_at = time.monotonic()
        if timer is not None:
            timer.cancel()  # this save supersedes it
        try:
            with self.jar_lock:
                handle, temporary = tempfile.mkstemp(
                    prefix=f"{COOKIE_FILE}.", suffix=COOKIE_TMP_SUFFIX, dir=self.path.parent
                )
                os.close(handle)
                try:
                    self.jar.save(temporary, ignore_discard=True, ignore_expires=False)
                    os.replace(temporary, self.path)
                except BaseException:
                    os.unlink(temporary)
                    raise
        except OSError as exc:
            logger.warning("cookies could not be saved: %s", exc)
