"""The live status view on a terminal, plain log lines elsewhere, and the report at the end.

The end-to-end tests run ``rccrawler`` as a user does: in a pseudo-terminal (read back
through the ``pyte`` terminal emulator, since the view redraws in place) or with stdout piped.
The unit tests render the view to a ``Console(StringIO)`` with a hand-moved clock.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections import ChainMap

import pyte
import pytest
import yaml
from rich.console import Console
from support.sites import generated_site, page_path
from support.terminal import TerminalSession, screen_text, strip_ansi
from webserver import Resource, redirect

from rccrawler.records import CrawlStats, HostStats
from rccrawler.threads.routine import RoutineThread
from rccrawler.ui.status import StatusView, WarningBuffer, print_report, shorten_middle

HOSTS = ("a.test", "b.test", "c.test")
PAGES = 60
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ")
RUN_TIMEOUT = 120
"""Only a guard against a hung crawl; no test asserts how fast anything is."""


def three_sites():
    """Three sites of PAGES pages; b.test has a redirect loop and c.test a failing page,
    so the warnings panel has something to show."""
    return {
        "a.test": generated_site("a.test", PAGES),
        "b.test": ChainMap({page_path(7): redirect(page_path(7))}, generated_site("b.test", PAGES)),
        "c.test": ChainMap({page_path(9): Resource(b"down", 503)}, generated_site("c.test", PAGES)),
    }


def write_settings(tmp_path, resolve) -> str:
    settings = {
        "sites": list(HOSTS),
        "state_dir": str(tmp_path / "state"),
        "output_dir": str(tmp_path / "out"),
        "threads": {"downloading": 4, "parsing": 2},
        "crawl": {
            "crawl_delay_ms": 30,  # about 2 s per site: time for several frames
            "max_downloads_at_time": 2,
            "timeout_s": 10,
            "max_download_attempts": 2,
            "resolve": resolve,
        },
    }
    path = tmp_path / "settings.yaml"
    path.write_text(yaml.safe_dump(settings), encoding="utf-8")
    return str(path)


def child_env() -> dict[str, str]:
    """The environment of a user's shell: no colour or terminal overrides from CI."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE",
                        "COLUMNS", "LINES", "TERM")}  # fmt: skip
    env["TERM"] = "xterm-256color"
    return env


def done_count(screen: str, host: str) -> int | None:
    """The "done" figure of ``host``'s row on a captured screen, if the row is there."""
    match = re.search(rf"^{re.escape(host)}\s+([\d,]+)\s+[\d,]+\s+[\d,]+", screen, re.MULTILINE)
    return int(match.group(1).replace(",", "")) if match else None


def watch(session: TerminalSession, until=lambda screen: False) -> list[str]:
    """Screens captured every 50 ms while the crawl runs (or until ``until`` holds)."""
    screens = []
    deadline = time.monotonic() + RUN_TIMEOUT
    while session.process.poll() is None and time.monotonic() < deadline:
        screen = session.display()
        if not screens or screen != screens[-1]:
            screens.append(screen)
        if until(screen):
            break
        time.sleep(0.05)
    return screens


# -- end to end ------------------------------------------------------------------


def test_live_view_in_a_terminal_shows_sites_counts_and_the_report(serve, tmp_path):
    server = serve(three_sites())
    config = write_settings(tmp_path, server.resolve)
    log_file = tmp_path / "crawl.log"
    session = TerminalSession(
        [sys.executable, "-m", "rccrawler", "--config", config, "--log-file", str(log_file)],
        width=120, height=40, env=child_env(), cwd=tmp_path,
    )  # fmt: skip
    try:
        screens = watch(session)
        code = session.wait(RUN_TIMEOUT)
    finally:
        session.kill()
    final = session.display()
    assert code == 0, final

    # While it ran: a row per site, with counts that grew from one capture to a later one.
    running = [s for s in screens if "crawling" in s and all(done_count(s, h) is not None
                                                            for h in HOSTS)]  # fmt: skip
    assert running, "no capture of the view while the crawl ran:\n" + "\n---\n".join(screens)
    assert "pages/s" in running[0] and "MB/s" in running[0]
    assert re.search(r"downloading \d+/4 busy, \d+ idle", running[0])
    assert re.search(r"parsing \d+/2 busy, \d+ idle", running[0])
    assert "elapsed" in running[0] and "ETA" in running[0]
    progress = [done_count(s, "a.test") for s in screens if done_count(s, "a.test") is not None]
    assert progress == sorted(progress), progress  # counts never go back
    assert progress[0] < progress[-1], progress
    assert any(done_count(s, "a.test") < PAGES for s in running)

    # At the end: the last frame (every site stopped, with why), the warnings, the report.
    last_frame, _, report = final.partition("information retrieval report")
    assert report, final
    assert "0 crawling, 3 finished" in last_frame
    for host in HOSTS:
        assert re.search(rf"^{re.escape(host)} .* no waiting links left", last_frame, re.M)
    assert done_count(last_frame, "a.test") == PAGES
    assert "redirect_loop" in last_frame and "http_503" in last_frame  # recent warnings
    for host, pages, kinds in (("a.test", PAGES, "-"), ("b.test", PAGES - 1, "redirect_loop 1"),
                               ("c.test", PAGES - 1, "http_503 1")):  # fmt: skip
        assert re.search(rf"^\s*{re.escape(host)}\s+{pages}\s.*{re.escape(kinds)}", report, re.M)
    assert f"results in {tmp_path / 'out'}" in report.replace("\n", "")

    # Log lines went to the log file, not over the view.
    raw = strip_ansi(session.raw)
    assert "progress:" not in raw and " INFO " not in raw
    log = log_file.read_text(encoding="utf-8")
    assert "site a.test finished: no waiting links left" in log
    assert "b.test: 1 page failed with redirect_loop" in log


def test_first_ctrl_c_stops_the_live_view_cleanly(serve, tmp_path):
    server = serve(three_sites())
    config = write_settings(tmp_path, server.resolve)
    session = TerminalSession([sys.executable, "-m", "rccrawler", "--config", config],
                              env=child_env(), cwd=tmp_path)  # fmt: skip
    try:
        watch(session, until=lambda screen: (done_count(screen, "a.test") or 0) > 5)
        session.process.send_signal(signal.SIGINT)
        code = session.wait(RUN_TIMEOUT)
    finally:
        session.kill()
    screen = session.display()
    assert code == 0, screen
    assert screen.rstrip().endswith("stopped: run the same command to resume"), screen
    assert "information retrieval report" not in screen
    # The cursor the view hid is shown again.
    assert session.raw.rfind("\x1b[?25h") > session.raw.rfind("\x1b[?25l")


def test_no_tui_on_a_terminal_gives_plain_lines(serve, tmp_path):
    server = serve(three_sites())
    config = write_settings(tmp_path, server.resolve)
    session = TerminalSession([sys.executable, "-m", "rccrawler", "--config", config, "--no-tui"],
                              env=child_env(), cwd=tmp_path)  # fmt: skip
    try:
        code = session.wait(RUN_TIMEOUT)
    finally:
        session.kill()
    output = strip_ansi(session.raw)
    assert code == 0, output
    assert "information retrieval report" not in output and "pages/s  " not in output
    assert re.search(r"^\S+ \S+ INFO +\S+: site a\.test finished", output, re.M), output
    assert f"a.test: {PAGES} pages, 0 errors" in output


PLAIN_RUNNER = """
import sys
from rccrawler.threads.routine import RoutineThread
RoutineThread.progress_every = 0.3  # the default 5 s would need a longer crawl
from rccrawler.commands.main import main
sys.exit(main(sys.argv[1:]))
"""


def test_plain_log_lines_when_stdout_is_a_pipe(serve, tmp_path):
    server = serve(three_sites())
    config = write_settings(tmp_path, server.resolve)
    proc = subprocess.run(
        [sys.executable, "-c", PLAIN_RUNNER, "--config", config],
        capture_output=True, text=True,  # stdout and stderr are pipes
        timeout=RUN_TIMEOUT, cwd=tmp_path, env=child_env(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "\x1b" not in proc.stderr
    log = proc.stderr.splitlines()
    assert log and all(TIMESTAMP.match(line) for line in log), proc.stderr
    progress = [line for line in log if "progress:" in line]
    assert progress, proc.stderr
    assert re.search(r"progress: \d+ done, \d+ duplicates, \d+ queued, \d+ errors, \d/3 sites "
                     r"crawling, "
                     r"[\d.]+ pages/s, [\d.]+ MB/s", progress[0])  # fmt: skip
    assert any("WARNING" in line and "b.test: 1 page failed with redirect_loop" in line
               for line in log)  # fmt: skip
    assert f"a.test: {PAGES} pages, 0 errors, 0 duplicates" in proc.stdout
    assert f"b.test: {PAGES - 1} pages, 1 errors" in proc.stdout
    assert "results in" in proc.stdout
    assert "information retrieval report" not in proc.stdout


# -- the view, rendered ----------------------------------------------------------


class MockClock:
    """A clock that is manually advanced."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def host(name: str, **counts) -> HostStats:
    return HostStats(host=name, robots_state="ready", crawl_delay=0.5, **counts)


def snapshot(*hosts: HostStats, downloading: int = 0, parsing: int = 0) -> CrawlStats:
    return CrawlStats(
        hosts=hosts,
        pages_done=sum(h.done + h.duplicates for h in hosts),
        bytes=sum(h.bytes for h in hosts),
        downloading=downloading,
        parsing=parsing,
    )


def render(view: StatusView, width: int = 110, height: int = 40) -> str:
    console = Console(file=io.StringIO(), width=width, height=height, color_system=None)
    console.print(view)
    return console.file.getvalue()


def test_rates_are_measured_over_the_last_ten_seconds():
    clock = MockClock()
    view = StatusView(downloading_threads=8, parsing_threads=2, clock=clock)
    for second in range(31):
        view.update(snapshot(host("a.test", done=second * second, bytes=second * 2_000_000,
                                  waiting=50)))  # fmt: skip
        clock.now += 1
    screen = render(view)
    # Between seconds 20 and 30: (900 - 400) pages and 20 MB in 10 s.
    assert "50.0 pages/s  2.00 MB/s  (last 10 s)" in screen


def test_threads_busy_and_idle_eta_and_stop_reasons():
    clock = MockClock()
    view = StatusView(downloading_threads=8, parsing_threads=2, clock=clock)
    view.update(
        snapshot(
            host("a.test", done=0, waiting=100, budget_hit=True),
            host("b.test", done=7, stop_reason="robots.txt unavailable (HTTP 503)"),
        )
    )
    clock.now += 10
    view.update(snapshot(host("a.test", done=50, waiting=40, running=3, budget_hit=True),
                         host("b.test", done=7, stop_reason="robots.txt unavailable (HTTP 503)"),
                         downloading=3, parsing=1))  # fmt: skip
    screen = render(view, width=120)  # the stop reason whole, beside the parsing column
    assert "downloading 3/8 busy, 5 idle" in screen
    assert "parsing 1/2 busy, 1 idle" in screen
    # 43 pages left at 5 pages/s take 9 s, but 40 waiting at one request per 0.5 s take
    # 20 s; and no new page can join a site at its budget, so it is an estimate.
    assert "ETA ~0:00:20" in screen
    assert re.search(r"^b\.test .* robots\.txt unavailable \(HTTP 503\)", screen, re.M)
    assert re.search(r"^a\.test\s+50\s+40\s+3\s+0\s+0\s+0\s+500ms .* 53%\s+crawling", screen,
                     re.M)  # fmt: skip


def test_running_counts_requests_in_flight_and_parsing_has_its_own_column():
    """A site with one download at a time shows running 1 at most: the pages downloaded
    and waiting for (or in) a parser are in the parsing column, not in running."""
    view = StatusView(downloading_threads=4, parsing_threads=2, clock=MockClock())
    # 3 leased pages: 1 request in flight, 2 being parsed; 4 more downloaded, waiting.
    view.update(snapshot(host("a.test", done=7, waiting=5, running=3, parsing=2, downloaded=4)))
    screen = render(view)
    assert re.search(r"^\s*site\s+done\s+waiting\s+running\s+parsing\s+errors\s+dups", screen,
                     re.M), screen  # fmt: skip
    assert re.search(r"^a\.test\s+7\s+5\s+1\s+6\s+0\s+0\s", screen, re.M), screen


def test_an_automatic_pool_shows_its_size_and_work_after_the_crawl_its_progress():
    clock = MockClock()
    view = StatusView(downloading_threads=0, parsing_threads=2, clock=clock)  # auto
    stats = snapshot(host("a.test", done=5, waiting=100, running=40), downloading=40)
    view.update(dataclasses.replace(stats, downloading_threads=57))
    assert "downloading 40/57 busy, 17 idle" in render(view)
    view.progress("external links checked", 120, 807)
    assert "external links checked  120 of 807" in render(view)
    view.progress("external links checked", 807, 807)
    assert "external links checked  807 of 807 (done)" in render(view)


def test_eta_is_a_lower_bound_while_links_are_still_found():
    clock = MockClock()
    view = StatusView(downloading_threads=1, parsing_threads=1, clock=clock)
    view.update(snapshot(host("a.test", done=0, waiting=10)))
    clock.now += 10
    view.update(snapshot(host("a.test", done=10, waiting=100)))
    # 100 waiting at 1 page/s, and never faster than one request per 0.5 s.
    assert "ETA ≥ 0:01:40" in render(view)


def test_many_sites_show_failing_and_busiest_first_and_sum_up_the_rest():
    clock = MockClock()
    view = StatusView(downloading_threads=8, parsing_threads=2, clock=clock)

    def sites(t: int) -> list[HostStats]:
        hosts = [host(f"idle{i:03}.test", waiting=10, done=t) for i in range(120)]
        hosts[60] = host("busy.test", waiting=10, done=30 * t, running=2)
        hosts[90] = host("failing.test", waiting=10, done=t, errors=3 * t)
        hosts[100] = host("over.test", done=5, stop_reason="no waiting links left")
        return hosts

    view.update(snapshot(*sites(0)))
    clock.now += 5
    view.update(snapshot(*sites(1)))
    screen = render(view, height=30)
    rows = [line.split()[0] for line in screen.splitlines()[3:] if line.strip()]
    assert rows[:2] == ["failing.test", "busy.test"]
    assert "over.test" not in screen
    assert len(screen.splitlines()) <= 30
    summed = re.search(r"^\+ (\d+) more sites\s+([\d,]+)\s+([\d,]+)", screen, re.M)
    assert summed, screen
    shown = sum(1 for line in screen.splitlines() if re.match(r"^(idle|busy|failing)", line))
    assert int(summed.group(1)) == 120 - shown
    total = re.search(r"^total\s+([\d,]+)\s+([\d,]+)", screen, re.M)
    assert total and int(total.group(2).replace(",", "")) == 119 * 10
    assert "119 crawling, 1 finished" in screen


def test_few_sites_keep_the_order_of_the_settings():
    clock = MockClock()
    view = StatusView(downloading_threads=2, parsing_threads=1, clock=clock)
    view.update(snapshot(host("z.test", waiting=5), host("a.test", waiting=5, errors=9)))
    screen = render(view)
    assert screen.index("z.test") < screen.index("a.test")


def test_the_warnings_panel_keeps_the_last_few():
    buffer = WarningBuffer(capacity=3)
    logger = logging.getLogger("rccrawler.test_status_view")
    logger.addHandler(buffer)
    try:
        for n in range(6):
            logger.warning("trouble %d\nsecond line", n)
        logger.info("not a warning")
    finally:
        logger.removeHandler(buffer)
    assert [message for _t, _level, message in buffer.recent()] == [
        "trouble 3", "trouble 4", "trouble 5"
    ]  # fmt: skip
    view = StatusView(downloading_threads=1, parsing_threads=1, warnings=buffer)
    view.update(snapshot(host("a.test", waiting=1)))
    screen = render(view)
    assert "recent warnings" in screen and "trouble 5" in screen and "trouble 2" not in screen


def test_start_and_stop_are_idempotent_and_give_logging_back():
    out = io.StringIO()
    view = StatusView(downloading_threads=1, parsing_threads=1,
                      console=Console(file=out, force_terminal=True, width=100))  # fmt: skip
    root = logging.getLogger()
    view.stop()  # before start: nothing to do
    view.start()
    view.start()
    assert view.warnings in root.handlers
    view.update(snapshot(host("a.test", done=3, waiting=1)))
    view.stop()
    view.stop()
    assert view.warnings not in root.handlers and not view.running
    assert "a.test" in strip_ansi(out.getvalue())


def test_report_table_has_every_figure_of_report_json():
    report = {
        "finished": True, "stop_reason": "finished", "bytes": 5_300_000, "elapsed_s": 12.5,
        "sites": {
            "a.test": {"pages_done": 1200, "errors": 3, "errors_by_kind": {"timeout": 2,
                       "http_404": 1}, "duplicates": 4, "skipped": 5, "bytes": 5_000_000,
                       "elapsed_s": 12.0, "stop_reason": "no waiting links left"},
            "b.test": {"pages_done": 0, "errors": 0, "errors_by_kind": {}, "duplicates": 0,
                       "skipped": 1, "bytes": 300_000, "elapsed_s": 0.4,
                       "stop_reason": "robots.txt unavailable (HTTP 503)"},
        },
    }  # fmt: skip
    console = Console(file=io.StringIO(), width=140, color_system=None)
    print_report(report, "out/x", console=console)
    text = console.file.getvalue()
    assert "information retrieval report" in text
    assert re.search(r"a\.test\s+1,200\s+3\s+4\s+5\s+http_404 1, timeout 2\s+5\.0 MB\s+12\.0 s\s+"
                     r"no waiting links left", text)  # fmt: skip
    assert re.search(r"b\.test\s+0\s+0\s+0\s+1\s+-\s+300\.0 kB\s+0\.4 s\s+robots\.txt", text)
    assert re.search(r"^total\s+1,200\s+3\s+4\s+6\s+5\.3 MB\s+12\.5 s\s+finished", text, re.M)
    assert "results in out/x" in text


# -- the routine thread and the screen reading ------------------------------------


def test_routine_thread_warns_once_per_new_error_and_not_for_old_ones(caplog):
    routine = RoutineThread.__new__(RoutineThread)  # only the bookkeeping, no crawl
    routine._errors_seen = None
    before = snapshot(host("a.test", errors=2, errors_by_kind=(("timeout", 2),)))
    after = snapshot(host("a.test", errors=6, errors_by_kind=(("http_404", 1), ("timeout", 5))))
    with caplog.at_level(logging.WARNING, logger="rccrawler.threads.routine"):
        routine.warn_new_errors(before)  # a resumed crawl's old errors: the baseline
        routine.warn_new_errors(after)
        routine.warn_new_errors(after)
    assert [r.getMessage() for r in caplog.records] == [
        "a.test: 3 pages failed with timeout (5 so far)"
    ]  # a 404 is a broken link: counted, not announced


@pytest.mark.parametrize(
    ("data", "screen"),
    [
        (b"abc\r\nxyz", "abc\nxyz"),
        (b"one\r\ntwo\r\n\x1b[2K\x1b[1A\x1b[2K\x1b[1A\x1b[2Kuno\r\ndos\r\n", "uno\ndos"),
        (b"\x1b[1;31mred\x1b[0m text\rR", "Red text"),
        (b"abcdef\r\x1b[3C\x1b[K", "abc"),
        (b"one\r\n\r\nthree\r\n4\r\n5\r\n6", "\nthree\n4\n5\n6"),  # "one" scrolled off
    ],
)
def test_screen_text(data, screen):
    """The moves the live view redraws with, read back as the tests read the window."""
    terminal = pyte.Screen(20, 5)
    pyte.ByteStream(terminal).feed(data)
    assert screen_text(terminal) == screen


def test_hosts_stay_readable_at_80_columns():
    """Hosts that differ only by port, or only at their ends, stay apart on a narrow
    terminal: the middle gives way, the port stays whole."""
    view = StatusView(downloading_threads=4, parsing_threads=2, clock=MockClock())
    long = "very-long-subdomain.example.org:8443"
    names = ("127.0.0.1:8081", "127.0.0.1:8082", f"one.{long}", f"two.{long}")
    view.update(snapshot(*(host(name, done=5, waiting=3) for name in names)))
    screen = render(view, width=80)
    assert all(len(line) <= 80 for line in screen.splitlines())
    rows = [line.split()[0] for line in screen.splitlines()[3:7]]
    assert rows[:2] == ["127.0.0.1:8081", "127.0.0.1:8082"]
    assert rows[2] != rows[3] and all(row.endswith(":8443") and "…" in row for row in rows[2:])
    assert rows[2].startswith("one") and rows[3].startswith("two")


def test_shorten_middle_keeps_the_port():
    assert shorten_middle("a.test", 10) == "a.test"
    assert shorten_middle("docs.example.org:8080", 12) == "doc…org:8080"
    assert len(shorten_middle("docs.example.org:8080", 12)) == 12
    assert shorten_middle("docs.example.org", 9) == "docs….org"


def test_pages_per_second_after_a_resume_counts_only_this_run(caplog):
    routine = RoutineThread.__new__(RoutineThread)  # only the bookkeeping, no crawl
    routine._errors_seen = None
    routine._last_progress = 100.0
    routine.take_baseline(snapshot(host("a.test", done=500, bytes=5_000_000)))  # earlier runs
    with caplog.at_level(logging.INFO, logger="rccrawler.threads.routine"):
        routine.log_progress(snapshot(host("a.test", done=550, bytes=6_000_000)), now=110.0)
    [line] = [r.getMessage() for r in caplog.records]
    assert "550 done, 0 duplicates" in line and "5.0 pages/s, 0.10 MB/s" in line
