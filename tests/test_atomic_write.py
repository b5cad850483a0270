"""atomic_write: a file whole or not at all, with a plain open()'s mode; --fresh knows
what an interrupted one left."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from rccrawler.commands.fresh import owned_output_files
from rccrawler.unloaders import ResultUnloader, atomic_write


class Titles(ResultUnloader):
    output_names = ("{stem}.titles.txt",)


def test_a_file_is_written_whole_with_the_mode_the_umask_gives(tmp_path: Path) -> None:
    path = tmp_path / "out" / "a.test.titles.txt"  # the folder is made
    old = os.umask(0o027)
    try:
        with atomic_write(path) as handle:
            handle.write("titles\n")
    finally:
        os.umask(old)
    assert path.read_text() == "titles\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert os.listdir(path.parent) == ["a.test.titles.txt"]  # no temporary file left


def test_an_interrupted_write_keeps_the_old_file_and_fresh_finds_its_leftover(
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.test.titles.txt"
    path.write_text("before\n")
    with pytest.raises(RuntimeError), atomic_write(path) as handle:
        handle.write("half")
        raise RuntimeError("the disk is full")
    assert path.read_text() == "before\n" and os.listdir(tmp_path) == [path.name]
    # A crash (not an exception) leaves the temporary file: --fresh removes it too.
    leftover = tmp_path / f".{path.name}.{os.getpid()}-7"
    leftover.write_text("half")
    (tmp_path / ".someone.else.txt.1-2").write_text("not ours")
    assert owned_output_files((Titles,), tmp_path, {"a.test"}) == sorted([leftover, path])
