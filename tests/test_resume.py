"""Stop, resume and crash safety: the fixture server's log proves what was fetched twice."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from crawling import CrawlRunner, page_states, state_snapshot
from support.loopback import Request, Resource, StaticResource
from support.sites import generated_site

# A test that uses `crawler` runs on SQLite and on PostgreSQL; those that build their own
# CrawlRunner(tmp_path) stay on SQLite, each says why.
pytestmark = pytest.mark.both_backends
TESTS = Path(__file__).parent
FINISHED = ("done", "error", "skipped")
"""Pages whose work is committed. A page being downloaded, or downloaded and waiting
for a parser (its body is kept in memory), is in flight: a crash fetches it again."""
IN_FLIGHT = ("running", "downloaded", "parsing")
"""How a page in flight may show in the table (on PostgreSQL it stays 'waiting' until
it is stored: see in_flight)."""


def in_flight(server, states: dict[str, str]) -> set[str]:
    """The pages in flight at a kill (``states``: page_states() after it): requested and
    not finished, or leased in the table."""
    requested = {hit.path for hit in server.hits}
    unfinished = {path for path in requested if states.get(path) not in FINISHED}
    return unfinished | {path for path, state in states.items() if state in IN_FLIGHT}


def spawn(config: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])}
    crawl_only = [] if args else ["--no-tui"]  # the other commands have no live view
    return subprocess.Popen(
        [sys.executable, "-m", "rccrawler", *args, "--config", str(config), *crawl_only, "-q"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


def run(config: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    proc = spawn(config, *args)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        kill9(proc)  # and reap it: a failed test leaves no crawl running behind it
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def kill9(proc: subprocess.Popen[str]) -> None:
    """SIGKILL, then reap the process and close its pipes."""
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=10)


def wait_for_hits(server, count: int, proc: subprocess.Popen[str], limit: float = 60) -> None:
    if server.wait_for_hits(count, timeout=limit, alive=lambda: proc.poll() is None):
        return
    if proc.poll() is not None:
        raise AssertionError(f"the crawl ended early: {proc.communicate()}")
    kill9(proc)  # a failed test leaves no crawl running behind it
    raise AssertionError(f"only {len(server.hits)} requests after {limit} s")


def graph_by_url(result) -> tuple[set[str], set[tuple[str, str]]]:
    graph = result.graph("a.test")
    url_of = {int(n["id"]): n["url"] for n in graph.nodes}
    return graph.urls, {(url_of[f], url_of[t]) for f, t in graph.arcs}


def read_graph(output: Path) -> tuple[set[str], set[tuple[str, str]]]:
    from crawling import CrawlResult

    result = CrawlResult(True, output, {}, None)  # type: ignore[arg-type]
    return graph_by_url(result)


TAKEOVER_S = 10
"""Seconds a restarted crawl may take to request again after a kill (SPEC §9: "within
seconds"); SQLite takes about one."""


@pytest.fixture
def site():
    return generated_site("a.test", 2000, fanout=8)


@pytest.fixture
def small_site():
    return generated_site("a.test", 800, fanout=8)


def test_sigkill_at_five_moments_loses_and_repeats_nothing_but_in_flight_pages(
    serve, tmp_path, site, crawler
):
    # One uninterrupted crawl is the reference.
    reference_server = serve({"a.test": site})
    reference = CrawlRunner(tmp_path / "reference").run(["a.test"], reference_server.resolve)
    expected = graph_by_url(reference)
    assert len(expected[0]) == 2000

    server = serve({"a.test": site})
    config = crawler.settings_file(["a.test"], server.resolve, crawl={"max_downloads_at_time": 4})
    in_flight_at_kills: set[str] = set()
    for threshold in (30, 400, 800, 1200, 1700):
        proc = spawn(config)
        wait_for_hits(server, threshold, proc)
        kill9(proc)
        seen = len(server.hits)
        states = page_states(config)
        finished = {path for path, state in states.items() if state in FINISHED}
        in_flight_at_kills |= in_flight(server, states)
        # What the next run requests must not include anything finished before the kill.
        proc = spawn(config)
        wait_for_hits(server, seen + 1, proc, limit=TAKEOVER_S)
        kill9(proc)
        in_flight_at_kills |= in_flight(server, page_states(config))
        again = [hit.path for hit in server.hits[seen:]]
        assert not finished & set(again), sorted(finished & set(again))[:5]
    final = run(config)  # what is left: a few hundred pages (run()'s bound, not a speed)
    assert final.returncode == 0, final.stderr
    counts = Counter(hit.path for hit in server.hits if hit.path != "/robots.txt")
    twice = {path for path, n in counts.items() if n > 1}
    assert twice <= in_flight_at_kills
    assert set(counts) == {urlsplit(url).path for url in expected[0]}
    assert read_graph(tmp_path / "output") == expected


def test_sigterm_stops_cleanly_and_resume_repeats_nothing(serve, tmp_path, small_site, crawler):
    server = serve({"a.test": small_site})
    config = crawler.settings_file(["a.test"], server.resolve)
    proc = spawn(config)
    wait_for_hits(server, 200, proc)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.strip().splitlines()[-1] == "stopped: run the same command to resume"
    states = page_states(config)
    assert "running" not in states.values() and "parsing" not in states.values()
    assert not (tmp_path / "output" / "report.json").exists()
    stopped_at = len(server.hits)
    assert stopped_at < 700
    final = run(config)
    assert final.returncode == 0, final.stderr
    counts = Counter(hit.path for hit in server.hits)
    assert counts.most_common(1)[0][1] == 1, "a page was requested twice"
    assert len(read_graph(tmp_path / "output")[0]) == 800


def test_stop_command_and_status_agree_with_the_output(serve, tmp_path, small_site, crawler):
    server = serve({"a.test": small_site})
    # A small delay keeps the crawl running while `status` and `stop` start up.
    config = crawler.settings_file(["a.test"], server.resolve, crawl={"crawl_delay_ms": 5})
    proc = spawn(config)
    wait_for_hits(server, 150, proc)
    running = json.loads(run(config, "status", "--json").stdout)
    assert running["running"] is True
    assert running["sites"][0]["stop_reason"] == "running"
    # The crawl's DownloadingThreads, as it noted them (a fixed pool of 4 here).
    assert running["downloading_threads"]["total"] == 4
    assert 0 <= running["downloading_threads"]["busy"] <= 4
    stop = run(config, "stop")
    assert stop.returncode == 0
    out, _err = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert "stopped: run the same command to resume" in out
    stopped = json.loads(run(config, "status", "--json").stdout)
    site_status = stopped["sites"][0]
    assert stopped["running"] is False
    assert stopped["downloading_threads"] is None
    assert site_status["stop_reason"].startswith("stopped")
    assert 0 < site_status["done"] < 800 and site_status["waiting"] > 0
    assert run(config).returncode == 0
    final = json.loads(run(config, "status", "--json").stdout)["sites"][0]
    nodes = read_graph(tmp_path / "output")[0]
    report = json.loads((tmp_path / "output" / "report.json").read_text())["sites"]["a.test"]
    assert final["done"] == len(nodes) == report["pages_done"] == 800
    assert final["errors"] == report["errors"] and final["waiting"] == 0
    assert final["stop_reason"] == report["stop_reason"] == "no waiting links left"
    human = run(config, "status")
    assert "a.test" in human.stdout and "800" in human.stdout


def test_a_second_process_on_the_same_state_refuses(serve, tmp_path):
    site = dict(generated_site("a.test", 60, fanout=4))
    # The first crawl cannot end while the second runs: one of its pages is answered only
    # once the second process is over (a loaded machine once let it finish first).
    held_path = next(path for path in reversed(site) if path not in ("/", "/robots.txt"))
    held, released = site[held_path], threading.Event()

    def held_page(_request: Request) -> StaticResource:
        released.wait(timeout=60)
        return held

    server = serve({"a.test": {**site, held_path: held_page}})
    # SQLite only: its state_dir lock refuses a second process; PostgreSQL shares a crawl
    # between processes by design (test_postgres.py runs several workers).
    runner = CrawlRunner(tmp_path)
    config = runner.settings_file(["a.test"], server.resolve, crawl={"crawl_delay_ms": 20})
    first = spawn(config)
    try:
        wait_for_hits(server, 5, first)
        second = run(config)
    finally:
        released.set()
    assert second.returncode == 2
    assert "in use by pid" in second.stderr and len(second.stderr.strip().splitlines()) == 1
    _out, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    assert len(read_graph(tmp_path / "output")[0]) == 60
    assert Counter(hit.path for hit in server.hits).most_common(1)[0][1] == 1


def stopped_crawl(serve, runner: CrawlRunner) -> Path:
    """The settings of a crawl stopped half-way."""
    server = serve({"a.test": generated_site("a.test", 400, fanout=4)})
    config = runner.settings_file(["a.test"], server.resolve)
    proc = spawn(config)
    wait_for_hits(server, 50, proc)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode == 0
    return config


def dump(state_dir: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(state_dir / "crawl.sqlite3")) as db:
        return list(db.iterdump())


def test_a_state_of_another_schema_version_is_refused(serve, tmp_path):
    # SQLite only: the test edits the state file by hand.
    config = stopped_crawl(serve, CrawlRunner(tmp_path))
    with contextlib.closing(sqlite3.connect(tmp_path / "state" / "crawl.sqlite3")) as db:
        db.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
        db.commit()
    before = dump(tmp_path / "state")
    result = run(config)
    assert result.returncode == 2
    assert "schema version 999" in result.stderr and "--fresh" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert dump(tmp_path / "state") == before


def test_a_state_of_another_manager_is_refused(serve, tmp_path, crawler, storage):
    config = stopped_crawl(serve, crawler)
    before = state_snapshot(config)
    text = config.read_text() + "manager: taskplugins.TitleGraphManager\n"
    other = config.with_name("other.yaml")
    other.write_text(text)
    result = run(other)
    assert result.returncode == 2
    assert "belongs to manager 'plugins.webgraph.manager.WebGraphManager'" in result.stderr
    # A shared crawl may have other workers: the way out is another name, never --fresh.
    assert ("--fresh" in result.stderr) == (storage == "sqlite")
    assert state_snapshot(config) == before
    # --fresh starts over with the other manager.
    fresh = run(other, "--fresh")
    assert fresh.returncode == 0, fresh.stderr
    # The other task kept every page's title, as the server has it.
    site = generated_site("a.test", 400, fanout=4)
    titles = {
        f"http://a.test{path}": re.search(rb"<title>(.*?)</title>", site[path].body)[1].decode()
        for path in site
    }
    lines = (tmp_path / "output" / "titles.txt").read_text(encoding="utf-8").splitlines()
    assert dict(line.split("\t") for line in lines) == titles


def test_adding_a_site_and_resuming_crawls_it_too(serve, tmp_path, crawler):
    server = serve({"a.test": generated_site("a.test", 30, fanout=4),
                    "b.test": generated_site("b.test", 20, fanout=4)})  # fmt: skip
    first = crawler.settings_file(["a.test"], server.resolve)
    assert run(first).returncode == 0
    second = crawler.settings_file(["a.test", "b.test"], server.resolve)
    assert run(second).returncode == 0
    assert len(read_graph(tmp_path / "output")[0]) == 30
    assert Counter(h.path for h in server.hits_for("a.test")).most_common(1)[0][1] == 1
    assert len(server.hits_for("b.test")) == 21  # its pages and robots.txt


def test_an_unwritable_state_dir_is_a_clear_error(tmp_path):
    # On SQLite: no crawl starts, so the backend makes no difference here.
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    runner = CrawlRunner(tmp_path)
    config = runner.settings_file(["a.test"], {}, state_dir=str(blocker / "state"))
    result = run(config)
    assert result.returncode == 2
    # Found while the settings are checked, before anything is written.
    assert "bad config: state_dir:" in result.stderr and "is not a directory" in result.stderr
    assert "Traceback" not in result.stderr


@contextlib.contextmanager
def tmpfs(folder: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on ``folder`` for the block (root only, else skip)."""
    folder.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                             capture_output=True)  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr!r}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


@pytest.fixture
def tiny_disk(tmp_path):
    """A 1 MiB tmpfs, so the state can really run out of space."""
    with tmpfs(tmp_path / "tiny", "1m") as folder:
        yield folder


def test_a_full_disk_is_a_clear_error_and_the_state_stays_consistent(serve, tmp_path, tiny_disk):
    # SQLite only: the state file fills a tmpfs (PostgreSQL's disk is not ours to fill).
    # Pages of ~20 KB each: their bodies wait in the state until parsed, so 1 MiB fills up.
    pages = {f"/p{i}": Resource(b"<html>" + bytes([65 + i % 26]) * 20_000 + b"</html>")
             for i in range(400)}  # fmt: skip
    pages["/"] = Resource(("".join(f'<a href="/p{i}">{i}</a>' for i in range(400))).encode())
    server = serve({"a.test": pages})
    runner = CrawlRunner(tmp_path)
    config = runner.settings_file(["a.test"], server.resolve, state_dir=str(tiny_disk / "state"),
                                  threads={"downloading": 8, "parsing": 1})  # fmt: skip
    result = run(config)
    assert result.returncode == 2, result.stderr
    assert "cannot write the crawl state" in result.stderr
    assert "full" in result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    with contextlib.closing(sqlite3.connect(tiny_disk / "state" / "crawl.sqlite3")) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        done = db.execute("SELECT count(*) FROM pages WHERE state = 'done'").fetchone()[0]
    assert done >= 1


def test_a_second_interrupt_stops_at_once_and_the_state_still_resumes(serve, tmp_path, crawler):
    # Slow answers keep downloads in flight, so the first SIGINT has to wait for them.
    site = {path: Resource(res.body, delay=0.5)
            for path, res in generated_site("a.test", 40, fanout=6).items()}  # fmt: skip
    server = serve({"a.test": site})
    config = crawler.settings_file(["a.test"], server.resolve, crawl={"timeout_s": 30})
    proc = spawn(config)
    wait_for_hits(server, 4, proc)
    # Two signals sent back to back may reach Python's handler as one, and nothing tells
    # when the first was handled: interrupt until the process is gone. A clean stop waits
    # for the 0.5 s answers in flight, so only a second interrupt handled ends it at once.
    deadline = time.monotonic() + 20
    while proc.poll() is None and time.monotonic() < deadline:
        proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=0.05)
    proc.communicate(timeout=20)
    assert proc.returncode == 130
    final = run(config)  # about 5 s of requests; run()'s bound holds on a busy machine
    assert final.returncode == 0, final.stderr
    assert len(read_graph(tmp_path / "output")[0]) == 40


def test_a_state_on_a_read_only_disk_can_still_be_read(serve, tmp_path):
    """status, search and words read a state they cannot write (SQLite mode=ro), on a
    tmpfs remounted read-only (root only: root writes through file modes)."""
    with tmpfs(tmp_path / "ro", "16m") as folder:
        server = serve({"a.test": {
            "/": Resource(b"<title>Zebra home</title><a href='/b'>b</a>"),
            "/b": Resource(b"<title>Okapi page</title><p>okapi forest</p>"),
        }})  # fmt: skip
        runner = CrawlRunner(folder)
        config = runner.settings_file(["a.test"], server.resolve,
                                      manager="plugins.search.SearchManager")  # fmt: skip
        copy = tmp_path / "settings.yaml"
        copy.write_text(config.read_text())  # the settings stay readable elsewhere
        assert run(copy).returncode == 0
        remount = subprocess.run(["mount", "-o", "remount,ro", str(folder)], capture_output=True)
        assert remount.returncode == 0, remount.stderr
        status = run(copy, "status", "--json")
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["sites"][0]["done"] == 2
        found = run(copy, "search", "okapi", "--json")
        assert found.returncode == 0, found.stderr
        assert [json.loads(line)["url"] for line in found.stdout.splitlines()] == [
            "http://a.test/b"
        ]
        words = run(copy, "words", "zeb")
        assert words.returncode == 0 and "zebra" in words.stdout, words.stderr
