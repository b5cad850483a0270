"""A bad settings.yaml gets one line naming the key, exit code 2, and nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from webserver import Resource

from rccrawler.manager import ApplicationManager, load_settings

GOOD = {"sites": ["a.test"], "crawl": {"crawl_delay_ms": 0}}

CASES = [
    ({**GOOD, "colour": "blue"}, "colour"),
    ({**GOOD, "crawl": {"max_dept": 3}}, "crawl.max_dept"),
    ({**GOOD, "crawl": {"timeout_s": "soon"}}, "crawl.timeout_s"),
    ({**GOOD, "crawl": {"obey_robots": "yes please"}}, "crawl.obey_robots"),
    ({**GOOD, "crawl": {"max_pages": True}}, "crawl.max_pages"),
    ({**GOOD, "crawl": {"max_downloads_at_time": 0}}, "crawl.max_downloads_at_time"),
    ({**GOOD, "threads": {"downloading": "eight"}}, "threads.downloading"),
    ({**GOOD, "threads": {"fetching": 2}}, "threads.fetching"),
    ({**GOOD, "threads": {"one_core": "yes"}}, "threads.one_core"),
    ({**GOOD, "threads": {"parse_worker": 1}}, "threads.parse_worker"),
    ({"crawl": {"max_depth": 2}}, "sites"),
    ({**GOOD, "sites": []}, "sites"),
    ({**GOOD, "sites": ["not a host"]}, "sites[0]"),
    ({**GOOD, "manager": "plugins.webgraph.NoSuchManager"}, "manager"),
    ({**GOOD, "manager": "nosuchpackage.Manager"}, "manager"),
    ({**GOOD, "manager": "rccrawler.records.PageData"}, "manager"),
    ({**GOOD, "parsing_thread": "rccrawler.threads.DownloadingThread"}, "parsing_thread"),
    ({**GOOD, "unloaders": ["nowhere.Unloader"]}, "unloaders[0]"),
    ({**GOOD, "storage": "mysql://x"}, "storage"),
    ({**GOOD, "storage_wait_s": -1}, "storage_wait_s"),
    ({**GOOD, "storage_wait_s": "two minutes"}, "storage_wait_s"),
    ({**GOOD, "storage_wait_s": True}, "storage_wait_s"),
    ({**GOOD, "storage_wait_s": 10**9}, "storage_wait_s"),
    ({**GOOD, "parser": "regex"}, "parser"),
    ({**GOOD, "crawl": {"resolve": {"a.test": "127.0.0.1"}}}, "crawl.resolve.a.test"),
    ({**GOOD, "crawl": {"proxy": "socks5://x:1"}}, "crawl.proxy"),
]


def run_cli(*args: str, cwd) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rccrawler", *args],
                          capture_output=True, text=True, timeout=60, cwd=cwd)  # fmt: skip


@pytest.mark.parametrize(("settings", "key"), CASES, ids=[key for _, key in CASES])
def test_bad_settings_exit_2_naming_the_key(tmp_path, settings, key):
    assert_refused(tmp_path, settings, key)


def assert_refused(tmp_path, settings, key) -> None:
    """The crawl of ``settings`` exits 2 with one line naming ``key``, writing nothing."""
    path = tmp_path / "settings.yaml"
    settings = {**settings, "state_dir": str(tmp_path / "state"),
                "output_dir": str(tmp_path / "out")}  # fmt: skip
    path.write_text(yaml.safe_dump(settings))
    proc = run_cli("--config", str(path), "--no-tui", cwd=tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"rccrawler: bad config: {key}:"), lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["settings.yaml"]


@pytest.mark.parametrize("text", ["sites: [a.test\n", "", "- just\n- a list\n"])
def test_unreadable_yaml_exits_2(tmp_path, text):
    path = tmp_path / "settings.yaml"
    path.write_text(text)
    proc = run_cli("--config", str(path), cwd=tmp_path)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["settings.yaml"]


def test_missing_config_file_exits_2(tmp_path):
    proc = run_cli("--config", str(tmp_path / "nope.yaml"), cwd=tmp_path)
    assert proc.returncode == 2
    assert "--config: no such file" in proc.stderr


@pytest.mark.parametrize(
    "example",
    sorted((Path(__file__).parent.parent / "config").glob("*.yaml")),
    ids=lambda p: p.name,
)
def test_the_example_settings_files_are_valid(example):
    manager_cls, settings = load_settings(example)
    assert settings.sites and issubclass(manager_cls, ApplicationManager)


# -- hostile settings (issue 15): one line, exit 2, never a traceback ------------------------

HOSTILE = [
    ({**GOOD, "manager": ".....x.Y"}, "manager"),
    ({**GOOD, "manager": "a..b.C"}, "manager"),
    ({**GOOD, "crawl": {"timeout_s": float("inf")}}, "crawl.timeout_s"),
    ({**GOOD, "crawl": {"timeout_s": float("nan")}}, "crawl.timeout_s"),
    ({**GOOD, "crawl": {"crawl_delay_ms": float("inf")}}, "crawl.crawl_delay_ms"),
    ({**GOOD, "crawl": {"max_crawl_delay_ms": float("nan")}}, "crawl.max_crawl_delay_ms"),
    ({**GOOD, "crawl": {"max_depth": 10**30}}, "crawl.max_depth"),
    ({**GOOD, "crawl": {"user_agent": "bot\r\nX-Evil: 1"}}, "crawl.user_agent"),
    ({**GOOD, "crawl": {"from": "a@b.test\nX-Evil: 1"}}, "crawl.from"),
    ({**GOOD, "crawl": {"proxy": "http://[::1"}}, "crawl.proxy"),
    ({**GOOD, "crawl": {"proxy": "http://host:port"}}, "crawl.proxy"),
    ({**GOOD, "crawl": {"max_body_bytes": 2**52}}, "crawl.max_body_bytes"),
    ({**GOOD, "crawl": {"max_links_per_page": 0}}, "crawl.max_links_per_page"),
    ({**GOOD, "crawl": {"max_html_depth": 2}}, "crawl.max_html_depth"),
    ({**GOOD, "crawl": {"max_html_tags": 10}}, "crawl.max_html_tags"),
    ({**GOOD, "threads": {"downloading": 100_000_000}}, "threads.downloading"),
    ({**GOOD, "output_dir": "/proc/1/out"}, "output_dir"),
]


@pytest.mark.parametrize(("settings", "key"), HOSTILE, ids=[key for _, key in HOSTILE])
def test_hostile_settings_exit_2_naming_the_key(tmp_path, settings, key):
    if key == "output_dir" and os.access("/proc/1", os.W_OK):
        pytest.skip("needs a folder this user cannot write")
    path = tmp_path / "settings.yaml"
    settings = {"state_dir": str(tmp_path / "state"), "output_dir": str(tmp_path / "out"),
                **settings}  # fmt: skip
    path.write_text(yaml.safe_dump(settings))
    proc = run_cli("--config", str(path), "--no-tui", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"rccrawler: bad config: {key}:"), lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["settings.yaml"]


def test_a_settings_file_that_is_not_utf8_exits_2(tmp_path):
    path = tmp_path / "settings.yaml"
    path.write_bytes(b'sites: [a.test]\ncrawl: {user_agent: "caf\xe9"}\n')
    proc = run_cli("--config", str(path), cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"rccrawler: bad config: --config: {path} is not UTF-8 text (byte 40: 0xe9)"
    ]


def test_an_output_dir_that_is_a_file_exits_2_before_any_request(tmp_path, serve):
    server = serve({"a.test": {"/": Resource(b"<a href='/x'>x</a>")}})
    (tmp_path / "out").write_text("my notes\n")
    path = tmp_path / "settings.yaml"
    path.write_text(yaml.safe_dump({
        "sites": ["a.test"], "state_dir": str(tmp_path / "state"),
        "output_dir": str(tmp_path / "out" / "graph"),
        "crawl": {"resolve": server.resolve, "crawl_delay_ms": 0},
    }))  # fmt: skip
    proc = run_cli("--config", str(path), "--no-tui", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"rccrawler: bad config: output_dir: {tmp_path / 'out' / 'graph'} is not a directory "
        f"(in the way: {tmp_path / 'out'})"
    ]
    assert server.hits == []
    assert (tmp_path / "out").read_text() == "my notes\n"
    assert not (tmp_path / "state").exists()


def test_stop_and_fresh_on_a_state_that_cannot_be_written_exit_2(tmp_path):
    state = tmp_path / "state"
    # Entries in the way stand for a read-only state (the tests may run as root).
    (state / "stop.request").mkdir(parents=True)
    (state / "crawl.sqlite3").mkdir()
    path = tmp_path / "settings.yaml"
    path.write_text(yaml.safe_dump({**GOOD, "state_dir": str(state),
                                    "output_dir": str(tmp_path / "out")}))  # fmt: skip
    proc = run_cli("--config", str(path), "--fresh", "--no-tui", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rccrawler: cannot write "), proc.stderr
    # Nothing runs there, and stop says so (it writes nothing then).
    proc = run_cli("stop", "--config", str(path), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip() == f"rccrawler stop: no crawl is running in {state}"


def test_garbage_cookies_txt_is_a_warning_and_the_crawl_goes_on(tmp_path, serve):
    server = serve({"a.test": {"/": Resource(b"<html>home</html>")}})
    state = tmp_path / "state"
    state.mkdir()
    (state / "cookies.txt").write_bytes(b"#LWP-Cookies-2.0\nSet-Cookie3: \xff\x00garbage\n" * 3)
    path = tmp_path / "settings.yaml"
    path.write_text(yaml.safe_dump({
        "sites": ["a.test"], "state_dir": str(state), "output_dir": str(tmp_path / "out"),
        "crawl": {"resolve": server.resolve, "crawl_delay_ms": 0},
    }))  # fmt: skip
    proc = run_cli("--config", str(path), "--no-tui", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "cookies of the last run could not be read" in proc.stderr
    assert (tmp_path / "out" / "a.test.nodes.csv").exists()


# -- sites_file: a seeds file -----------------------------------------------------


def test_a_sites_file_adds_one_site_a_line_after_the_sites(tmp_path):
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("\ufeff# seeds of the crawl\nb.test\n\n  https://c.test/start#top  \n"
                     "   # an indented comment\nd.test:8080\n", encoding="utf-8")  # fmt: skip
    path = tmp_path / "settings.yaml"
    path.write_text(yaml.safe_dump({**GOOD, "sites_file": str(seeds)}))
    _manager, settings = load_settings(path)
    assert settings.sites == ("http://a.test/", "http://b.test/", "https://c.test/start",
                              "http://d.test:8080/")  # fmt: skip


def test_a_sites_file_alone_is_enough(tmp_path):
    (tmp_path / "seeds.txt").write_text("a.test\n")
    path = tmp_path / "settings.yaml"
    cwd = Path.cwd()
    os.chdir(tmp_path)  # relative to the working directory, as state_dir is
    try:
        for settings in ({"sites_file": "seeds.txt"}, {"sites": [], "sites_file": "seeds.txt"}):
            path.write_text(yaml.safe_dump(settings))
            assert load_settings(path)[1].sites == ("http://a.test/",)
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize(
    ("content", "key"),
    [
        (None, "sites_file"),  # no such file
        (b"# only a comment\n\n", "sites_file"),
        (b"b.test\n\xff\xfe not utf-8\n", "sites_file"),
        (b"b.test\n\nnot a host\n", "sites_file {seeds}:3"),
    ],
    ids=["missing", "no site", "not utf-8", "bad line"],
)
def test_a_bad_sites_file_exits_2_naming_where(tmp_path, content, key):
    seeds = tmp_path / "seeds.txt"
    if content is not None:
        seeds.write_bytes(content)
    settings = {"sites_file": str(seeds), "crawl": {"crawl_delay_ms": 0}}
    path = tmp_path / "settings.yaml"
    path.write_text(yaml.safe_dump({**settings, "state_dir": str(tmp_path / "state"),
                                    "output_dir": str(tmp_path / "out")}))  # fmt: skip
    proc = run_cli("--config", str(path), "--no-tui", cwd=tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"rccrawler: bad config: {key.format(seeds=seeds)}:"), lines[0]
    assert not (tmp_path / "state").exists() and not (tmp_path / "out").exists()


def test_sites_added_to_the_sites_file_are_crawled_on_resume(serve, crawler, tmp_path):
    server = serve({host: {"/": Resource(f"<a href='/x'>{host}</a>".encode()),
                           "/x": Resource(f"{host} x".encode())}
                    for host in ("a.test", "b.test", "c.test")})  # fmt: skip
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("b.test\n")
    first = crawler.run(["a.test"], server.resolve, sites_file=str(seeds))
    assert first.finished and sorted(first.report["sites"]) == ["a.test", "b.test"]
    seeds.write_text("b.test\nc.test\n")
    again = crawler.run(["a.test"], server.resolve, sites_file=str(seeds))
    assert sorted(again.report["sites"]) == ["a.test", "b.test", "c.test"]
    assert sorted(server.paths_for("c.test")) == ["/", "/robots.txt", "/x"]
    assert server.paths_for("a.test").count("/x") == 1  # nothing crawled twice
