"""Response headers without the email package: the same message as http.client's own.

rccrawler.web.headers takes http.client's header parse for plain ``Name: value``
blocks and hands everything else to the email parser; these tests hold the two
together on hand-made and random hostile blocks, and over a real socket.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import random
import socket
import threading

import pytest
from rawtcp import tcp_server

from rccrawler.config import CrawlSettings
from rccrawler.web import headers
from rccrawler.web.fetch import Fetcher


def both(block: bytes) -> tuple[object, object]:
    """What http.client's own parse and ours make of ``block`` (the message's whole
    state, or the exception's type and text), and what each left unread."""
    outcomes = []
    for parse in (headers.stdlib_parse_headers, headers.parse_headers):
        fp = io.BytesIO(block)
        try:
            message = parse(fp)
        except http.client.HTTPException as error:
            outcomes.append((type(error), str(error), fp.read()))
        else:
            state = vars(message) | {"defects": [(type(d), d.args) for d in message.defects]}
            outcomes.append((type(message), state, fp.read()))
    return outcomes[0], outcomes[1]


PLAIN = b"Server: nginx\r\nContent-Type: text/html\r\nContent-Length: 5\r\n\r\nhello"

HAND_MADE = [
    PLAIN,
    b"\r\n",
    b"\n",
    b"",
    b"A: b\n\n",
    b"A:\r\nB:\t\t\r\n\r\n",  # empty values
    b"A:  padded  \r\n\r\n",  # trailing blanks are kept
    b"Set-Cookie: a=1\r\nset-cookie: b=2\r\nSET-COOKIE: c=3\r\n\r\n",  # repeated, any case
    b"Location: /caf\xc3\xa9?q=\xe9\r\n\r\n",  # raw UTF-8 and latin-1 bytes
    b"X-Odd: \x85\x0b\x0c\x1c split points of str.splitlines\r\n\r\n",
    b"A: b\r\n continued\r\n\tagain\r\n\r\n",  # obs-fold
    b" leading: fold\r\nA: b\r\n\r\n",
    b"no colon here\r\nA: b\r\n\r\n",  # ends the headers for the email parser
    b": empty name\r\n\r\n",
    b"Name With Space: x\r\n\r\n",
    b"From nobody Mon Jan 1\r\nA: b\r\n\r\n",  # an mbox From_ line
    b"A: bare\rcarriage\r\n\r\n",
    b"A: cr at end\r\r\n\r\n",
    b"A: b\r\n",  # no blank line: the stream ends
    b"A: b\r\nB: c",  # ends mid-line
    b"A: " + b"x" * 70000 + b"\r\n\r\n",  # over http.client's line limit
    b"".join(b"H%d: v\r\n" % i for i in range(101)) + b"\r\n",  # over its header count
    b"".join(b"H%d: v\r\n" % i for i in range(100)) + b"\r\n",  # at it
]


@pytest.mark.parametrize("block", HAND_MADE, ids=range(len(HAND_MADE)))
def test_a_header_block_parses_as_http_client_parses_it(block):
    ours, theirs = both(block)
    assert ours == theirs


def test_random_header_blocks_parse_as_http_client_parses_them():
    pieces = [b"A", b"b-c", b":", b": ", b"\t", b" ", b"\r\n", b"\n", b"\r", b"\xe9",
              b"\x85", b"\x00", b"From ", b"=", b"x" * 40]  # fmt: skip
    generator = random.Random(14)
    plain = 0
    for _ in range(3000):
        lines = []
        for _ in range(generator.randrange(0, 6)):
            if generator.random() < 0.7:  # mostly well-formed, so both paths are taken
                lines.append(b"N%d: v%d\r\n" % (generator.randrange(9), generator.randrange(9)))
            else:
                lines.append(b"".join(generator.choices(pieces, k=generator.randrange(1, 6))))
        end = generator.choice([b"\r\n", b"\n", b"", b"\r\nbody"])
        block = b"".join(lines) + end
        ours, theirs = both(block)
        assert ours == theirs, block
        plain += all(line.startswith(b"N") for line in lines) and end != b""
    assert plain > 500  # the fast path was compared, not only the fallback


@pytest.fixture
def fed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What the email package's FeedParser is fed from now on."""
    import email.feedparser

    texts: list[str] = []
    original = email.feedparser.FeedParser.feed

    def counting(self: email.feedparser.FeedParser, data: str) -> None:
        texts.append(data)
        original(self, data)

    monkeypatch.setattr(email.feedparser.FeedParser, "feed", counting)
    return texts


def test_plain_headers_skip_the_email_parser(fed):
    """The point of the module: no FeedParser for a plain block (counted, not timed)."""
    headers.parse_headers(io.BytesIO(PLAIN))
    assert fed == []
    headers.parse_headers(io.BytesIO(b"A: b\r\n folded\r\n\r\n"))
    assert fed == ["A: b\r\n folded\r\n\r\n"]


def test_another_message_class_is_made_by_the_email_parser(fed):
    """An http.server's MessageClass may be a subclass with its own ways: it is built
    as http.client builds it, through the email parser."""

    class Message(http.client.HTTPMessage):
        pass

    message = headers.parse_headers(io.BytesIO(PLAIN), Message)
    assert type(message) is Message and len(fed) == 1
    assert message.items() == [("Server", "nginx"), ("Content-Type", "text/html"),
                               ("Content-Length", "5")]  # fmt: skip


def test_fetched_responses_carry_every_header_as_sent():
    """Over a real socket: repeated, folded and non-ASCII headers reach the exchange
    (each answer on its own connection, its body ending where the server closes it)."""
    assert headers.installed()
    answers = [
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nX-Robots-Tag: noindex\r\n"
        b"X-Robots-Tag: nofollow\r\nX-Name: caf\xc3\xa9\r\nConnection: close\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nX-Folded: one\r\n two\r\n"
        b"Connection: close\r\n\r\nok",
    ]
    served = threading.Semaphore(0)

    def answer(conn: socket.socket, stop: threading.Event) -> None:
        with contextlib.suppress(OSError), conn:
            conn.recv(65536)
            conn.sendall(answers.pop(0))
            served.release()

    with tcp_server(answer) as port:
        client = Fetcher(CrawlSettings(resolve={"h.test:80": f"127.0.0.1:{port}"}, cookies=False))
        try:
            plain = client.download("http://h.test/a")
            folded = client.download("http://h.test/b")
        finally:
            client.close()
    assert served.acquire(timeout=5)
    assert plain.status == folded.status == 200
    sent = [(name.lower(), value) for name, value in plain.exchange.response_headers]
    assert ("x-robots-tag", "noindex") in sent and ("x-robots-tag", "nofollow") in sent
    assert ("x-name", "caf\xc3\xa9") in sent  # latin-1 text of the raw bytes, as http.client gives
    folded_sent = dict((name.lower(), value) for name, value in folded.exchange.response_headers)
    assert folded_sent["x-folded"] == "one two"  # unfolded on the way, as before
