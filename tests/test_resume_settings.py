"""A resumed crawl takes the settings as they are now (issue 39, SPEC §3): a lower delay
paces the waiting pages, a larger ``max_pages`` or ``max_depth`` continues a finished
site, a changed scope rule applies to the queue; a key that defines the crawl (manager,
storage, name) is refused with the state untouched; every resume says what it found and
what changed. Each test runs ``python -m rccrawler`` and reads the server's log."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from crawling import CLOCK_SLACK, RUN_TIMEOUT, cli, open_state, running, state_snapshot
from support.sites import generated_site
from webserver import Resource


def write_settings(folder: Path, server: Any, **keys: Any) -> Path:
    """settings.yaml for the sites of ``server``, state and output in ``folder``."""
    crawl = {"crawl_delay_ms": 0, "timeout_s": 5, "max_download_attempts": 1, "sitemaps": False,
             "resolve": server.resolve, **keys.pop("crawl", {})}  # fmt: skip
    settings = {"sites": sorted(server.sites), "state_dir": "state", "output_dir": "out",
                "threads": {"downloading": 2, "parsing": 1}, "crawl": crawl, **keys}  # fmt: skip
    path = folder / "settings.yaml"
    path.write_text(yaml.safe_dump(settings), encoding="utf-8")
    return path


def page(path: str, *links: str) -> Resource:
    body = "".join(f'<a href="{link}">{link}</a> ' for link in links)
    return Resource(f"<title>{path}</title>{body}".encode())


def tree(depth: int, fanout: int) -> dict[str, Resource]:
    """A site whose pages form a tree: ``/`` is level 0, ``/1``, ``/2``… level 1,
    ``/1/1``… level 2; each page links to its children only."""
    site: dict[str, Resource] = {}

    def add(path: str, level: int) -> None:
        prefix = "" if path == "/" else path
        children = [f"{prefix}/{n}" for n in range(1, fanout + 1)] if level < depth else []
        site[path] = page(path, *children)
        for child in children:
            add(child, level + 1)

    add("/", 0)
    return site


def level_of(path: str) -> int:
    return 0 if path == "/" else path.count("/")


def pages_fetched(server: Any, host: str = "a.test") -> list[str]:
    return [path for path in server.paths_for(host) if path != "/robots.txt"]


def resume_line(stdout: str) -> str:
    lines = [line for line in stdout.splitlines() if line.startswith("resuming: ")]
    assert len(lines) == 1, stdout
    return lines[0]


def state_bytes(state: Path) -> dict[str, str]:
    """The storage files of a SQLite state, by name and digest."""
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(state.glob("crawl.sqlite3*"))}  # fmt: skip


def read_nodes(output: Path, host: str = "a.test") -> list[dict[str, str]]:
    import csv

    with open(output / f"{host}.nodes.csv", newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def read_arcs(output: Path, host: str = "a.test") -> set[tuple[str, str]]:
    import csv

    url_of = {node["id"]: node["url"] for node in read_nodes(output, host)}
    with open(output / f"{host}.arcs.csv", newline="", encoding="utf-8") as handle:
        return {(url_of[row["from"]], url_of[row["to"]]) for row in csv.DictReader(handle)}


def stop_after(server: Any, hits: int, cwd: Path) -> str:
    """Run the crawl of ``cwd/settings.yaml`` until the server has answered ``hits``
    requests, stop it with SIGTERM, and return what it printed (it says it stopped)."""
    with running("--config", "settings.yaml", "--no-tui", "-q", cwd=cwd) as proc:
        assert server.wait_for_hits(hits, timeout=RUN_TIMEOUT, alive=lambda: proc.poll() is None)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=RUN_TIMEOUT)
    assert proc.returncode == 0 and "stopped: run the same command to resume" in out, err
    return out


# -- crawl keys take effect ------------------------------------------------------------------


def test_a_stopped_crawl_resumed_with_a_lower_delay_paces_at_the_new_delay(
    serve, tmp_path, monkeypatch
):
    server = serve({"a.test": generated_site("a.test", 30, fanout=4)})
    # 30 s between two requests: the first run gets robots.txt, then waits for "/".
    write_settings(tmp_path, server, crawl={"crawl_delay_ms": 30_000})
    stop_after(server, 1, tmp_path)
    assert server.paths_for("a.test") == ["/robots.txt"]
    stopped_at = len(server.hits)

    write_settings(tmp_path, server, crawl={"crawl_delay_ms": 50})
    # At the old delay its 30 pages would take 15 minutes: far beyond this run's guard.
    resumed = cli("--config", "settings.yaml", "--no-tui", "-q", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert resume_line(resumed.stdout) == (
        "resuming: 0 done, 1 waiting; changed: crawl_delay_ms 30000 → 50"
    )
    hits = server.hits[stopped_at:]
    assert sorted(hit.path for hit in hits) == sorted(p for p in server.sites["a.test"]
                                                     if p != "/robots.txt")  # fmt: skip
    # Paced at the new delay, 50 ms apart: the crawler leases a page of the host no
    # sooner than that after its last request; at the server one request may come late
    # (a new connection) and the next one early, so the typical gap says it.
    gaps = sorted(b.at - a.at for a, b in itertools.pairwise(hits))
    assert gaps[len(gaps) // 2] >= 0.05 - CLOCK_SLACK, gaps
    monkeypatch.chdir(tmp_path)  # the settings name their state_dir from there
    with open_state(tmp_path / "settings.yaml") as data:
        host = data.host("a.test")
        assert host is not None and host.crawl_delay == host.min_crawl_delay == 0.05


@pytest.fixture
def kept_in(storage: str) -> Iterator[dict[str, str]]:
    """The settings keys that keep the test's crawl in ``storage`` (a PostgreSQL crawl
    of its own name, dropped after the test)."""
    if storage == "sqlite":
        yield {}
        return
    name = f"resume-{uuid.uuid4().hex}"
    try:
        yield {"storage": storage, "name": name}
    finally:
        from rccrawler.data.postgres import PostgresDataManager, schema_for

        PostgresDataManager.drop(storage, schema_for(name))


@pytest.mark.both_backends
def test_a_finished_crawl_with_max_pages_raised_fetches_exactly_the_new_pages(
    serve, tmp_path, kept_in
):
    site = generated_site("a.test", 200, fanout=5)
    server = serve({"a.test": site})
    write_settings(tmp_path, server, crawl={"max_pages": 10}, **kept_in)
    first = cli("--config", "settings.yaml", "--no-tui", "-q", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    before = pages_fetched(server)
    assert len(before) == len(set(before)) == 10
    report = json.loads((tmp_path / "out" / "report.json").read_text())["sites"]["a.test"]
    assert report["stop_reason"] == "max_pages reached (10)"

    write_settings(tmp_path, server, crawl={"max_pages": 20}, **kept_in)
    second = cli("--config", "settings.yaml", "--no-tui", "-q", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert resume_line(second.stdout) == (
        "resuming: 10 done, 10 waiting; changed: max_pages 10 → 20"
    )
    after = pages_fetched(server)[len(before) :]
    assert len(after) == len(set(after)) == 10  # exactly 10 more, none of them again
    assert not set(after) & set(before)
    nodes = read_nodes(tmp_path / "out")
    assert len(nodes) == 20
    report = json.loads((tmp_path / "out" / "report.json").read_text())["sites"]["a.test"]
    assert report["stop_reason"] == "max_pages reached (20)"
    # The graph holds every link between the 20 pages, those found in the first run to
    # pages admitted in the second too.
    paths = {node["url"].removeprefix("http://a.test") for node in nodes}
    expected = {
        (f"http://a.test{source}", f"http://a.test{target}")
        for source in paths
        for target in re.findall(r'href="([^"]+)"', site[source].body.decode())
        if target in paths and target != source
    }
    assert read_arcs(tmp_path / "out") == expected


@pytest.mark.both_backends
def test_a_finished_crawl_with_max_depth_raised_fetches_the_next_level(serve, tmp_path, kept_in):
    site = tree(depth=3, fanout=3)
    server = serve({"a.test": site})
    write_settings(tmp_path, server, crawl={"max_depth": 1}, **kept_in)
    assert cli("--config", "settings.yaml", "--no-tui", "-q", cwd=tmp_path).returncode == 0
    before = pages_fetched(server)
    assert sorted(before) == ["/", "/1", "/2", "/3"]

    write_settings(tmp_path, server, crawl={"max_depth": 2}, **kept_in)
    second = cli("--config", "settings.yaml", "--no-tui", "-q", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert resume_line(second.stdout) == ("resuming: 4 done, 9 waiting; changed: max_depth 1 → 2")
    after = pages_fetched(server)[len(before) :]
    assert sorted(after) == sorted(path for path in site if level_of(path) == 2)
    nodes = {node["url"]: node["level"] for node in read_nodes(tmp_path / "out")}
    assert len(nodes) == 13 and nodes["http://a.test/2/3"] == "2"
    assert ("http://a.test/2", "http://a.test/2/3") in read_arcs(tmp_path / "out")
    skipped = (tmp_path / "out" / "a.test.skipped.csv").read_text()
    assert "http://a.test/2/3/1,depth," in skipped and "http://a.test/2/3," not in skipped


def test_a_lower_max_pages_leaves_out_the_last_queued_pages_until_it_grows(serve, tmp_path):
    server = serve({"a.test": generated_site("a.test", 300, fanout=6)})
    write_settings(tmp_path, server, crawl={"crawl_delay_ms": 20})
    stop_after(server, 30, tmp_path)
    done = len(read_nodes_of_state(tmp_path))
    budget = done + 5
    stopped_at = len(server.hits)
    write_settings(tmp_path, server, crawl={"max_pages": budget})
    lower = cli("--config", "settings.yaml", "--no-tui", "-q", cwd=tmp_path)
    assert lower.returncode == 0, lower.stderr
    assert f"changed: max_pages 0 → {budget}, crawl_delay_ms 20 → 0" in lower.stdout
    assert f"{done} done, 5 waiting;" in resume_line(lower.stdout)
    assert len(server.hits) - stopped_at == 5  # the five nearest of the queue, no more
    report = json.loads((tmp_path / "out" / "report.json").read_text())["sites"]["a.test"]
    assert report["pages_done"] == budget
    assert report["stop_reason"] == f"max_pages reached ({budget})"
    write_settings(tmp_path, server, crawl={"max_pages": budget + 10})
    higher = cli("--config", "settings.yaml", "--no-tui", "-q", cwd=tmp_path)
    assert higher.returncode == 0, higher.stderr
    assert f"{budget} done, 10 waiting;" in resume_line(higher.stdout)
    paths = pages_fetched(server)
    assert len(paths) == len(set(paths)) == budget + 10  # none of them twice
    assert len(read_nodes(tmp_path / "out")) == budget + 10


def read_nodes_of_state(folder: Path) -> list[str]:
    """The pages a stopped crawl has done, as ``status`` counts them."""
    status = cli("status", "--config", "settings.yaml", "--json", cwd=folder)
    return ["page"] * json.loads(status.stdout)["pages_done"]


def test_a_changed_scope_rule_applies_to_the_pages_that_wait(serve, tmp_path):
    server = serve({"a.test": generated_site("a.test", 300, fanout=6)})
    write_settings(tmp_path, server, crawl={"crawl_delay_ms": 20})
    stop_after(server, 20, tmp_path)
    stopped_at = len(server.hits)
    write_settings(tmp_path, server, crawl={"exclude": ["7"]})
    resumed = cli("--config", "settings.yaml", "--no-tui", "-q", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert 'exclude [] → ["7"]' in resume_line(resumed.stdout)
    requested = [hit.path for hit in server.hits[stopped_at:]]
    assert requested and not [path for path in requested if "7" in path]
    skipped = (tmp_path / "out" / "a.test.skipped.csv").read_text()
    assert re.search(r"^http://a\.test/p/\d*7\d*\.html,exclude,", skipped, re.M)


def test_the_resume_line_names_each_changed_key_and_an_unchanged_run_says_so(serve, tmp_path):
    server = serve({"a.test": generated_site("a.test", 20, fanout=4)})
    write_settings(tmp_path, server)
    first = cli("--config", "settings.yaml", "--no-tui", "-q", cwd=tmp_path)
    assert first.returncode == 0 and "resuming" not in first.stdout  # a new crawl
    again = cli("--config", "settings.yaml", "--no-tui", "-q", cwd=tmp_path)
    assert resume_line(again.stdout) == "resuming: 20 done, 0 waiting; no setting changed"
    write_settings(tmp_path, server, crawl={"timeout_s": 7, "headers": {"X-Team": "web"}},
                   threads={"downloading": 3, "parsing": 1})  # fmt: skip
    changed = cli("--config", "settings.yaml", "--no-tui", "-q", "-s", "crawl.max_depth=4",
                  cwd=tmp_path)  # fmt: skip
    assert changed.returncode == 0, changed.stderr
    assert resume_line(changed.stdout) == (
        "resuming: 20 done, 0 waiting; changed: threads.downloading 2 → 3, max_depth 10 → 4, "
        'timeout_s 5 → 7, headers {} → {"X-Team":"web"}'
    )
    # -s was for that run only: the next one has the file's value again.
    back = cli("--config", "settings.yaml", "--no-tui", "-q", cwd=tmp_path)
    assert resume_line(back.stdout).endswith("changed: max_depth 4 → 10")


# -- keys that define the crawl --------------------------------------------------------------


def test_a_changed_manager_or_name_is_refused_with_the_state_untouched(serve, tmp_path):
    server = serve({"a.test": generated_site("a.test", 20, fanout=4)})
    write_settings(tmp_path, server)
    assert cli("--config", "settings.yaml", "--no-tui", "-q", cwd=tmp_path).returncode == 0
    before = state_bytes(tmp_path / "state")
    assert before
    write_settings(tmp_path, server, manager="plugins.search.SearchManager")
    manager = cli("--config", "settings.yaml", "--no-tui", "-q", cwd=tmp_path)
    assert manager.returncode == 2
    assert manager.stderr.strip().splitlines() == [
        "rccrawler: manager: the saved crawl in state belongs to manager "
        "'plugins.webgraph.manager.WebGraphManager', this run has "
        "'plugins.search.manager.SearchManager'; manager defines the crawl and cannot change "
        "when it resumes: use --fresh to start over"
    ]
    write_settings(tmp_path, server, name="another")
    name = cli("--config", "settings.yaml", "--no-tui", "-q", cwd=tmp_path)
    assert name.returncode == 2 and name.stderr.startswith("rccrawler: name: ")
    assert "use --fresh to start over" in name.stderr
    assert state_bytes(tmp_path / "state") == before
    assert len(server.hits) == 21  # nothing was requested by the refused runs
    # --fresh starts over with the other task.
    write_settings(tmp_path, server, manager="plugins.search.SearchManager")
    fresh = cli("--config", "settings.yaml", "--no-tui", "-q", "--fresh", cwd=tmp_path)
    assert fresh.returncode == 0, fresh.stderr


def test_a_changed_storage_is_refused_either_way_with_the_state_untouched(
    serve, tmp_path, postgresql
):
    server = serve({"a.test": generated_site("a.test", 20, fanout=4)})
    name = f"moved-{uuid.uuid4().hex}"
    write_settings(tmp_path, server, name=name)
    assert cli("--config", "settings.yaml", "--no-tui", "-q", cwd=tmp_path).returncode == 0
    before = state_bytes(tmp_path / "state")
    write_settings(tmp_path, server, name=name, storage=postgresql)
    moved = cli("--config", "settings.yaml", "--no-tui", "-q", cwd=tmp_path)
    assert moved.returncode == 2
    assert moved.stderr.startswith("rccrawler: storage: the saved crawl ")
    assert f"was run with storage 'sqlite', this run has '{postgresql}'" in moved.stderr
    assert state_bytes(tmp_path / "state") == before
    from rccrawler.data.postgres import PostgresDataManager, schema_for

    assert not PostgresDataManager.exists(postgresql, schema_for(name))  # nothing made there
    # The other way: a crawl kept in PostgreSQL, then asked to run on SQLite.
    other = tmp_path / "pg"
    other.mkdir()
    write_settings(other, server, name=name, storage=postgresql)
    try:
        assert cli("--config", "settings.yaml", "--no-tui", "-q", cwd=other).returncode == 0
        kept = state_snapshot(other / "settings.yaml")
        write_settings(other, server, name=name)
        back = cli("--config", "settings.yaml", "--no-tui", "-q", cwd=other)
        assert back.returncode == 2 and back.stderr.startswith("rccrawler: storage: "), back.stderr
        assert not (other / "state" / "crawl.sqlite3").exists()
        write_settings(other, server, name=name, storage=postgresql)
        assert state_snapshot(other / "settings.yaml") == kept
    finally:
        PostgresDataManager.drop(postgresql, schema_for(name))


def test_an_index_setting_of_the_search_task_is_refused_on_resume(serve, tmp_path):
    server = serve({"a.test": generated_site("a.test", 10, fanout=3)})
    task = {"manager": "plugins.search.SearchManager"}
    write_settings(tmp_path, server, **task, search={"workers": False})
    assert cli("--config", "settings.yaml", "--no-tui", "-q", cwd=tmp_path).returncode == 0
    write_settings(tmp_path, server, **task, search={"workers": False, "language": "french"})
    refused = cli("--config", "settings.yaml", "--no-tui", "-q", cwd=tmp_path)
    assert refused.returncode == 2 and refused.stderr.startswith("rccrawler: search.language: ")
    # How pages are indexed (workers or not) is no index setting: it may change.
    write_settings(tmp_path, server, **task, search={"workers": True})
    allowed = cli("--config", "settings.yaml", "--no-tui", "-q", cwd=tmp_path)
    assert allowed.returncode == 0, allowed.stderr
    assert resume_line(allowed.stdout).endswith("changed: search.workers false → true")
    # A default written out is the same setting: the saved crawl left language out.
    write_settings(tmp_path, server, **task, search={"workers": True, "language": "english"})
    spelled = cli("--config", "settings.yaml", "--no-tui", "-q", cwd=tmp_path)
    assert spelled.returncode == 0, spelled.stderr
    assert resume_line(spelled.stdout).endswith("; no setting changed"), spelled.stdout


def test_the_last_runs_settings_are_kept_in_the_state_without_a_password(tmp_path):
    from rccrawler.config import settings_from_mapping, settings_mapping
    from rccrawler.state import RunSettings

    raw = {"sites": ["a.test", {"url": "b.test", "crawl": {"max_depth": 2}}],
           "state_dir": str(tmp_path / "state"), "crawl": {"include": ["/docs/"]},
           "storage": "postgresql://bot:s3cret@db.example:5432/crawls"}  # fmt: skip
    settings = settings_from_mapping(raw)
    mapping = settings_mapping(settings)
    # Read back, the mapping is the same settings.
    assert settings_mapping(settings_from_mapping(mapping)) == mapping
    assert settings_from_mapping(mapping).site_crawl == settings.site_crawl
    from rccrawler.config import storage_without_password

    saved = RunSettings({**mapping, "storage": storage_without_password(mapping["storage"])},
                        None)  # fmt: skip
    (tmp_path / "state").mkdir()
    saved.save(tmp_path / "state")
    text = (tmp_path / "state" / "last-settings.json").read_text()
    assert "s3cret" not in text and "postgresql://bot@db.example:5432/crawls" in text
    assert RunSettings.read(tmp_path / "state") == saved
    assert json.loads(text)["settings"]["crawl"]["include"] == ["/docs/"]


def test_every_setting_is_kept_with_the_state_and_read_back_the_same(tmp_path):
    """The last run's settings hold every key: a setting added to Settings without
    a place in settings_mapping would be compared with nothing on resume."""
    from dataclasses import fields

    from rccrawler.config import CrawlSettings, Settings, settings_from_mapping, settings_mapping

    raw = {
        "sites": ["a.test", {"url": "b.test", "crawl": {"max_depth": 2, "headers": {"X": "1"}}}],
        "manager": "plugins.search.SearchManager", "name": "n", "storage": "sqlite",
        "storage_wait_s": 30, "state_dir": str(tmp_path / "s"), "output_dir": str(tmp_path / "o"),
        "threads": {"downloading": 3, "parsing": 4, "one_core": False, "parse_worker": True,
                    "max_downloading": 100},
        "parser": "html5lib", "downloading_thread": "x.D", "parsing_thread": "x.P",
        "routine_thread": "x.R", "finisher": "x.F", "unloaders": ["x.U"],
        "crawl": {"max_pages": 7, "include": ["/a"], "exclude_regex": "b$", "from": "me@x",
                  "timeout_s": 2.5, "resolve": {"a.test:80": "127.0.0.1:1"}, "cookies": False},
        "search": {"language": "french"},
    }  # fmt: skip
    settings = settings_from_mapping(raw, allowed_sections=frozenset({"search"}))
    mapping = settings_mapping(settings)
    back = settings_from_mapping(mapping, allowed_sections=frozenset({"search"}))
    assert back == settings
    # Every field of the settings is one of the keys (a new one needs its place).
    written = {"sites", "site_crawl", "manager", "name", "storage", "storage_wait_s",
               "state_dir", "output_dir",
               "downloading_threads", "max_downloading", "parsing_threads", "one_core",
               "parse_worker", "parser",
               "downloading_thread", "parsing_thread", "routine_thread", "finisher", "unloaders",
               "crawl", "sections", "source"}  # fmt: skip
    assert {f.name for f in fields(Settings)} == written
    crawl_keys = {"from" if f.name == "from_" else f.name for f in fields(CrawlSettings)}
    assert set(mapping["crawl"]) == crawl_keys
