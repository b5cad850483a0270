"""The README's promises hold: its task example runs as written, on every backend."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml
from support.sites import generated_site
from webserver import Resource

README = Path(__file__).parent.parent / "README.md"


@pytest.mark.both_backends
def test_the_readme_task_example_keeps_and_reads_its_own_results(serve, tmp_path, storage):
    code = re.search(r"```python\n(# mytask\.py\n.*?)```", README.read_text(), re.S)
    assert code, "the README lost its task example"
    (tmp_path / "mytask.py").write_text(code.group(1))
    server = serve({"a.test": {
        "/": Resource(b"<title>Home</title><p>one two three</p><a href='/b'>b</a>"),
        "/b": Resource(b"<title>Page B</title><p>just four words here</p>"),
    }})  # fmt: skip
    name = f"readme-{uuid.uuid4().hex}"
    settings = {"manager": "mytask.TitleManager", "sites": ["a.test"], "storage": storage,
                "name": name, "state_dir": str(tmp_path / "state"),
                "output_dir": str(tmp_path / "out"),
                "crawl": {"crawl_delay_ms": 0, "resolve": server.resolve}}  # fmt: skip
    config = tmp_path / "settings.yaml"
    config.write_text(yaml.safe_dump(settings))
    try:
        # No PYTHONPATH, and run from elsewhere: mytask.py is found beside settings.yaml.
        proc = subprocess.run(
            [sys.executable, "-m", "rccrawler", "--config", str(config), "-q"],
            capture_output=True, text=True, timeout=120, cwd=README.parent,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        rows = sorted((tmp_path / "out" / "titles.tsv").read_text().splitlines())
        # Titles and word counts ("one two three b", "just four words here").
        assert rows == ["http://a.test/\t4\tHome", "http://a.test/b\t4\tPage B"]
        assert (tmp_path / "out" / "a.test.nodes.csv").exists()
    finally:
        if storage != "sqlite":
            from rccrawler.data.postgres import PostgresDataManager, schema_for

            PostgresDataManager.drop(storage, schema_for(name))


def section(title: str) -> str:
    text = README.read_text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def shown_commands(title: str) -> list[str]:
    """The commands of a README section's ``sh`` blocks, comments dropped."""
    blocks = re.findall(r"```sh\n(.*?)```", section(title), re.S)
    return [line.split("#")[0].strip() for block in blocks for line in block.splitlines()]


def rccrawler(command: str, cwd: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "rccrawler", *shlex.split(command)[1:], *extra]
    return subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=cwd)


def test_crawling_your_own_sites_runs_as_written(serve, tmp_path):
    """Each command of "Crawling your own sites", in a folder holding the shipped
    config/example.yaml with its sites routed to the loopback server (the one change)."""
    commands = shown_commands("Crawling your own sites")
    config = "config/example.yaml"
    assert commands == [
        "rccrawler crawl docs.example.org",
        f"rccrawler --config {config}",
        f"rccrawler status --config {config}",
        f"rccrawler export --config {config}",
        f"rccrawler stop --config {config}",
        f"rccrawler --config {config} --fresh",
    ]
    quick, crawl, status, export, stop, fresh = commands
    server = serve({"docs.example.org": generated_site("docs.example.org", 200)})

    # The quick crawl: defaults, no settings file, its own folder.
    resolve = json.dumps(server.resolve)
    proc = rccrawler(quick, tmp_path, "-s", f"crawl.resolve={resolve}", "-s",
                     "crawl.crawl_delay_ms=0", "-q")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    folder = tmp_path / "rccrawler-docs.example.org"
    assert (folder / "docs.example.org.nodes.csv").exists() and (folder / "state").is_dir()

    settings = yaml.safe_load((README.parent / config).read_text())
    settings["sites"] = ["docs.example.org"]
    settings["crawl"].update(resolve=server.resolve, crawl_delay_ms=50)
    (tmp_path / "config").mkdir()
    (tmp_path / config).write_text(yaml.safe_dump(settings))
    output = tmp_path / "output" / "example"

    args = [sys.executable, "-m", "rccrawler", *shlex.split(crawl)[1:], "-q"]
    with subprocess.Popen(args, cwd=tmp_path, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as running:  # fmt: skip
        # 200 requests of the quick crawl, then 30 of this one.
        assert server.wait_for_hits(
            230, "docs.example.org", timeout=120, alive=lambda: running.poll() is None
        )
        shown = rccrawler(status, tmp_path)
        assert shown.returncode == 0 and "docs.example.org" in shown.stdout
        assert "running" in shown.stdout
        exported = rccrawler(export, tmp_path)
        assert exported.returncode == 0 and (output / "docs.example.org.nodes.csv").exists()
        refused = rccrawler(fresh, tmp_path)
        assert refused.returncode == 2 and "in use" in refused.stderr
        assert rccrawler(stop, tmp_path).returncode == 0
        out, _err = running.communicate(timeout=120)
    assert running.returncode == 0
    assert "stopped: run the same command to resume" in out
    assert "stopped" in rccrawler(status, tmp_path).stdout
    nothing = rccrawler(stop, tmp_path)
    assert nothing.returncode == 1 and "no crawl is running" in nothing.stderr

    resumed = rccrawler(crawl, tmp_path, "-q")
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads((output / "report.json").read_text())
    assert report["sites"]["docs.example.org"]["pages_done"] == 200
    notes = output / "notes.txt"
    notes.write_text("mine")
    again = rccrawler(fresh, tmp_path, "-q")
    assert again.returncode == 0, again.stderr
    assert notes.read_text() == "mine"
    assert json.loads((output / "report.json").read_text())["runs"] == 1

    # The bad-config line, word for word.
    settings["crawl"]["timeout_s"] = "soon"
    (tmp_path / config).write_text(yaml.safe_dump(settings))
    bad = rccrawler(crawl, tmp_path)
    shown_line = re.search(
        r"```\n(rccrawler: bad config: .*)\n```", section("Crawling your own sites")
    )
    assert shown_line and bad.returncode == 2
    assert bad.stderr.strip() == shown_line.group(1)


def test_the_error_kinds_the_readme_lists_are_the_ones_the_crawler_names():
    from rccrawler.web.fetch import ERROR_KINDS

    section = README.read_text().split("### Error kinds", 1)[1].split("\n#", 1)[0]
    listed = re.findall(r"`([a-zN_]+)`", "".join(re.findall(r"^\| (.*?) \|", section, re.M)))
    assert listed == list(ERROR_KINDS)
    # ...and every name the crawler's code gives an error is one of them.
    code = "".join(p.read_text() for p in (README.parent / "rccrawler").rglob("*.py"))
    named = re.findall(
        r'FetchError\("(\w+)"|error="(\w+)"|^ +\(.*, "(\w+)", (?:True|False)\),$', code, re.M
    )
    assert {name for names in named for name in names if name} <= set(ERROR_KINDS)


def test_the_skip_reasons_the_readme_lists_are_the_ones_the_crawler_writes():
    from rccrawler.records import SkipReason

    row = next(line for line in README.read_text().splitlines() if line.startswith("| `H.skipped"))
    listed = re.findall(r"`([a-z_]+)`", row.split("with why", 1)[1])
    # A byte-identical page is no skipped URL: it is a node with duplicate_of set.
    written = {reason.value for reason in SkipReason} - {SkipReason.DUPLICATE.value}
    assert sorted(listed) == sorted(written)
