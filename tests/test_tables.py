"""Task tables (rccrawler.data.tables): rows are refused before any is written."""

from __future__ import annotations

import pytest

from rccrawler.data.tables import TaskTable, check_rows

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
