"""threads.one_core: the crawl's threads on one CPU core (but for large parses), its
processes not (Linux)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest
from taskplugins import CpuRecorder
from webserver import Resource

from rccrawler.config import settings_from_mapping
from rccrawler.cpus import LARGE_PARSE_BYTES
from rccrawler.exceptions import ConfigError

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs Linux and two CPUs",
)


def site_with_a_large_page() -> dict[str, Resource]:
    """Small pages, and one over LARGE_PARSE_BYTES (lexbor's work, worth the other core)."""
    small = [f"/p{n}" for n in range(12)]
    links = "".join(f'<a href="{path}">{path}</a> ' for path in [*small, "/large"])
    site = {"/": Resource(f"<html><body>{links}</body></html>".encode())}
    for path in small:
        site[path] = Resource(f'<html><body><a href="/">home</a> {path}</body></html>'.encode())
    filler = "<p>words of a long page</p>" * (LARGE_PARSE_BYTES // 20)
    site["/large"] = Resource(f'<html><body><a href="/">home</a>{filler}</body></html>'.encode())
    return site


@pytest.mark.parametrize("one_core", [True, False])
def test_one_core_keeps_the_crawl_threads_on_one_cpu_but_large_parses(serve, crawler, one_core):
    allowed = frozenset(os.sched_getaffinity(0))
    CpuRecorder.seen.clear()
    server = serve({"a.test": site_with_a_large_page()})
    result = crawler.run(
        ["a.test"], server.resolve,
        threads={"downloading": 3, "parsing": 2, "one_core": one_core},
        downloading_thread="taskplugins.CpuRecordingDownloader",
        parsing_thread="taskplugins.CpuRecordingParser",
    )  # fmt: skip
    assert len(result.graph("a.test").urls) == 14  # the crawl is whole either way
    one = frozenset({max(allowed)}) if one_core else allowed
    seen = CpuRecorder.seen
    downloads = {cpus for (kind, _url), cpus in seen.items() if kind == "download"}
    assert len(downloads) == 1 and downloads == {one}
    assert seen[("parse", "http://a.test/large")] == allowed
    small = {cpus for (kind, url), cpus in seen.items() if kind == "parse" and "large" not in url}
    assert small == {one}  # back on the core after the large page, whichever thread had it
    assert frozenset(os.sched_getaffinity(0)) == allowed  # this (the main) thread: untouched


def test_a_process_started_from_a_kept_thread_takes_the_crawl_process_cpus():
    """A child inherits the CPUs of the thread that starts it: a search worker started
    by a parsing thread on one core would be on that core too, unless it asks."""
    allowed = sorted(os.sched_getaffinity(0))
    show = "import os; print(sorted(os.sched_getaffinity(0)))"
    asked = "from rccrawler.cpus import use_the_crawl_process_cpus as u; u(); " + show
    outputs: dict[str, str] = {}

    def kept_thread() -> None:
        from rccrawler.cpus import thread_cores

        assert thread_cores() is not None  # kept on one core
        for name, code in (("inherited", show), ("asked", asked)):
            outputs[name] = subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                check=True,
            ).stdout.strip()  # fmt: skip

    thread = threading.Thread(target=kept_thread)
    thread.start()
    thread.join(120)
    assert outputs == {"inherited": str([max(allowed)]), "asked": str(allowed)}


@pytest.mark.parametrize("value", [1, "yes", None])
def test_one_core_must_be_true_or_false(value):
    with pytest.raises(ConfigError) as caught:
        settings_from_mapping({"sites": ["a.test"], "threads": {"one_core": value}})
    assert caught.value.key == "threads.one_core"


def test_one_core_is_off_unless_asked():
    assert settings_from_mapping({"sites": ["a.test"]}).one_core is False
    assert settings_from_mapping({"sites": ["a.test"], "threads": {"one_core": True}}).one_core


def test_a_refused_core_leaves_the_thread_running_where_it_was(monkeypatch):
    """A container may forbid changing CPUs: the thread goes on unkept, nothing raises."""
    from rccrawler import cpus

    asked: list[object] = []

    def refuse(pid: int, mask: object) -> None:
        asked.append(mask)
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(cpus.os, "sched_setaffinity", refuse)
    assert cpus.thread_cores() is None
    cores = cpus.ThreadCores()
    cores.place_parse(cpus.LARGE_PARSE_BYTES - 1)  # refused: logged, not raised
    cores.place_parse(0)  # the same core: not asked again
    assert len(asked) == 2  # thread_cores() once, the first small parse once
