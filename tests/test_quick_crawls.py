"""Quick crawls are full citizens (issue 39, SPEC §3): ``status``, ``stop``, ``export``,
``drop`` and a task's commands find the crawl of ``rccrawler crawl URL…`` by the same
URLs, or by ``--state DIR``; a quick crawl's folder is named for its whole set of sites;
one that finds its saved state resumes it with the ``-s`` settings of this run.

Each test runs ``python -m rccrawler`` in a folder of its own against the loopback server.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from crawling import RUN_TIMEOUT, cli, running
from support.sites import generated_site


def routed(server: Any, *settings: str) -> list[str]:
    """``-s`` options that route the quick crawl to the loopback server (and others)."""
    options = ["-s", f"crawl.resolve={json.dumps(server.resolve)}", "-s", "crawl.sitemaps=false"]
    for setting in settings:
        options += ["-s", setting]
    return options


def status_of(*crawl: str, cwd: Path) -> dict[str, Any]:
    result = cli("status", *crawl, "--json", cwd=cwd)
    assert result.returncode == 0, result.stderr
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed


def test_crawl_a_b_then_crawl_a_keep_separate_state(serve, tmp_path):
    server = serve({"a.test": generated_site("a.test", 12, fanout=3),
                    "b.test": generated_site("b.test", 8, fanout=3)})  # fmt: skip
    both = cli("crawl", "b.test", "http://a.test/", *routed(server, "crawl.crawl_delay_ms=0"),
               "--no-tui", "-q", cwd=tmp_path)  # fmt: skip
    assert both.returncode == 0, both.stderr
    assert (tmp_path / "rccrawler-a.test+b.test" / "report.json").exists()
    alone = cli("crawl", "a.test", *routed(server, "crawl.crawl_delay_ms=0"), "--no-tui", "-q",
                cwd=tmp_path)  # fmt: skip
    assert alone.returncode == 0, alone.stderr
    assert "resuming" not in alone.stdout  # a crawl of its own, not the one of a.test and b.test
    assert "b.test" not in alone.stdout
    report = json.loads((tmp_path / "rccrawler-a.test" / "report.json").read_text())
    assert sorted(report["sites"]) == ["a.test"] and report["sites"]["a.test"]["pages_done"] == 12
    # The same set of sites in another order is the same crawl.
    again = cli("crawl", "a.test", "b.test", *routed(server, "crawl.crawl_delay_ms=0"),
                "--no-tui", "-q", cwd=tmp_path)  # fmt: skip
    assert again.stdout.startswith("resuming: 20 done, 0 waiting; no setting changed")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "rccrawler-a.test",
        "rccrawler-a.test+b.test",
    ]
    assert status_of("a.test", cwd=tmp_path)["pages_done"] == 12
    assert status_of("b.test", "a.test", cwd=tmp_path)["pages_done"] == 20


def test_status_stop_export_and_drop_work_on_a_quick_crawl(serve, tmp_path):
    server = serve({"a.test": generated_site("a.test", 300, fanout=6)})
    url = "http://a.test/"
    with running("crawl", url, *routed(server, "crawl.crawl_delay_ms=20"), "--no-tui", "-q",
                 cwd=tmp_path) as proc:  # fmt: skip
        assert server.wait_for_hits(20, timeout=RUN_TIMEOUT, alive=lambda: proc.poll() is None)
        assert status_of(url, cwd=tmp_path)["running"] is True
        stop = cli("stop", url, cwd=tmp_path)
        assert stop.returncode == 0, stop.stderr
        out, err = proc.communicate(timeout=RUN_TIMEOUT)
    assert proc.returncode == 0 and "stopped: run the same command to resume" in out, err
    stopped = status_of("a.test", cwd=tmp_path)  # the bare domain names the same crawl
    assert stopped["running"] is False and 0 < stopped["pages_done"] < 300
    waiting = stopped["sites"][0]["waiting"]

    export = cli("export", url, cwd=tmp_path)
    assert export.returncode == 0, export.stderr
    folder = tmp_path / "rccrawler-a.test"
    rows = (folder / "a.test.skipped.csv").read_text().splitlines()
    assert sum(1 for row in rows if ",waiting," in row) == waiting

    # Found again, with this run's -s: the delay it had is gone.
    resumed = cli("crawl", url, *routed(server, "crawl.crawl_delay_ms=0"), "--no-tui", "-q",
                  cwd=tmp_path)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.startswith(
        f"resuming: {stopped['pages_done']} done, {waiting} waiting; "
        "changed: crawl_delay_ms 20 → 0\n"
    ), resumed.stdout
    paths = [hit.path for hit in server.hits if hit.path != "/robots.txt"]
    assert len(paths) == len(set(paths)) == 300  # resumed, nothing fetched twice
    # --state names it too: the quick crawl's folder or its state folder.
    assert status_of("--state", str(folder), cwd=tmp_path)["pages_done"] == 300
    assert status_of("--state", str(folder / "state"), cwd=tmp_path)["pages_done"] == 300

    dropped = cli("drop", url, "--yes", cwd=tmp_path)
    assert dropped.returncode == 0, dropped.stderr
    assert not (folder / "state").exists()
    assert (folder / "a.test.nodes.csv").exists()  # output files stay without --output
    gone = cli("status", url, cwd=tmp_path)
    assert gone.returncode == 1 and "no saved crawl" in gone.stdout


def test_a_quick_crawl_keeps_its_task_and_its_commands_find_it(serve, tmp_path):
    server = serve({"a.test": generated_site("a.test", 10, fanout=3)})
    task = ["-s", "manager=plugins.search.SearchManager", "-s", "search.workers=false"]
    first = cli("crawl", "a.test", *routed(server), *task, "--no-tui", "-q", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    # Its task's own command, by its URL: the task's arguments stay its own.
    words = cli("words", "--site", "a.test", "--limit", "3", cwd=tmp_path)
    assert words.returncode == 0, words.stderr
    assert len(words.stdout.splitlines()) == 3
    word = words.stdout.split("\t", 1)[0]
    search = cli("search", "--site", "a.test", word, "--json", cwd=tmp_path)
    assert search.returncode == 0 and json.loads(search.stdout.splitlines()[0])["url"]
    help_text = cli("serve", "--state", "rccrawler-a.test", "--help", cwd=tmp_path)
    assert help_text.returncode == 0 and "--port" in help_text.stdout
    # Run again without -s manager=: it is still the search crawl (the task defines it).
    again = cli("crawl", "a.test", *routed(server), "--no-tui", "-q", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("resuming: 10 done, 0 waiting; changed: search.workers")
    saved = json.loads((tmp_path / "rccrawler-a.test" / "state" / "last-settings.json").read_text())
    assert saved["settings"]["manager"] == "plugins.search.manager.SearchManager"
    # A start URL other than the site's root is another crawl.
    docs = cli("status", "http://a.test/p/1.html", cwd=tmp_path)
    assert docs.returncode == 1 and "rccrawler-a.test-" in docs.stdout


def test_s_overrides_a_settings_file_for_one_run(serve, tmp_path):
    import yaml

    server = serve({"a.test": generated_site("a.test", 30, fanout=3)})
    (tmp_path / "settings.yaml").write_text(yaml.safe_dump({
        "sites": ["a.test"], "state_dir": "state", "output_dir": "out",
        "crawl": {"resolve": server.resolve, "crawl_delay_ms": 0, "sitemaps": False},
    }))  # fmt: skip
    limited = cli("--config", "settings.yaml", "-s", "crawl.max_pages=5", "--no-tui", "-q",
                  cwd=tmp_path)  # fmt: skip
    assert limited.returncode == 0, limited.stderr
    assert len([h for h in server.hits if h.path != "/robots.txt"]) == 5
    full = cli("--config", "settings.yaml", "--no-tui", "-q", cwd=tmp_path)
    # The 5 pages found links to more: those wait now that the budget has no limit.
    assert re.match(r"resuming: 5 done, \d+ waiting; changed: max_pages 5 → 0\n", full.stdout)
    assert len([h for h in server.hits if h.path != "/robots.txt"]) == 30
