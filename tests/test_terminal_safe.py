"""Nothing raw to the terminal (issue 15): crawled control characters are shown escaped."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest
import yaml
from webserver import HTML, Resource, redirect

from rccrawler.ui.safetext import (
    TerminalSafeFormatter,
    TerminalSafeLogRecord,
    json_terminal_safe,
    terminal_safe,
)

ATTACK = "\x1b]0;pwned\x07\x1b[2J\x9b31m"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain title", "plain title"),
        ("tab\tkept", "tab\tkept"),
        ("\x1b]0;x\x07", "\\x1b]0;x\\x07"),
        ("a\nfake log line", "a\\x0afake log line"),
        ("csi\x9b2J", "csi\\x9b2J"),
        ("del\x7f", "del\\x7f"),
        ("café ツ", "café ツ"),
    ],
)
def test_terminal_safe(text, shown):
    assert terminal_safe(text) == shown


def test_json_lines_stay_json_and_safe():
    line = json_terminal_safe(json.dumps({"title": ATTACK}, ensure_ascii=False))
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in line)
    assert json.loads(line) == {"title": ATTACK}


def test_log_records_are_escaped_for_every_handler():
    factory = logging.getLogRecordFactory()
    logging.setLogRecordFactory(TerminalSafeLogRecord)
    try:
        record = logging.getLogger("t").makeRecord("t", logging.WARNING, "f", 1,
                                                   "redirects to %s", (ATTACK,), None)  # fmt: skip
    finally:
        logging.setLogRecordFactory(factory)
    assert "\x1b" not in record.getMessage() and "\\x1b]0;pwned" in record.getMessage()


def test_escape_sequences_in_titles_and_redirects_never_reach_the_terminal(serve, tmp_path):
    page = f"<html><head><title>{ATTACK} hello</title></head><body>hello world</body></html>"
    server = serve({
        "esc.test": {"/": Resource(page.encode(), headers=HTML)},
        "redir.test": {"/": redirect(f"http://evil.test/{ATTACK}")},
    })  # fmt: skip
    path = tmp_path / "settings.yaml"
    path.write_text(yaml.safe_dump({
        "manager": "plugins.search.SearchManager", "sites": ["esc.test", "redir.test"],
        "state_dir": str(tmp_path / "state"), "output_dir": str(tmp_path / "out"),
        "crawl": {"resolve": server.resolve, "crawl_delay_ms": 0},
    }))  # fmt: skip

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "rccrawler", *args, "--config", str(path)],
                              capture_output=True, text=True, timeout=120)  # fmt: skip

    crawl = run("crawl", "--no-tui", "-v")
    assert crawl.returncode in (0, 1), crawl.stderr
    assert "redirects to http://evil.test/" in crawl.stderr  # the warning is there...
    found = run("search", "hello")
    as_json = run("search", "hello", "--json")
    assert found.returncode == 0 and "hello" in found.stdout
    for output in (crawl.stdout, crawl.stderr, found.stdout, as_json.stdout):
        assert "\x1b" not in output and "\x9b" not in output and "\x07" not in output
    assert "\\x1b]0;pwned" in found.stdout  # ...shown, not obeyed
    assert json.loads(as_json.stdout.splitlines()[0])["title"].startswith("\x1b]0;pwned")


def test_tracebacks_keep_their_lines_and_lose_their_escapes():
    try:
        raise ValueError(f"bad answer {ATTACK}")
    except ValueError:
        record = logging.getLogger("t").makeRecord("t", logging.ERROR, "f", 1, "failed", (),
                                                   sys.exc_info())  # fmt: skip
    text = TerminalSafeFormatter("%(message)s").format(record)
    assert text.startswith("failed\nTraceback (most recent call last):\n")
    assert "\x1b" not in text and "\\x1b]0;pwned" in text
