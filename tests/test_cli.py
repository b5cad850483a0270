"""The command line as a user meets it: each test runs ``python -m rccrawler`` in a
subprocess against the loopback test server and reads what it printed and wrote."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from crawling import RUN_TIMEOUT, cli, command, running, wait_until
from support.sites import generated_site
from webserver import Resource, redirect

from rccrawler import __version__
from rccrawler.data.runlog import RunLog

OWN_FILES = ("a.test.nodes.csv", "a.test.arcs.csv", "a.test.graphml", "a.test.skipped.csv",
             "report.json", "report.html")  # fmt: skip


def wait_for(condition: Callable[[], bool], proc: subprocess.Popen[str] | None = None) -> None:
    """Wait (bounded) until ``condition()`` holds; fail if the crawl ended first."""

    def held() -> bool:
        assert proc is None or proc.poll() is None, "the crawl ended too soon"
        return condition()

    assert wait_until(held, RUN_TIMEOUT, interval=0.02), "timed out"


def write_settings(folder: Path, server: Any, **keys: Any) -> Path:
    """settings.yaml in ``folder`` for the sites of ``server`` (state and output in the
    folder unless ``keys`` say otherwise)."""
    # No sitemaps: the tests count the requests a crawl makes.
    crawl = {"crawl_delay_ms": 0, "timeout_s": 5, "max_download_attempts": 1, "sitemaps": False,
             "resolve": server.resolve, **keys.pop("crawl", {})}  # fmt: skip
    settings = {"sites": sorted(server.sites), "state_dir": "state", "output_dir": "out",
                "threads": {"downloading": 2, "parsing": 1}, "crawl": crawl, **keys}  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "settings.yaml"
    path.write_text(yaml.safe_dump(settings), encoding="utf-8")
    return path


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def small_site() -> dict[str, Resource]:
    return {
        "/": Resource(b"<title>Home</title><a href='/b'>b</a> <a href='#top'>top</a>"),
        "/b": Resource(b"<title>B</title><a href='/'>home</a>"),
    }


def closed_port() -> int:
    """A loopback port nobody listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- 1. own only what you wrote ------------------------------------------------------


def test_fresh_keeps_the_users_files_with_output_dir_beside_the_settings(serve, tmp_path):
    server = serve({"a.test": small_site()})
    config = write_settings(tmp_path, server, output_dir=".", state_dir="state")
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    other = tmp_path / "b.test.nodes.csv"  # looks like output, but no crawl of ours wrote it
    other.write_text("id\n")
    assert cli("--config", "settings.yaml", "-q", cwd=tmp_path).returncode == 0
    assert all((tmp_path / name).exists() for name in OWN_FILES)
    stale = tmp_path / ".report.json.x1y2z3"  # what a crash inside atomic_write leaves
    stale.write_text("{")

    proc = cli("--config", "settings.yaml", "--fresh", "-q", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert notes.read_text() == "mine\n" and other.read_text() == "id\n"
    assert config.exists() and yaml.safe_load(config.read_text())["output_dir"] == "."
    assert not stale.exists()
    # The crawl ran again from scratch: new files, every page fetched again.
    assert len(read_csv(tmp_path / "a.test.nodes.csv")) == 2
    assert [hit.path for hit in server.hits_for("a.test")].count("/b") == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [*OWN_FILES, "b.test.nodes.csv", "notes.txt", "settings.yaml", "state"]
    )


def test_fresh_removes_only_the_files_the_unloaders_declare(serve, tmp_path):
    """A task's unloader declares what it writes; --fresh removes that and no more."""
    (tmp_path / "mytask.py").write_text(
        "from rccrawler.unloaders import ResultUnloader, atomic_write, host_file_stem\n"
        "class TitlesUnloader(ResultUnloader):\n"
        "    output_names = ('{stem}.titles.txt',)\n"
        "    def unload(self):\n"
        "        written = []\n"
        "        for host in self.data.hosts():\n"
        "            path = self.output_dir / f'{host_file_stem(host.host)}.titles.txt'\n"
        "            with atomic_write(path) as handle:\n"
        "                handle.write('titles\\n')\n"
        "            written.append(path)\n"
        "        return written\n"
    )
    server = serve({"a.test": small_site()})
    write_settings(tmp_path, server, unloaders=["mytask.TitlesUnloader"])
    assert cli("--config", "settings.yaml", "-q", cwd=tmp_path).returncode == 0
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["a.test.titles.txt"]
    (out / "a.test.nodes.csv").write_text("the user's own\n")  # not declared by this task
    proc = cli("--config", "settings.yaml", "--fresh", "-q", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (out / "a.test.nodes.csv").read_text() == "the user's own\n"
    assert (out / "a.test.titles.txt").read_text() == "titles\n"


def fd_targets(pid: int) -> list[str]:
    targets = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            targets.append(os.readlink(fd))
    return targets


def test_fresh_is_refused_while_the_crawl_runs_and_changes_nothing(serve, tmp_path):
    server = serve({"a.test": generated_site("a.test", 300)})
    write_settings(tmp_path, server, crawl={"crawl_delay_ms": 30})
    state = tmp_path / "state"
    with running("--config", "settings.yaml", "--no-tui", "-q", cwd=tmp_path) as proc:
        wait_for(lambda: len(server.hits_for("a.test")) >= 10, proc)
        # The running crawl rewrites what it is doing (activity.json) itself.
        files = {p.name: p.stat().st_ino for p in state.iterdir() if p.name != "activity.json"}
        assert {"crawl.sqlite3", "crawl.sqlite3-wal", "lock"} <= set(files)

        refused = cli("--config", "settings.yaml", "--fresh", "-q", cwd=tmp_path)
        assert refused.returncode == 2
        assert len(refused.stderr.strip().splitlines()) == 1
        assert "in use by pid" in refused.stderr and str(proc.pid) in refused.stderr
        assert {p.name: p.stat().st_ino for p in state.iterdir()
                if p.name != "activity.json"} == files  # fmt: skip
        database = str(state / "crawl.sqlite3")
        assert database in fd_targets(proc.pid)  # still open, and not "(deleted)"

        assert cli("stop", "--config", "settings.yaml", cwd=tmp_path).returncode == 0
        out, _err = proc.communicate(timeout=RUN_TIMEOUT)
    assert proc.returncode == 0 and "stopped: run the same command to resume" in out
    done_before = json.loads(
        cli("status", "--config", "settings.yaml", "--json", cwd=tmp_path).stdout
    )["pages_done"]
    assert 10 <= done_before < 300
    resumed = cli("--config", "settings.yaml", "-q", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert len(read_csv(tmp_path / "out" / "a.test.nodes.csv")) == 300
    # Resumed, not restarted: no page was fetched twice.
    paths = [hit.path for hit in server.hits_for("a.test") if hit.path != "/robots.txt"]
    assert len(paths) == len(set(paths)) == 300


# -- 2. honest outcomes ------------------------------------------------------------


def test_a_site_that_fetched_nothing_fails_the_crawl_with_one_line(serve, tmp_path):
    server = serve({"a.test": small_site(),
                    "b.test": {"/robots.txt": Resource(b"down", 503)}})  # fmt: skip
    resolve = {**server.resolve, "c.test:80": f"127.0.0.1:{closed_port()}"}
    write_settings(tmp_path, server, sites=["a.test", "b.test", "c.test"],
                   crawl={"resolve": resolve})  # fmt: skip
    proc = cli("--config", "settings.yaml", "--no-tui", "-q", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    summary = [line for line in proc.stderr.splitlines() if line.startswith("rccrawler:")]
    assert len(summary) == 1
    assert summary[0].startswith("rccrawler: 2 of 3 sites failed, nothing fetched: ")
    assert "b.test (robots.txt unavailable (HTTP 503))" in summary[0]
    assert "c.test (" in summary[0] and "a.test" not in summary[0]
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert sorted(report["failed_sites"]) == ["b.test", "c.test"]
    assert report["sites"]["a.test"]["failed"] == ""


def test_every_site_fetched_something_exits_0_even_with_errors(serve, tmp_path):
    server = serve({"a.test": {"/": Resource(b"<a href='/gone'>x</a>"),
                               "/gone": Resource(b"no", 404)},
                    "b.test": {"/": Resource(b"not here", 404)}})  # fmt: skip
    write_settings(tmp_path, server)
    proc = cli("--config", "settings.yaml", "--no-tui", "-q", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "failed" not in proc.stderr


def test_a_failing_unloader_exits_1_and_the_others_still_write(serve, tmp_path):
    conf = tmp_path / "conf"
    server = serve({"a.test": small_site()})
    unloaders = ["broken.BrokenUnloader", "rccrawler.unloaders.ReportUnloader"]
    write_settings(conf, server, output_dir=str(tmp_path / "out"), unloaders=unloaders)
    (conf / "broken.py").write_text(
        "from rccrawler.unloaders import ResultUnloader\n"
        "class BrokenUnloader(ResultUnloader):\n"
        "    def unload(self):\n"
        "        raise OSError('disk full')\n"
    )
    # Run from elsewhere: the task module is found beside the settings (item 3).
    proc = cli("--config", str(conf / "settings.yaml"), "--no-tui", "-q", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "rccrawler: writing the output failed: BrokenUnloader failed: disk full" in proc.stderr
    assert (tmp_path / "out" / "report.json").exists()


def test_help_and_docs_document_the_exit_codes():
    proc = subprocess.run(command("crawl", "--help"), capture_output=True, text=True,
                          timeout=RUN_TIMEOUT)  # fmt: skip
    docs = (Path(__file__).parent.parent / "docs" / "commands.md").read_text()
    for code in ("0", "1", "2", "130", "141"):
        assert re.search(rf"^  {code}\s+\S", proc.stdout, re.M), proc.stdout
        assert re.search(rf"^\| {code} \| ", docs, re.M)


# -- 5. umask ----------------------------------------------------------------------


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600)])
def test_output_files_follow_the_umask(serve, tmp_path, umask, mode):
    server = serve({"a.test": small_site()})
    write_settings(tmp_path, server)
    assert cli("--config", "settings.yaml", "-q", cwd=tmp_path, umask=umask).returncode == 0
    for name in OWN_FILES:
        assert stat.S_IMODE((tmp_path / "out" / name).stat().st_mode) == mode, name


# -- 6. the command line -----------------------------------------------------------


def test_version_and_subcommand_help(tmp_path):
    version = subprocess.run(command("--version"), capture_output=True, text=True,
                             timeout=RUN_TIMEOUT)  # fmt: skip
    assert version.returncode == 0 and version.stdout.strip() == f"rccrawler {__version__}"
    # A task's own command is known once the settings that name the task are read.
    config = tmp_path / "search.yaml"
    config.write_text(yaml.safe_dump({"sites": ["http://a.test/"],
                                      "manager": "plugins.search.SearchManager"}))  # fmt: skip
    search = subprocess.run(command("search", "--config", str(config), "--help"),
                            capture_output=True, text=True, timeout=RUN_TIMEOUT)  # fmt: skip
    assert search.returncode == 0
    assert "--limit" in search.stdout and "--fresh" not in search.stdout
    assert "--no-tui" not in search.stdout
    crawl = subprocess.run(command("crawl", "--help"), capture_output=True, text=True,
                           timeout=RUN_TIMEOUT)  # fmt: skip
    assert "--fresh" in crawl.stdout and "--limit" not in crawl.stdout
    top = subprocess.run(command("--help"), capture_output=True, text=True, timeout=RUN_TIMEOUT)
    for name in ("crawl", "export", "stop", "status", "demo"):
        assert re.search(rf"^\s+{name}\s", top.stdout, re.M), name
    assert "search, words," in top.stdout  # the search task's commands, named in the epilog
    unknown = subprocess.run(command("words", "--config", str(config).replace("search", "x")),
                             capture_output=True, text=True, timeout=RUN_TIMEOUT)  # fmt: skip
    assert unknown.returncode == 2 and "x.yaml" in unknown.stderr
    bad = subprocess.run(command("status"), capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert bad.returncode == 2 and "--config" in bad.stderr
    typo = subprocess.run(command("statsu"), capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert typo.returncode == 2 and "invalid choice: 'statsu'" in typo.stderr


def test_quick_crawl_of_urls_needs_no_settings_file(serve, tmp_path):
    server = serve({"a.test": small_site()})
    resolve = json.dumps(server.resolve)
    proc = cli("crawl", "http://a.test/", "-s", "crawl.crawl_delay_ms=0", "-s",
               f"crawl.resolve={resolve}", "--no-tui", "-q", cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    folder = tmp_path / "rccrawler-a.test"
    assert {p.name for p in folder.iterdir()} == {*OWN_FILES, "state"}
    assert len(read_csv(folder / "a.test.nodes.csv")) == 2
    bad = cli("crawl", "http://a.test/", "-s", "crawl.timeout_s=soon", cwd=tmp_path)
    assert bad.returncode == 2 and "crawl.timeout_s" in bad.stderr


def test_stop_says_when_nothing_runs(serve, tmp_path):
    server = serve({"a.test": small_site()})
    write_settings(tmp_path, server)
    never = cli("stop", "--config", "settings.yaml", cwd=tmp_path)
    assert never.returncode == 1 and "no crawl is running" in never.stderr
    assert cli("--config", "settings.yaml", "-q", cwd=tmp_path).returncode == 0
    after = cli("stop", "--config", "settings.yaml", cwd=tmp_path)
    assert after.returncode == 1 and "no crawl is running" in after.stderr
    assert not (tmp_path / "state" / "stop.request").exists()


def test_verbose_logs_each_fetch_and_the_log_file_keeps_everything(serve, tmp_path):
    server = serve({"a.test": small_site()})
    write_settings(tmp_path, server)
    verbose = cli("--config", "settings.yaml", "--no-tui", "-v", cwd=tmp_path)
    assert re.search(r"fetched 200 http://a\.test/b \d+ ms", verbose.stderr), verbose.stderr
    quiet = cli("--config", "settings.yaml", "--fresh", "--no-tui", "-q", "--log-file",
                "crawl.log", cwd=tmp_path)  # fmt: skip
    assert quiet.returncode == 0 and "INFO" not in quiet.stderr
    log = (tmp_path / "crawl.log").read_text()
    assert "INFO" in log and "site http://a.test/ queued" in log and "wrote" in log


def search_crawl(serve: Callable[..., Any], tmp_path: Path) -> Any:
    server = serve({"a.test": {
        "/": Resource(b"<title>Robots</title><a href='/b'>b</a> robots robotic rob"),
        "/b": Resource(b"<title>Roberta</title> roberta robin"),
    }})  # fmt: skip
    write_settings(tmp_path, server, manager="plugins.search.SearchManager")
    assert cli("--config", "settings.yaml", "-q", cwd=tmp_path).returncode == 0
    return server


def test_words_limit_and_serve_on_a_busy_port(serve, tmp_path):
    search_crawl(serve, tmp_path)
    every = cli("words", "--config", "settings.yaml", "rob", cwd=tmp_path).stdout.splitlines()
    assert len(every) >= 3
    two = cli("words", "--config", "settings.yaml", "rob", "--limit", "2", cwd=tmp_path)
    assert two.returncode == 0 and two.stdout.splitlines() == every[:2]
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = cli("serve", "--config", "settings.yaml", "--port", str(port), cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"rccrawler serve: cannot listen on 127.0.0.1:{port}: Address already in use"
    ]


def into_closed_pipe(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """A command whose standard output is a pipe its reader has closed already, as
    ``rccrawler ... | head -1`` is once head has its line."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(command(*args), stdout=write_end, stderr=subprocess.PIPE,
                              text=True, timeout=RUN_TIMEOUT, cwd=cwd)  # fmt: skip
    finally:
        os.close(write_end)


def test_a_reader_gone_drops_the_output_with_141_and_the_crawl_keeps_its_work(serve, tmp_path):
    search_crawl(serve, tmp_path)
    before = {path.name: path.read_bytes() for path in (tmp_path / "out").iterdir()}
    for args in (["words", "--config", "settings.yaml"], ["search", "--config", "settings.yaml",
                 "robots"], ["status", "--config", "settings.yaml"]):  # fmt: skip
        proc = into_closed_pipe(*args, cwd=tmp_path)
        assert (proc.returncode, proc.stderr) == (141, ""), args
    # A crawl prints once it has saved its state and written its files.
    crawl = into_closed_pipe("--config", "settings.yaml", "--fresh", "--no-tui", cwd=tmp_path)
    assert crawl.returncode == 141
    assert "Traceback" not in crawl.stderr and "BrokenPipe" not in crawl.stderr, crawl.stderr
    after = {path.name: path.read_bytes() for path in (tmp_path / "out").iterdir()}
    assert after.keys() == before.keys()
    assert after["a.test.arcs.csv"] == before["a.test.arcs.csv"]
    status = cli("status", "--config", "settings.yaml", "--json", cwd=tmp_path)
    assert status.returncode == 0
    (site,) = json.loads(status.stdout)["sites"]
    assert (site["done"], site["stop_reason"]) == (2, "no waiting links left")


CRAWL_ONLY_MODULES = ("urllib3", "http.cookiejar", "jinja2", "xml.sax.saxutils",
                      "multiprocessing.connection")  # fmt: skip
"""What a crawl loads and a command that only reads one does not (its start-up time)."""


def test_the_commands_that_read_a_crawl_load_no_http_layer_nor_templates(serve, tmp_path):
    search_crawl(serve, tmp_path)
    for args in (["status"], ["search", "robots"], ["words", "rob"]):
        argv = [args[0], "--config", "settings.yaml", *args[1:]]
        code = ("import sys; from rccrawler.commands.main import main; "
                f"code = main({argv!r}); "
                f"print(*sorted(set(sys.modules) & {set(CRAWL_ONLY_MODULES)!r}), file=sys.stderr); "
                "sys.exit(code)")  # fmt: skip
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=RUN_TIMEOUT, cwd=tmp_path)  # fmt: skip
        assert proc.returncode == 0 and proc.stdout, (args, proc.stderr)
        assert proc.stderr.strip() == "", (args, proc.stderr)


# -- 7. export -----------------------------------------------------------------------


def test_export_writes_the_files_of_a_running_then_a_stopped_crawl(serve, tmp_path):
    server = serve({"a.test": generated_site("a.test", 300)})
    write_settings(tmp_path, server, crawl={"crawl_delay_ms": 30})
    nodes = tmp_path / "out" / "a.test.nodes.csv"
    with running("--config", "settings.yaml", "--no-tui", "-q", cwd=tmp_path) as proc:
        wait_for(lambda: len(server.hits_for("a.test")) >= 20, proc)
        export = cli("export", "--config", "settings.yaml", cwd=tmp_path)
        assert export.returncode == 0, export.stderr
        assert "exported the running crawl" in export.stdout
        so_far = len(read_csv(nodes))
        assert 0 < so_far < 300
        report = json.loads((tmp_path / "out" / "report.json").read_text())
        assert report["finished"] is False and report["stop_reason"] == "running"
        assert cli("stop", "--config", "settings.yaml", cwd=tmp_path).returncode == 0
        proc.communicate(timeout=RUN_TIMEOUT)
    assert proc.returncode == 0
    stopped = cli("export", "--config", "settings.yaml", cwd=tmp_path)
    assert stopped.returncode == 0 and "exported the stopped crawl" in stopped.stdout
    assert so_far <= len(read_csv(nodes)) < 300
    assert cli("--config", "settings.yaml", "-q", cwd=tmp_path).returncode == 0
    assert len(read_csv(nodes)) == 300
    nothing = cli("export", "--config", str(write_settings(tmp_path / "new", server)),
                  cwd=tmp_path / "new")  # fmt: skip
    assert nothing.returncode == 2 and "no saved crawl" in nothing.stderr


# -- 4. one definition per number ------------------------------------------------


PAGES = 150


def counting_site() -> dict[str, Resource]:
    """A root linking PAGES pages; each links home and to its own ``#top``; page 1 also
    links a 404, a copy of page 2 and an image."""
    site = {
        "/": Resource(b"".join(b"<a href='/p/%d'>%d</a>" % (i, i) for i in range(1, PAGES + 1)))
    }
    for i in range(1, PAGES + 1):
        site[f"/p/{i}"] = Resource(
            b"<title>%d</title><a href='/'>home</a><a href='#top'>top</a>" % i
        )
    site["/p/1"] = Resource(site["/p/1"].body + b"<a href='/gone'>g</a><a href='/copy'>c</a>"
                            b"<a href='/image'>i</a><a href='/loop'>l</a>")  # fmt: skip
    site["/gone"] = Resource(b"gone", 404)
    site["/loop"] = redirect("/loop")
    site["/copy"] = site["/p/2"]  # byte-identical, found a level deeper: the duplicate
    site["/image"] = Resource(b"GIF89a", headers=(("Content-Type", "image/gif"),))
    return site


def test_every_view_of_the_counts_agrees_after_errors_duplicates_and_a_resume(serve, tmp_path):
    site = counting_site()
    server = serve({"a.test": site})
    write_settings(tmp_path, server, crawl={"crawl_delay_ms": 40})
    with running("--config", "settings.yaml", "--no-tui", "-q", cwd=tmp_path) as proc:
        wait_for(lambda: len(server.hits_for("a.test")) >= 30, proc)
        assert cli("stop", "--config", "settings.yaml", cwd=tmp_path).returncode == 0
        out, _err = proc.communicate(timeout=RUN_TIMEOUT)
    assert "stopped: run the same command to resume" in out
    assert cli("--config", "settings.yaml", "-q", cwd=tmp_path).returncode == 0

    status = json.loads(cli("status", "--config", "settings.yaml", "--json",
                            cwd=tmp_path).stdout)  # fmt: skip
    row = status["sites"][0]
    out = tmp_path / "out"
    report = json.loads((out / "report.json").read_text())
    figures = report["sites"]["a.test"]
    nodes = read_csv(out / "a.test.nodes.csv")
    arcs = [(int(r["from"]), int(r["to"])) for r in read_csv(out / "a.test.arcs.csv")]
    skipped = read_csv(out / "a.test.skipped.csv")
    graphml = (out / "a.test.graphml").read_text()
    originals = [n for n in nodes if not n["duplicate_of"]]
    duplicates = [n for n in nodes if n["duplicate_of"]]

    assert report["runs"] == 2
    assert (
        row["done"] == figures["pages_done"] == len(originals) == status["pages_done"] == PAGES + 1
    )
    assert row["duplicates"] == figures["duplicates"] == len(duplicates) == 1
    assert row["errors"] == figures["errors"] == 2
    assert row["errors_by_kind"] == figures["errors_by_kind"] == {"http_404": 1,
                                                                  "redirect_loop": 1}  # fmt: skip
    failed = [r for r in skipped if r["reason"] in ("error", "redirect_loop")]
    assert len(failed) == figures["errors"]
    assert figures["skipped"] == len(skipped) == sum(figures["skipped_by_reason"].values())
    assert figures["skipped_by_reason"]["error"] == 1
    assert figures["skipped_by_reason"]["not_html"] == 1
    # GraphML and CSV: the same nodes (the duplicate in both) and the same arcs.
    assert graphml.count("<node ") == len(nodes)
    copy = next(n for n in duplicates)
    assert f'<node id="n{copy["id"]}">' in graphml
    assert f'<data key="duplicate_of">n{copy["duplicate_of"]}</data>' in graphml
    assert graphml.count("<edge ") == len(arcs) == figures["arcs"]
    # Self-links are left out and counted; out_degree counts the node's rows of arcs.csv.
    assert all(source != target for source, target in arcs)
    for node in nodes:
        assert int(node["out_degree"]) == sum(1 for s, _t in arcs if s == int(node["id"]))
    one = next(n for n in nodes if n["url"] == "http://a.test/p/1")
    ids = {n["url"]: int(n["id"]) for n in nodes}
    assert (
        copy["url"] == "http://a.test/copy"
        and int(copy["duplicate_of"]) == ids["http://a.test/p/2"]
    )
    assert {t for s, t in arcs if s == int(one["id"])} == {ids["http://a.test/"],
                                                          ids["http://a.test/p/2"]}  # fmt: skip
    assert int(one["out_degree"]) == 2  # not /gone (404), /image (not HTML), /loop or #top
    assert figures["self_links"] == PAGES
    page = (out / "report.html").read_text()
    site = page[page.index("<h2>a.test</h2>") :]
    for label, key in (("Pages done", "pages_done"), ("Duplicates", "duplicates"),
                       ("Errors", "errors")):  # fmt: skip
        assert f"<dt>{label}</dt><dd>{figures[key]}</dd>" in site
    assert "<svg" in site
    # The site's elapsed time lies within the runs' time, stopped time left out.
    assert 0 < figures["elapsed_s"] <= report["elapsed_s"]


def test_elapsed_leaves_out_the_time_the_crawl_was_stopped(tmp_path):
    clock = iter([100.0, 110.0, 1000.0, 1005.0]).__next__
    log = RunLog(tmp_path, clock=clock)
    log.begin()
    log.end()
    log.begin()
    log.end()
    assert log.intervals(now=2000.0) == [(100.0, 110.0), (1000.0, 1005.0)]
    # A site started at 105 and finished at 1003: 5 s in the first run, 3 in the second.
    assert log.active_seconds(105.0, 1003.0, now=2000.0) == pytest.approx(8.0)
    # A run killed without its end counts until the next one began.
    (tmp_path / "runs.log").write_text("start 10\nstart 20\nend 25\n")
    assert log.intervals(now=30.0) == [(10.0, 20.0), (20.0, 25.0)]


@pytest.mark.both_backends
def test_export_then_fresh_on_every_backend(serve, tmp_path, storage):
    server = serve({"a.test": small_site()})
    name = f"honest-{uuid.uuid4().hex}"
    write_settings(tmp_path, server, storage=storage, name=name, output_dir=".")
    try:
        assert cli("--config", "settings.yaml", "-q", cwd=tmp_path).returncode == 0
        for own in OWN_FILES:
            (tmp_path / own).unlink()
        export = cli("export", "--config", "settings.yaml", cwd=tmp_path)
        assert export.returncode == 0, export.stderr
        assert "exported the finished crawl" in export.stdout
        assert len(read_csv(tmp_path / "a.test.nodes.csv")) == 2
        (tmp_path / "notes.txt").write_text("mine")
        fresh = cli("--config", "settings.yaml", "--fresh", "-q", cwd=tmp_path)
        assert fresh.returncode == 0, fresh.stderr
        assert (tmp_path / "notes.txt").read_text() == "mine"
        assert json.loads((tmp_path / "report.json").read_text())["runs"] == 1
        assert [hit.path for hit in server.hits_for("a.test")].count("/b") == 2
    finally:
        if storage != "sqlite":
            from rccrawler.data.postgres import PostgresDataManager, schema_for

            PostgresDataManager.drop(storage, schema_for(name))


def test_a_second_interrupt_stops_at_once_with_130(serve, tmp_path):
    """The first Ctrl-C waits for the download in flight (a slow page here); a second
    one ends the process at once, with 130."""
    server = serve({"a.test": {"/": Resource(b"<a href='/slow'>s</a>"),
                               "/slow": Resource(b"late", delay=5.0)}})  # fmt: skip
    write_settings(tmp_path, server, crawl={"timeout_s": 30})
    with running("--config", "settings.yaml", "--no-tui", "-q", cwd=tmp_path) as proc:
        wait_for(lambda: "/slow" in [hit.path for hit in server.hits_for("a.test")], proc)
        deadline = time.monotonic() + RUN_TIMEOUT
        while proc.poll() is None:  # signals sent at once may merge into one: repeat
            assert time.monotonic() < deadline
            proc.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0.05)
    assert proc.returncode == 130


def test_fresh_is_refused_while_a_postgresql_worker_runs(serve, tmp_path, postgresql):
    server = serve({"a.test": generated_site("a.test", 300)})
    name = f"honest-{uuid.uuid4().hex}"
    write_settings(tmp_path, server, storage=postgresql, name=name, crawl={"crawl_delay_ms": 30})
    try:
        with running("--config", "settings.yaml", "--no-tui", "-q", cwd=tmp_path) as proc:
            wait_for(lambda: len(server.hits_for("a.test")) >= 10, proc)
            refused = cli("--config", "settings.yaml", "--fresh", "-q", cwd=tmp_path)
            assert refused.returncode == 2
            assert len(refused.stderr.strip().splitlines()) == 1
            assert f"pid {proc.pid} on " in refused.stderr and "is running" in refused.stderr
            assert cli("stop", "--config", "settings.yaml", cwd=tmp_path).returncode == 0
            out, _err = proc.communicate(timeout=RUN_TIMEOUT)
        assert "stopped: run the same command to resume" in out
        # The state survived the refused --fresh: the crawl resumes, nothing fetched twice.
        assert cli("--config", "settings.yaml", "-q", cwd=tmp_path).returncode == 0
        paths = [hit.path for hit in server.hits_for("a.test") if hit.path != "/robots.txt"]
        assert len(paths) == len(set(paths)) == 300
    finally:
        from rccrawler.data.postgres import PostgresDataManager, schema_for

        PostgresDataManager.drop(postgresql, schema_for(name))


SIGNAL_WHILE_WAITING = """
import signal, sys
from pathlib import Path
from rccrawler.commands.signals import stop_on_signals
from rccrawler.config import Settings
from rccrawler.context import CrawlContext

context = CrawlContext(Settings(sites=("a.test",)), None, None, None, Path("stop"))
with stop_on_signals(context.note_signal):
    # The main thread inside Event.wait holds the Event's lock; a signal handled there
    # that set the Event would wait for that lock forever.
    with context.stopping._cond:
        signal.raise_signal(signal.SIGINT)
print("handled:", context.signalled, "stopping:", context.stopping.is_set())
"""


def test_a_signal_while_the_main_thread_waits_on_the_stop_event_cannot_deadlock():
    """The Ctrl-C handler takes no lock: it only notes the stop, and the manager's loop
    acts on it. (It once set the Event itself, and hung when SIGINT came while the main
    thread was inside ``Event.wait`` holding that Event's lock.)"""
    proc = subprocess.run([sys.executable, "-c", SIGNAL_WHILE_WAITING],
                          capture_output=True, text=True, timeout=30)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "handled: stopped by SIGINT stopping: False"
