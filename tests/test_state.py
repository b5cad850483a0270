"""The state directory's own files: the saved cookie jar when several workers share it."""

from __future__ import annotations

import threading
from http.cookiejar import Cookie
from pathlib import Path

import pytest

from rccrawler.state import COOKIE_FILE, SavedCookies, discard_state_files


def _cookie(name: str) -> Cookie:
    return Cookie(
        0, name, "v", None, False, "a.test", False, False, "/", False, False,
        None, False, None, None, {},
    )  # fmt: skip


def test_workers_sharing_a_state_dir_save_cookies_without_clobbering(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Each save writes a file of its own before the rename: two workers saving at once
    (two jars on one directory, as PostgreSQL workers sharing a state_dir are) never
    rename one another's temporary file away, so no save fails."""
    jars = [SavedCookies(tmp_path, enabled=True, save_interval=0) for _ in range(2)]
    for number, jar in enumerate(jars):
        jar.jar.set_cookie(_cookie(f"c{number}"))
    failures: list[BaseException] = []

    def hammer(jar: SavedCookies) -> None:
        try:
            for _ in range(300):
                jar.save()
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=hammer, args=(jar,)) for jar in jars]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not failures
    assert "could not be saved" not in caplog.text  # save() logs a failed save
    assert [p.name for p in tmp_path.iterdir()] == [COOKIE_FILE]  # no temporary file left
    again = SavedCookies(tmp_path, enabled=True, save_interval=0)
    again.load()
    assert {c.name for c in again.jar} in ({"c0"}, {"c1"})  # one worker's whole jar


def test_fresh_removes_a_killed_save_s_temporary_file(tmp_path: Path) -> None:
    (tmp_path / COOKIE_FILE).write_text("#LWP-Cookies-2.0\n")
    (tmp_path / f"{COOKIE_FILE}.k3x9_a0q.tmp").write_text("half")  # mkstemp's shape
    for name in ("mine.txt", f"{COOKIE_FILE}.backup.tmp"):
        (tmp_path / name).write_text("not rccrawler's")
    discard_state_files(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{COOKIE_FILE}.backup.tmp", "mine.txt"]


def test_fresh_finds_the_files_unloaders_declare_and_only_those(tmp_path: Path) -> None:
    from rccrawler.commands.fresh import owned_output_files
    from rccrawler.unloaders import ResultUnloader

    class Graph(ResultUnloader):
        output_names = ("{stem}.nodes.csv", "report.json")

    class Archive(ResultUnloader):
        output_names = ("{stem}.*.warc.gz",)

    ours = [
        "a.test.nodes.csv",
        "report.json",
        "[__1]_8080.nodes.csv",
        "a.test.00001.warc.gz",
        ".a.test.nodes.csv.k3x9_a0q",
        ".report.json.abcd1234",
        ".b.test.2.warc.gz.x1y2z3w4",
    ]
    theirs = ["c.test.nodes.csv", "a.test.nodes.csv.bak", "notes.txt", "x.a.test.1.warc.gz",
              "[_1]_8080.nodes.csv", ".a.test.nodes.csv", "a.test.warc.gz"]  # fmt: skip
    for name in ours + theirs:
        (tmp_path / name).write_text(name)
    (tmp_path / "b.test.nodes.csv").mkdir()  # a folder is never ours
    found = owned_output_files((Graph, Archive), tmp_path, {"a.test", "b.test", "[::1]:8080"})
    assert sorted(path.name for path in found) == sorted(ours)
