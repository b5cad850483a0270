"""The README and docs/ run as written.

Every shell block of README.md and docs/*.md carries a marker line (tests/support/docs.py
reads them; docs/README.md, "Writing in these pages", tells writers):

- ``<!-- run -->`` blocks run with ``bash -e``, in page order, in a temporary folder of
  the page's own: it holds a copy of ``config/`` and ``.venv`` (a link to the venv
  running the tests), HOME and TMPDIR point into it, and nothing is written elsewhere.
  The sample site is served by the documented command, ``rccrawler demo --serve``, on a
  free port; its address replaces 127.0.0.1:8765 (the default port the pages and
  config/ name) in the blocks and in the copied settings. Each block has 300 s.
- ``<!-- file: PATH -->`` blocks are written to PATH in that folder before the blocks
  below them run (a task module, a settings file).
- ``<!-- skip: why -->`` blocks are not run (a real site, a service, a command that
  serves until stopped); the reason is required.

A block that needs a real site is marked skip; the commands of "A crawl with a settings
file" (docs/commands.md) run below with config/example.yaml's sites routed to the
loopback test server. Checks that need no run: every shell block is marked, every
command is written with ``.venv/bin/`` in front, every relative link leads somewhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
import yaml
from support.docs import (
    ROOT,
    SAMPLE_SITE,
    Block,
    anchors,
    blocks,
    command_words,
    dangling_markers,
    links,
    pages,
)
from support.sites import generated_site, page_path
from webserver import Request, Resource

README = ROOT / "README.md"
DOCS = ROOT / "docs"
BLOCK_TIMEOUT = 300
VENV_BIN = Path(sys.prefix) / "bin"
BARE_COMMANDS = frozenset({"rccrawler", "python", "pip", "pytest", "warcio", "gunicorn"})
"""Commands that live in the venv: written ``.venv/bin/NAME`` so they run as written."""


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def every_block() -> list[Block]:
    return [block for page in pages() for block in blocks(page)]


def test_every_shell_block_is_marked_and_runs_as_written():
    """A shell block says whether the docs test runs it; a command names the venv's."""
    problems = []
    for block in every_block():
        if block.marker == "file" and not block.argument:
            problems.append(f"{block.where}: file marker without a path")
        if not block.is_shell:
            continue
        if block.marker not in ("run", "skip"):
            problems.append(
                f"{block.where}: shell block without <!-- run --> or <!-- skip: why -->"
            )
        if block.marker == "skip" and not block.argument:
            problems.append(f"{block.where}: skip marker without a reason")
        for first, command in command_words(block.text):
            bare = first in BARE_COMMANDS or (first == "python3" and "-m venv" not in command)
            if bare:
                problems.append(f"{block.where}: {command!r}: write .venv/bin/{first}")
            if block.marker == "run" and command.endswith("&"):
                problems.append(f"{block.where}: {command!r}: a run block starts no background job")
    for page in pages():
        problems += [
            f"{page_id(page)}:{line}: marker before no fence" for line in dangling_markers(page)
        ]
    assert not problems, "\n".join(problems)
    runnable = [block for block in every_block() if block.marker == "run"]
    assert len(runnable) >= 8 and any(block.page == README for block in runnable)


def test_every_relative_link_of_the_docs_leads_to_a_file_and_heading():
    broken = []
    for page in pages():
        for line, target in links(page):
            path, _, anchor = target.partition("#")
            goal = (page.parent / path).resolve() if path else page
            if not goal.exists():
                broken.append(f"{page_id(page)}:{line}: {target}: no such file")
            elif anchor and goal.suffix == ".md" and anchor not in anchors(goal):
                broken.append(f"{page_id(page)}:{line}: {target}: no such heading")
    assert not broken, "\n".join(broken)


def test_the_readme_is_a_first_look():
    """At most about 300 lines; the reference lives in docs/ (issue 39)."""
    assert len(README.read_text().splitlines()) <= 300


def runnable_pages() -> list[Path]:
    return [page for page in pages() if any(b.marker == "run" for b in blocks(page))]


@pytest.mark.parametrize("page", runnable_pages(), ids=page_id)
def test_the_runnable_blocks_of_a_page_run_in_order_against_the_sample_site(page, tmp_path):
    assert (VENV_BIN / "rccrawler").exists(), (
        f"no rccrawler beside {sys.executable}: run the tests with the venv's python"
    )
    work = tmp_path / "work"
    work.mkdir()
    (work / ".venv").symlink_to(sys.prefix)
    env = {**os.environ, "HOME": str(tmp_path / "home"), "TMPDIR": str(tmp_path / "tmp"),
           "PYTHONDONTWRITEBYTECODE": "1"}  # fmt: skip
    for folder in ("home", "tmp"):
        (tmp_path / folder).mkdir()
    env.pop("PYTHONPATH", None)
    with sample_site(work, env) as address:
        shutil.copytree(ROOT / "config", work / "config")
        for settings in (work / "config").glob("*.yaml"):
            settings.write_text(settings.read_text().replace(SAMPLE_SITE, address))
        ran = 0
        for block in blocks(page):
            text = block.text.replace(SAMPLE_SITE, address)
            if block.marker == "file":
                target = work / block.argument
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
            elif block.marker == "run":
                run_block(block, text, work, env)
                ran += 1
    assert ran == sum(1 for b in blocks(page) if b.marker == "run")


def run_block(block: Block, text: str, work: Path, env: dict[str, str]) -> None:
    """Run one block with ``bash -e`` in ``work``; fail naming it, with its output."""
    proc = subprocess.Popen(
        ["bash", "-e", "-c", text], cwd=work, env=env, text=True, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        output, _ = proc.communicate(timeout=BLOCK_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        pytest.fail(f"{block.where}: still running after {BLOCK_TIMEOUT} s:\n{text}\n{output}")
    finally:
        # Anything the block left running (it should leave nothing) goes with it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, f"{block.where}: exit {proc.returncode}:\n{text}\n{output}"


@contextlib.contextmanager
def sample_site(work: Path, env: dict[str, str]) -> Iterator[str]:
    """``rccrawler demo --serve --port 0`` as the pages document it, run in ``work``; yields
    the address it prints (it listens before it prints, so no request comes too early)."""
    proc = subprocess.Popen(
        [".venv/bin/rccrawler", "demo", "--serve", "--port", "0"], cwd=work, env=env,
        text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        deadline = time.monotonic() + 120
        line = ""
        while not line and time.monotonic() < deadline and proc.poll() is None:
            if select.select([proc.stdout], [], [], 1)[0]:
                line = proc.stdout.readline()
        found = re.search(r"on (127\.0\.0\.1:\d+) ", line)
        assert found, f"rccrawler demo --serve said {line!r}"
        yield found.group(1)
    finally:
        proc.terminate()
        _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err


@pytest.mark.both_backends
def test_the_task_example_keeps_and_reads_its_own_results(serve, tmp_path, storage):
    code = re.search(r"```python\n(# mytask\.py\n.*?)```", (DOCS / "tasks.md").read_text(), re.S)
    assert code, "docs/tasks.md lost its task example"
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
            capture_output=True, text=True, timeout=120, cwd=ROOT,
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


def section(page: Path, title: str) -> str:
    text = page.read_text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def shown_commands(page: Path, title: str) -> list[str]:
    """The commands of a section's shell blocks, comments dropped."""
    found = re.findall(r"```sh\n(.*?)```", section(page, title), re.S)
    return [line.split("#")[0].strip() for block in found for line in block.splitlines()]


def rccrawler(command: str, cwd: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    assert command.startswith(".venv/bin/rccrawler "), command
    args = [sys.executable, "-m", "rccrawler", *shlex.split(command)[1:], *extra]
    return subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=cwd)


def test_the_crawl_commands_run_as_written(serve, tmp_path):
    """Each command of docs/commands.md's "A quick crawl" and "A crawl with a settings
    file", in a folder holding the shipped config/example.yaml with its sites routed to
    the loopback server (and no delay). One page of the second crawl is held until the
    crawl has seen its stop, so it runs while status, export and --fresh look at it,
    however slow the machine."""
    page = DOCS / "commands.md"
    commands = [*shown_commands(page, "A quick crawl"),
                *shown_commands(page, "A crawl with a settings file")]  # fmt: skip
    config = "config/example.yaml"
    assert commands == [
        ".venv/bin/rccrawler crawl docs.example.org",
        f".venv/bin/rccrawler --config {config}",
        f".venv/bin/rccrawler status --config {config}",
        f".venv/bin/rccrawler export --config {config}",
        f".venv/bin/rccrawler stop --config {config}",
        f".venv/bin/rccrawler --config {config} --fresh",
    ]
    quick, crawl, status, export, stop, fresh = commands
    site = dict(generated_site("docs.example.org", 200))
    armed, reached, gate = threading.Event(), threading.Event(), threading.Event()
    held = site[page_path(20)]

    def held_until_the_gate_opens(_request: Request) -> Resource:
        if armed.is_set():
            reached.set()
            gate.wait(600)
        return held

    site[page_path(20)] = held_until_the_gate_opens
    server = serve({"docs.example.org": site})

    # The quick crawl: defaults, no settings file, its own folder.
    resolve = json.dumps(server.resolve)
    proc = rccrawler(quick, tmp_path, "-s", f"crawl.resolve={resolve}", "-s",
                     "crawl.crawl_delay_ms=0", "-q")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    folder = tmp_path / "rccrawler-docs.example.org"
    assert (folder / "docs.example.org.nodes.csv").exists() and (folder / "state").is_dir()

    settings = yaml.safe_load((ROOT / config).read_text())
    settings["sites"] = ["docs.example.org"]
    # No delay; a held request waits as long as the test needs (2 x timeout_s at most).
    settings["crawl"].update(resolve=server.resolve, crawl_delay_ms=0, timeout_s=300)
    (tmp_path / "config").mkdir()
    (tmp_path / config).write_text(yaml.safe_dump(settings))
    output = tmp_path / "output" / "example"

    armed.set()
    args = [sys.executable, "-m", "rccrawler", *shlex.split(crawl)[1:], "--no-tui"]
    with subprocess.Popen(args, cwd=tmp_path, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as running:  # fmt: skip
        try:
            # Page 20 is in flight: the crawl cannot end until the gate opens.
            deadline = time.monotonic() + 120
            while not reached.wait(0.1) and running.poll() is None:
                assert time.monotonic() < deadline, "the crawl never asked for page 20"
            assert reached.is_set(), running.communicate()
            shown = rccrawler(status, tmp_path)
            assert shown.returncode == 0 and "docs.example.org" in shown.stdout
            assert "running" in shown.stdout
            exported = rccrawler(export, tmp_path)
            assert exported.returncode == 0 and (output / "docs.example.org.nodes.csv").exists()
            refused = rccrawler(fresh, tmp_path)
            assert refused.returncode == 2 and "in use" in refused.stderr
            assert rccrawler(stop, tmp_path).returncode == 0
            assert running.stderr is not None
            seen = read_until(running.stderr, "stop requested (rccrawler stop)", timeout=120)
            assert "stop requested" in seen, f"the crawl never saw its stop:\n{seen}"
        finally:
            gate.set()  # the held page is answered: the crawl stops once it is stored
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
        r"```\n(rccrawler: bad config: .*)\n```", (DOCS / "settings.md").read_text()
    )
    assert shown_line and bad.returncode == 2
    assert bad.stderr.strip() == shown_line.group(1)


def read_until(stream: IO[str], text: str, timeout: float) -> str:
    """Read ``stream`` until ``text`` comes, it ends or ``timeout`` seconds pass; what
    was read. (Its file descriptor, not its buffer: select() sees only the former.)"""
    deadline = time.monotonic() + timeout
    read = b""
    while text.encode() not in read and (left := deadline - time.monotonic()) > 0:
        if select.select([stream], [], [], min(left, 1.0))[0]:
            chunk = os.read(stream.fileno(), 65536)
            if not chunk:
                break
            read += chunk
    return read.decode(errors="replace")


def test_the_error_kinds_the_docs_list_are_the_ones_the_crawler_names():
    from rccrawler.web.fetch import ERROR_KINDS

    kinds = section(DOCS / "output.md", "Error kinds")
    listed = re.findall(r"`([a-zN_]+)`", "".join(re.findall(r"^\| (.*?) \|", kinds, re.M)))
    assert listed == list(ERROR_KINDS)
    # ...and every name the crawler's code gives an error is one of them.
    code = "".join(p.read_text() for p in (ROOT / "rccrawler").rglob("*.py"))
    named = re.findall(
        r'FetchError\("(\w+)"|error="(\w+)"|^ +\(.*, "(\w+)", (?:True|False)\),$', code, re.M
    )
    assert {name for names in named for name in names if name} <= set(ERROR_KINDS)


def test_the_skip_reasons_the_docs_list_are_the_ones_the_crawler_writes():
    from rccrawler.records import SkipReason

    text = (DOCS / "output.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `H.skipped"))
    listed = re.findall(r"`([a-z_]+)`", row.split("with why", 1)[1])
    # A byte-identical page is no skipped URL: it is a node with duplicate_of set.
    written = {reason.value for reason in SkipReason} - {SkipReason.DUPLICATE.value}
    assert sorted(listed) == sorted(written)
