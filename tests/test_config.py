"""A bad settings.yaml gets one line naming the key, exit code 2, and nothing written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

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
    ({"crawl": {"max_depth": 2}}, "sites"),
    ({**GOOD, "sites": []}, "sites"),
    ({**GOOD, "sites": ["not a host"]}, "sites[0]"),
    ({**GOOD, "manager": "plugins.webgraph.NoSuchManager"}, "manager"),
    ({**GOOD, "manager": "nosuchpackage.Manager"}, "manager"),
    ({**GOOD, "manager": "rccrawler.records.PageData"}, "manager"),
    ({**GOOD, "parsing_thread": "rccrawler.threads.DownloadingThread"}, "parsing_thread"),
    ({**GOOD, "unloaders": ["nowhere.Unloader"]}, "unloaders[0]"),
    ({**GOOD, "storage": "mysql://x"}, "storage"),
    ({**GOOD, "parser": "regex"}, "parser"),
    ({**GOOD, "crawl": {"resolve": {"a.test": "127.0.0.1"}}}, "crawl.resolve.a.test"),
    ({**GOOD, "crawl": {"proxy": "socks5://x:1"}}, "crawl.proxy"),
]


def run_cli(*args: str, cwd) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rccrawler", *args],
                          capture_output=True, text=True, timeout=60, cwd=cwd)  # fmt: skip


@pytest.mark.parametrize(("settings", "key"), CASES, ids=[key for _, key in CASES])
def test_bad_settings_exit_2_naming_the_key(tmp_path, settings, key):
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
