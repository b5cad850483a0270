"""Task tables (rccrawler.data.tables): rows are refused before any is written."""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from rccrawler.data.postgres import PostgresDataManager
from rccrawler.data.sql import SQLDataManager
from rccrawler.data.sqlite import SQLiteDataManager
from rccrawler.data.tables import TaskTable, check_rows
from rccrawler.exceptions import StateError

TABLE = TaskTable("t_rows", (("word", "text"), ("count", "int"), ("weight", "float"),
                             ("data", "bytes")))  # fmt: skip


def test_rows_that_fit_pass():
    check_rows(TABLE, [])
    check_rows(TABLE, [("a", 1, 0.5, b"x"), ("b", True, 2, bytearray(b"y")), (None,) * 4])


@pytest.mark.parametrize(
    ("rows", "error", "message"),
    [
        ([("a", 1, 0.5, b"x"), ("a", 1, 0.5)], ValueError, "a row has 3 values, not 4"),
        ([("a", 1, 0.5, b"x", 1)], ValueError, "a row has 5 values, not 4"),
        ([("a", 1, 0.5, b"x"), (1, 1, 0.5, b"x")], TypeError, r"t_rows\.word is text, not int"),
        ([("a", 1.5, 0.5, b"x")], TypeError, r"t_rows\.count is int, not float"),
        ([("a", 1, "0.5", b"x")], TypeError, r"t_rows\.weight is float, not str"),
        ([("a", 1, 0.5, "x")], TypeError, r"t_rows\.data is bytes, not str"),
    ],
)
def test_rows_that_do_not_fit_are_refused(rows, error, message):
    with pytest.raises(error, match=message):
        check_rows(TABLE, rows)


# -- tables of derived rows (per_page=False), on both backends ---------------------

PAGES = TaskTable("t_pages", (("word", "text"),))
DERIVED = TaskTable(
    "t_derived", (("word", "text"), ("pages", "int")), key=("word",), per_page=False
)


def test_a_derived_table_has_no_page_column_and_needs_its_own_key():
    assert [name for name, _kind in DERIVED.all_columns] == ["word", "pages"]
    with pytest.raises(KeyError):
        DERIVED.column("page_id")
    with pytest.raises(ValueError, match="needs its own key"):
        TaskTable("t_bad", (("word", "text"),), per_page=False)


@contextlib.contextmanager
def _opened(
    storage: str, folder: Path, tables: tuple[TaskTable, ...], schema: str, *, drop: bool = True
) -> Iterator[SQLDataManager]:
    """A DataManager with these task tables on a state (dropped after, if ``drop``)."""
    data: SQLDataManager
    if storage == "sqlite":
        data = SQLiteDataManager(folder / "crawl.sqlite3", task_tables=tables)
    else:
        data = PostgresDataManager(storage, schema, task_tables=tables)
    try:
        data.open()
        try:
            yield data
        finally:
            data.close()
    finally:
        if drop and storage != "sqlite":
            PostgresDataManager.drop(storage, schema)


def _schema() -> str:
    return f"rc_test_{uuid.uuid4().hex[:12]}"


@pytest.mark.both_backends
def test_derived_rows_are_added_cleared_and_never_stored_with_a_page(storage, tmp_path):
    with _opened(storage, tmp_path, (PAGES, DERIVED), _schema()) as data:
        data.check_identity("tests.Manager")
        data.add_task_rows("t_derived", [("apple", 2), ("pear", 1)])
        data.add_task_rows("t_derived", [])
        assert sorted(data.task_rows("t_derived")) == [("apple", 2), ("pear", 1)]
        assert data.task_rows("t_derived", columns=("pages",), equals={"word": "pear"}) == [(1,)]
        with pytest.raises(TypeError, match=r"t_derived\.pages is int"):
            data.add_task_rows("t_derived", [("fig", "many")])
        with pytest.raises(KeyError, match="kept per page"):
            data.add_task_rows("t_pages", [("apple",)])
        with pytest.raises(KeyError, match="kept per page"):
            data.clear_task_table("t_pages")
        data.clear_task_table("t_derived")
        assert data.task_row_total("t_derived") == 0


@pytest.mark.both_backends
def test_a_state_whose_task_tables_have_other_columns_is_refused(storage, tmp_path):
    """A task whose tables changed (a new version) never misreads an older state."""
    schema = _schema()
    with _opened(storage, tmp_path, (PAGES,), schema, drop=False) as data:
        data.check_identity("tests.Manager")
    newer = TaskTable("t_pages", (("word", "text"), ("weight", "float")))
    message = r"t_pages with columns \(page_id, word\).*--fresh"
    with pytest.raises(StateError, match=message), _opened(storage, tmp_path, (newer,), schema):
        pass


WIDE = TaskTable(
    "t_wide", (("term", "text"), ("blob", "bytes")), key=("term",), per_page=False,
    large_rows=True,
)  # fmt: skip


@pytest.mark.both_backends
def test_a_table_of_large_rows_keeps_its_key_unique_and_its_rows_whole(storage, tmp_path):
    """On SQLite it is a rowid table (a WITHOUT ROWID one spills large rows into
    overflow pages of its key's B-tree); the key stays a unique key either way."""
    blobs = [bytes([n]) * (20_000 * n) for n in range(1, 4)]  # many pages each
    with _opened(storage, tmp_path, (DERIVED, WIDE), _schema()) as data:
        data.check_identity("tests.Manager")
        data.add_task_rows("t_wide", [(f"term{n}", blob) for n, blob in enumerate(blobs)])
        assert sorted(data.task_rows("t_wide")) == [(f"term{n}", b) for n, b in enumerate(blobs)]
        with pytest.raises(Exception, match=r"(?i)unique|duplicate"):
            data.add_task_rows("t_wide", [("term1", b"again")])
        assert data.task_rows("t_wide", columns=("blob",), equals={"term": "term1"}) == [
            (blobs[1],)
        ]
    if storage == "sqlite":
        with contextlib.closing(sqlite3.connect(tmp_path / "crawl.sqlite3")) as db:
            created = dict(db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'"))
        assert "WITHOUT ROWID" not in created["t_wide"]
        assert "WITHOUT ROWID" in created["t_derived"]
