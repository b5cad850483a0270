"""threads.one_core: the crawl's threads on one CPU core, its processes not (Linux)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest
from support.sites import generated_site
from taskplugins import CpuRecorder

from rccrawler.config import settings_from_mapping
from rccrawler.exceptions import ConfigError

pytestmark = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs Linux and two CPUs",
)


@pytest.mark.parametrize("one_core", [True, False])
def test_one_core_keeps_every_crawl_thread_on_one_cpu_and_the_main_thread_free(
    serve, crawler, one_core
):
    allowed = frozenset(os.sched_getaffinity(0))
    CpuRecorder.seen.clear()
    server = serve({"a.test": generated_site("a.test", 40, fanout=4)})
    result = crawler.run(
        ["a.test"], server.resolve,
        threads={"downloading": 3, "parsing": 2, "one_core": one_core},
        downloading_thread="taskplugins.CpuRecordingDownloader",
        parsing_thread="taskplugins.CpuRecordingParser",
    )  # fmt: skip
    assert len(result.graph("a.test").urls) == 40  # the crawl is whole either way
    threads = {name.split("-")[0] for name in CpuRecorder.seen}
    assert threads == {"CpuRecordingDownloader", "CpuRecordingParser"}
    expected = frozenset({max(allowed)}) if one_core else allowed
    assert set(CpuRecorder.seen.values()) == {expected}
    assert frozenset(os.sched_getaffinity(0)) == allowed  # this (the main) thread: untouched


def test_a_process_started_from_a_kept_thread_takes_the_crawl_process_cpus():
    """A child inherits the CPUs of the thread that starts it: a search worker started
    by a parsing thread on one core would be on that core too, unless it asks."""
    allowed = sorted(os.sched_getaffinity(0))
    show = "import os; print(sorted(os.sched_getaffinity(0)))"
    asked = "from rccrawler.cpus import use_the_crawl_process_cpus as u; u(); " + show
    outputs: dict[str, str] = {}

    def kept_thread() -> None:
        from rccrawler.cpus import keep_this_thread_on_one_core

        keep_this_thread_on_one_core()
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
