"""Task tables: how a crawl task declares where it keeps its own per-page results.

A task lists its tables (name, columns, key, indexes) and the DataManager creates
them in the crawl's own storage, whatever the backend, like an ORM creates an
app's models. Rows are written in the same atomic call that stores the page's
download or parse (so a crash never leaves a result without its page), and read
back through the DataManager; a task never opens a connection of its own.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

ColumnType = Literal["text", "int", "float", "bytes"]
"""The column types every backend maps: TEXT, an 8-byte integer, a double, a BLOB."""

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,40}$")
_PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "text": (str,),
    "int": (int,),
    "float": (float, int),
    "bytes": (bytes, bytearray, memoryview),
}


@dataclass(frozen=True, slots=True)
class TaskTable:
    """A table of a task's per-page results.

    Every table has an implicit first column ``page_id``: the page a row belongs to.
    Storing a page's rows replaces what an earlier parse of it stored. A table declared
    with ``per_page=False`` has no such column: it holds what a task derives from its
    per-page rows once the crawl is over (the search task's term-keyed posting lists),
    written with :meth:`~rccrawler.data.base.DataManager.add_task_rows`.

    Args:
        name: the table's name (lowercase letters, digits, ``_``); prefix it with the
            task's name to keep tasks apart (``search_postings``).
        columns: (name, type) of the other columns, in row order.
        key: the primary key (must include ``page_id`` or make rows unique per page).
        indexes: extra indexes, each a tuple of column names (``page_id`` has one,
            the key's own when the key starts with it).
        partition_by: on PostgreSQL, hash-partition the table by this column (a
            big table spread by key, SPEC §7); ignored by SQLite.
        partitions: how many hash partitions (None: the backend's default); read when
            the table is created, so a saved crawl keeps its own.
        per_page: False for a table of derived rows, with no ``page_id`` column (its
            ``key`` must then be given); a page's parse never writes it.
        large_rows: its rows may hold kilobytes (a page's text, packed lists). SQLite
            then keeps it as a rowid table (its key in an index beside it, or the rowid
            itself for ``page_id`` alone): a WITHOUT ROWID table keeps each row in its
            key's B-tree, where a row over about a twentieth of a page spills into
            overflow pages (SQLite's own advice), and the search task's lists were
            stored a third slower that way.
    """

    name: str
    columns: tuple[tuple[str, ColumnType], ...]
    key: tuple[str, ...] = ("page_id",)
    indexes: tuple[tuple[str, ...], ...] = ()
    partition_by: str | None = None
    partitions: int | None = None
    per_page: bool = True
    large_rows: bool = False

    def __post_init__(self) -> None:
        names = [name for name, _ in self.all_columns]
        for name in [self.name, *names]:
            if not _NAME.match(name):
                raise ValueError(f"task table name {name!r}: lowercase letters, digits and _")
        if len(set(names)) != len(names):
            raise ValueError(f"task table {self.name}: a column is named twice")
        for _, kind in self.columns:
            if kind not in _PYTHON_TYPES:
                raise ValueError(f"task table {self.name}: unknown column type {kind!r}")
        if not self.per_page and "page_id" in self.key:
            raise ValueError(f"task table {self.name}: a table not per page needs its own key")
        for column in (*self.key, *(c for index in self.indexes for c in index)):
            self.column(column)
        if self.partition_by is not None:
            self.column(self.partition_by)
            if self.partition_by not in self.key:
                raise ValueError(f"task table {self.name}: the partition key must be in the key")

    @property
    def all_columns(self) -> tuple[tuple[str, str], ...]:
        """(name, type) of every column, ``page_id`` first (when the table is per page)."""
        return (("page_id", "id"), *self.columns) if self.per_page else self.columns

    def column(self, name: str) -> str:
        """``name`` if it is a column of this table (it is then safe to put in SQL)."""
        if any(name == c for c, _ in self.all_columns):
            return name
        raise KeyError(f"task table {self.name} has no column {name!r}")


def check_rows(table: TaskTable, rows: Sequence[tuple[Any, ...]]) -> None:
    """Refuse rows that do not fit the table, before any is written.

    Column by column, and the types of a column as a set: a page may bring hundreds of
    rows (a search index), and this keeps the loops in C."""
    width = len(table.columns)
    for found in set(map(len, rows)) - {width}:
        raise ValueError(f"task table {table.name}: a row has {found} values, not {width}")
    for values, (name, kind) in zip(zip(*rows, strict=True), table.columns, strict=False):
        for found_type in set(map(type, values)) - {type(None)}:
            if not issubclass(found_type, _PYTHON_TYPES[kind]):
                raise TypeError(
                    f"task table {table.name}.{name} is {kind}, not {found_type.__name__}"
                )
