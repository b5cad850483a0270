"""A PostgreSQL worker's writes sent behind its calls (``postgres.WriteBehind``): what a
group of transactions sends is what they would have written one by one."""

from __future__ import annotations

import math
import os
import socket
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from rccrawler.data.postgres import (
    DeferredWrites,
    PostgresDataManager,
    WriteBehind,
    array_text,
    schema_for,
)

MARK = "written:test"


@pytest.fixture
def data(postgresql: str) -> Iterator[PostgresDataManager]:
    manager = PostgresDataManager(postgresql, schema_for(f"write-behind-{uuid.uuid4().hex}"))
    manager.open()
    try:
        yield manager
    finally:
        manager.close()
        PostgresDataManager.drop(postgresql, manager.schema)


@pytest.fixture
def conn(data: PostgresDataManager, postgresql: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(postgresql, autocommit=True) as connection:
        connection.execute(f"SET search_path TO {data.schema}")
        yield connection


def transaction(data: PostgresDataManager, *statements: tuple[str, Any]) -> DeferredWrites:
    """The deferred writes of one transaction (statements written as sql.py writes them:
    a list of rows is an executemany)."""

    def no_connection() -> psycopg.Cursor[Any]:
        raise AssertionError("a deferred write needed the connection")

    cur = DeferredWrites(no_connection, data._columns)
    for text, params in statements:
        if isinstance(params, list):
            cur.executemany(text, params)
        else:
            cur.execute(text, params)
    return cur


INSERT_PAGE = (
    "INSERT INTO pages (id, host, url, normalized_url, id_from, level, state, referer) "
    "VALUES (%s, %s, %s, %s, %s, %s, 'waiting', %s)"
)


def page_row(page_id: int, level: int = 1) -> tuple[Any, ...]:
    url = f"http://a.test/{page_id}"
    return (page_id, "a.test", url, url, None, level, "")


@pytest.mark.parametrize(
    ("kind", "values"),
    [
        ("text", ["plain", "", "NULL", None, 'quote " and \\ back', "a,b", "{braces}",
                  " spaced ", "ünïcødé ✓", "tab\there"]),
        ("bigint", [0, -1, 2**62, None, True]),
        ("double precision", [0.0, -1.5, 1e300, math.inf, -math.inf, None, 3]),
        ("boolean", [True, False, None]),
        ("bytea", [b"", b"\x00\x01", b'"\\', bytes(range(256)), None]),
    ],
)  # fmt: skip
def test_an_array_written_as_text_reads_back_as_its_values(conn, kind, values):
    text = array_text(values, kind)
    assert isinstance(text, str)
    rows = conn.execute(f"SELECT unnest(%s::{kind}[])", (text,)).fetchall()
    expected = [
        None if v is None else bytes(v) if kind == "bytea" else
        float(v) if kind == "double precision" else int(v) if kind == "bigint" else v
        for v in values
    ]  # fmt: skip
    assert [row[0] for row in rows] == expected


def test_a_row_changed_by_two_transactions_of_a_group_ends_as_the_second_left_it(data, conn):
    # The first inserts page 7 (and 8), the second changes 7: in one statement the
    # update would not see the inserted row, so the group is sent as two, in order.
    first = transaction(data, (INSERT_PAGE, [page_row(7), page_row(8)]))
    second = transaction(data, ("UPDATE pages SET level = %s WHERE id = %s", (5, 7)))
    third = transaction(data, ("UPDATE pages SET level = %s WHERE id = %s", (4, 8)))
    writes = WriteBehind(64)
    for cur in (first, second, third):
        writes.add(cur.unsent(), Counter({("a.test", "state:waiting"): 1}))
    writes.send(conn, MARK, data._columns)
    rows = dict(conn.execute("SELECT id, level FROM pages WHERE id IN (7, 8)").fetchall())
    assert rows == {7: 5, 8: 4}
    count = conn.execute("SELECT n FROM counts WHERE host = 'a.test' AND key = 'state:waiting'")
    assert count.fetchone() == (3,)
    assert not writes.waiting
    assert conn.execute("SELECT value FROM meta WHERE key = %s", (MARK,)).fetchone() == ("3",)


def test_updates_of_one_text_for_many_rows_are_one_write(data, conn):
    rows = [page_row(n) for n in range(20, 30)]
    writes = WriteBehind(64)
    writes.add(transaction(data, (INSERT_PAGE, rows)).unsent(), Counter())
    writes.send(conn, MARK, data._columns)
    for n in range(20, 30):
        update = ("UPDATE pages SET level = %s, error_code = 'x' WHERE id = %s", (n * 10, n))
        writes.add(transaction(data, update).unsent(), Counter())
    [part] = WriteBehind._parts(list(writes.waiting), MARK)
    assert len(part) == 11  # ten updates and the mark
    writes.send(conn, MARK, data._columns)
    found = conn.execute("SELECT id, level, error_code FROM pages WHERE id >= 20").fetchall()
    assert sorted(found) == [(n, n * 10, "x") for n in range(20, 30)]


def test_a_send_cut_off_after_it_committed_is_not_sent_again(data, conn):
    writes = WriteBehind(64)
    writes.add([], Counter({("a.test", "bytes"): 5}))
    sent = list(writes.waiting)
    writes.send(conn, MARK, data._columns)

    def counted() -> int:
        row = conn.execute("SELECT n FROM counts WHERE host = 'a.test' AND key = 'bytes'")
        return int((row.fetchone() or (0,))[0])

    assert counted() == 5
    # The connection went before the answer came: the same writes wait, in doubt.
    writes.waiting.extend(sent)
    writes.in_doubt = True
    writes.send(conn, MARK, data._columns)
    assert counted() == 5 and not writes.waiting and not writes.in_doubt
    # One that did not commit is sent once the storage is back.
    writes.add([], Counter({("a.test", "bytes"): 7}))
    writes.in_doubt = True
    writes.send(conn, MARK, data._columns)
    assert counted() == 12


def test_every_connection_of_a_worker_finds_a_vanished_server_out(data):
    """Keepalive probes and a timeout on unacknowledged data, on the write connection and
    the pooled ones: a server gone without closing them (a failover, a cut) is a lost
    storage within seconds, not a statement that waits forever."""
    sockets = [data._conn]
    assert data._pool is not None
    with data._pool.connection() as reader:
        sockets.append(reader)
        for conn in sockets:
            assert conn is not None
            sock = socket.socket(fileno=os.dup(conn.fileno()))
            try:
                assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 10
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 3
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 30_000
            finally:
                sock.close()


def test_a_transaction_that_replaces_rows_sends_its_delete_before_its_insert(data, conn):
    # A task's rows of a page are replaced: deleted, then inserted, keys the same. In
    # one statement the insert would meet the rows the delete has not removed yet.
    conn.execute("INSERT INTO urls VALUES ('http://a.test/x', 5), ('http://a.test/old', 5)")
    insert = "INSERT INTO urls (normalized_url, page_id) VALUES (%s, %s)"
    replace = transaction(
        data,
        ("DELETE FROM urls WHERE page_id = %s", (5,)),
        (insert, [("http://a.test/x", 5), ("http://a.test/y", 5)]),
    )
    other = transaction(data, (insert, [("http://a.test/z", 6)]))
    batches = replace.unsent()
    assert len(batches) == 2
    writes = WriteBehind(64)
    writes.add(batches, Counter())
    writes.add(other.unsent(), Counter())
    writes.send(conn, MARK, data._columns)
    rows = conn.execute("SELECT normalized_url, page_id FROM urls ORDER BY 1").fetchall()
    assert rows == [("http://a.test/x", 5), ("http://a.test/y", 5), ("http://a.test/z", 6)]
