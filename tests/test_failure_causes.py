"""Errors that say what happened (issue 39): a failed site's last line and report.json
name the cause, a task's command without its crawl says what it needs, a mistyped key
gets the closest one, an unwritable output folder is found before the first request,
and the running counts and an export of a stopped crawl say what is really going on.

Each test runs ``python -m rccrawler`` against the loopback test server."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.sites import generated_site
from webserver import Resource, has_openssl, make_tls_context

RUN_TIMEOUT = 120
"""Only a guard against a hung command; no test asserts how fast anything is."""


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rccrawler", *args], capture_output=True,
                          text=True, timeout=RUN_TIMEOUT, cwd=cwd)  # fmt: skip


def write_settings(folder: Path, sites: list[str], resolve: dict[str, str], **keys: Any) -> Path:
    crawl = {"crawl_delay_ms": 0, "timeout_s": 5, "max_download_attempts": 1, "sitemaps": False,
             "resolve": resolve, **keys.pop("crawl", {})}  # fmt: skip
    settings = {"sites": sites, "state_dir": "state", "output_dir": "out",
                "threads": {"downloading": 2, "parsing": 1}, "crawl": crawl, **keys}  # fmt: skip
    path = folder / "settings.yaml"
    path.write_text(yaml.safe_dump(settings), encoding="utf-8")
    return path


def closed_port() -> int:
    """A loopback port nobody listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def failure_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("rccrawler:")]
    assert len(lines) == 1, stderr
    return lines[0]


# -- the cause of a failed site -------------------------------------------------------------


def test_an_unresolvable_a_refused_and_a_503_site_each_end_with_their_cause(serve, tmp_path):
    server = serve({"ok.test": {"/": Resource(b"<title>fine</title>")},
                    "busy.test": {"/robots.txt": Resource(b"down", 503)}})  # fmt: skip
    # A typo'd host (no DNS name: .invalid never resolves) and a server that is down.
    resolve = {**server.resolve, "down.test:80": f"127.0.0.1:{closed_port()}"}
    sites = ["ok.test", "busy.test", "down.test", "no-such-host.invalid"]
    write_settings(tmp_path, sites, resolve)
    proc = cli("--config", "settings.yaml", "--no-tui", "-q", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    line = failure_line(proc.stderr)
    assert line.startswith("rccrawler: 3 of 4 sites failed, nothing fetched: "), line
    assert "no-such-host.invalid (robots.txt unreachable (dns))" in line
    assert "down.test (robots.txt unreachable (connection refused))" in line
    assert "busy.test (robots.txt unavailable (HTTP 503))" in line
    assert "ok.test" not in line
    report = json.loads((tmp_path / "out" / "report.json").read_text())["sites"]
    assert report["no-such-host.invalid"]["stop_reason"] == "robots.txt unreachable (dns)"
    assert report["down.test"]["stop_reason"] == "robots.txt unreachable (connection refused)"
    assert report["busy.test"]["stop_reason"] == "robots.txt unavailable (HTTP 503)"
    assert report["ok.test"]["stop_reason"] == "no waiting links left"
    assert sorted(server.paths_for("busy.test")) == ["/robots.txt"]  # nothing else asked


def test_a_site_whose_every_page_failed_says_why_without_robots(serve, tmp_path):
    # Without robots.txt the pages fail themselves: the cause is theirs.
    resolve = {"down.test:80": f"127.0.0.1:{closed_port()}"}
    write_settings(tmp_path, ["down.test", "no-such-host.invalid"], resolve,
                   crawl={"obey_robots": False})  # fmt: skip
    proc = cli("--config", "settings.yaml", "--no-tui", "-q", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    line = failure_line(proc.stderr)
    assert "down.test (connection refused)" in line and "no-such-host.invalid (dns)" in line
    report = json.loads((tmp_path / "out" / "report.json").read_text())["sites"]
    assert report["down.test"]["stop_reason"] == "nothing fetched (connection refused)"
    assert report["no-such-host.invalid"]["stop_reason"] == "nothing fetched (dns)"


@pytest.mark.skipif(not has_openssl(), reason="needs the openssl command")
def test_a_site_whose_certificate_fails_says_tls(serve, tmp_path):
    context, _cert = make_tls_context(tmp_path, ("s.test",))
    server = serve({"s.test": {"/": Resource(b"<title>secret</title>")}}, ssl_context=context)
    write_settings(tmp_path, ["https://s.test/"], server.resolve)
    proc = cli("--config", "settings.yaml", "--no-tui", "-q", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "s.test (tls)" in failure_line(proc.stderr)
    report = json.loads((tmp_path / "out" / "report.json").read_text())["sites"]
    assert report["s.test"]["stop_reason"] == "nothing fetched (tls)"


# -- a task's command without its crawl, a mistyped key -------------------------------------


def test_serve_and_search_help_without_a_crawl_say_which_tasks_add_them(tmp_path):
    serve = cli("serve", "--help", cwd=tmp_path)
    assert serve.returncode == 2, serve.stdout
    assert "invalid choice" not in serve.stderr
    assert len(serve.stderr.strip().splitlines()) == 1
    assert "plugins.webgraph.WebGraphManager" in serve.stderr
    assert "plugins.search.SearchManager" in serve.stderr
    assert "--config FILE" in serve.stderr
    search = cli("search", "--help", cwd=tmp_path)
    assert search.returncode == 2
    assert "plugins.search.SearchManager" in search.stderr
    assert "WebGraphManager" not in search.stderr and "--config FILE" in search.stderr
    # A command no task has is still a typo.
    typo = cli("serch", cwd=tmp_path)
    assert typo.returncode == 2 and "invalid choice: 'serch'" in typo.stderr


def test_every_shipped_task_with_commands_is_known_to_the_help():
    from rccrawler.commands.main import SHIPPED_TASKS
    from rccrawler.loading import dotted_path
    from rccrawler.manager import ApplicationManager

    plugins = Path(__file__).parent.parent / "plugins"
    named = set()
    for package in sorted(p.name for p in plugins.iterdir() if (p / "__init__.py").exists()):
        module = __import__(f"plugins.{package}", fromlist=["*"])
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, ApplicationManager):
                named.add(f"plugins.{package}.{value.__name__}")
                assert value.commands or dotted_path(value)  # every task is a manager
    assert set(SHIPPED_TASKS) == named


def test_a_mistyped_key_gets_the_closest_known_one(tmp_path):
    quick = cli("crawl", "http://a.test/", "-s", "crawl.crawl_delay=0", cwd=tmp_path)
    assert quick.returncode == 2
    assert quick.stderr.strip() == (
        "rccrawler: bad config: crawl.crawl_delay: unknown key; did you mean crawl.crawl_delay_ms?"
    )
    # A crawl key written at the top level is found in its section.
    write_settings(tmp_path, ["a.test"], {}, crawl_delay_ms=0)
    top = cli("--config", "settings.yaml", cwd=tmp_path)
    assert top.returncode == 2
    assert "crawl_delay_ms: unknown key; did you mean crawl.crawl_delay_ms?" in top.stderr
    # Nothing close: the known keys are listed.
    far = cli("crawl", "http://a.test/", "-s", "threads.zzzz=1", cwd=tmp_path)
    assert far.returncode == 2 and "unknown key (known: downloading, parsing" in far.stderr
    assert not any(tmp_path.glob("rccrawler-*"))  # nothing written


def test_an_unwritable_output_dir_exits_2_before_any_request(serve, tmp_path):
    server = serve({"a.test": {"/": Resource(b"<title>home</title>")}})
    # /proc: even root "may write" there (os.access says so), yet nothing can be created.
    write_settings(tmp_path, ["a.test"], server.resolve, output_dir="/proc/nope")
    proc = cli("--config", "settings.yaml", "--no-tui", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "rccrawler: bad config: output_dir: cannot write /proc/nope: No such file or directory"
    ]
    assert server.hits == []
    assert not (tmp_path / "state").exists()  # the state_dir made for it was taken back


def test_workers_starting_at_once_make_their_folders_without_refusing_each_other(tmp_path):
    """Workers of a shared crawl started together probe the same new state_dir and
    output_dir: one making a folder the other was about to make is no failure."""
    import threading

    from rccrawler.config import check_writable_dirs, settings_from_mapping

    failures: list[BaseException] = []
    for round_ in range(40):
        base = tmp_path / f"r{round_}" / "deep"
        settings = settings_from_mapping({"sites": ["a.test"], "state_dir": str(base / "state"),
                                          "output_dir": str(base / "out")})  # fmt: skip
        start = threading.Barrier(6)

        def probe(settings: Any = settings, start: threading.Barrier = start) -> None:
            start.wait(timeout=30)
            try:
                check_writable_dirs(settings)
            except BaseException as exc:  # the assert below names it
                failures.append(exc)

        threads = [threading.Thread(target=probe) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert (base / "state").is_dir() and (base / "out").is_dir()
    assert failures == []


# -- what is going on ----------------------------------------------------------------------


def test_status_never_shows_more_requests_than_a_host_allows(serve, tmp_path):
    site = generated_site("a.test", 120, fanout=4)
    slow = {path: Resource(res.body, res.status, res.headers, delay=0.05)
            for path, res in site.items()}  # fmt: skip
    server = serve({"a.test": slow, "b.test": generated_site("b.test", 60, fanout=4)})
    one_at_a_time = {"max_downloads_at_time": 1}
    write_settings(tmp_path, ["a.test", "b.test"], server.resolve, crawl=one_at_a_time,
                   threads={"downloading": 4, "parsing": 1})  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-m", "rccrawler", "--config", "settings.yaml",
                             "--no-tui", "-q"], cwd=tmp_path, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    seen: list[dict[str, Any]] = []
    try:
        assert server.wait_for_hits(10, timeout=RUN_TIMEOUT, alive=lambda: proc.poll() is None)
        while proc.poll() is None and len(seen) < 5:
            status = cli("status", "--config", "settings.yaml", "--json", cwd=tmp_path)
            if status.returncode == 0:
                seen += json.loads(status.stdout)["sites"]
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=RUN_TIMEOUT)
    assert seen
    assert all(0 <= row["running"] <= 1 and row["parsing"] >= 0 for row in seen), seen
    assert max(server.peak_in_flight.values()) == 1


def test_export_of_a_stopped_crawl_lists_its_queue_as_waiting(serve, tmp_path):
    server = serve({"a.test": generated_site("a.test", 400, fanout=8)})
    write_settings(tmp_path, ["a.test"], server.resolve, crawl={"crawl_delay_ms": 20})
    proc = subprocess.Popen([sys.executable, "-m", "rccrawler", "--config", "settings.yaml",
                             "--no-tui", "-q"], cwd=tmp_path, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        assert server.wait_for_hits(20, timeout=RUN_TIMEOUT, alive=lambda: proc.poll() is None)
        assert cli("stop", "--config", "settings.yaml", cwd=tmp_path).returncode == 0
        out, err = proc.communicate(timeout=RUN_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=RUN_TIMEOUT)
    assert "stopped" in out, err
    status = json.loads(cli("status", "--config", "settings.yaml", "--json", cwd=tmp_path).stdout)
    waiting = status["sites"][0]["waiting"]
    assert waiting > 0
    assert cli("export", "--config", "settings.yaml", cwd=tmp_path).returncode == 0
    rows = (tmp_path / "out" / "a.test.skipped.csv").read_text().splitlines()[1:]
    reasons = [row.split(",")[1] for row in rows]
    assert "budget" not in reasons  # no max_pages: nothing was held back by a budget
    assert reasons.count("waiting") == waiting
    assert re.search(r"^http://a\.test/\S*,waiting,", "\n".join(rows), re.M)
