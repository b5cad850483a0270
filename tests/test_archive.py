"""The WARC archive task: every response read back with warcio, checked by its tools,
rotated by size, and whole after a kill -9 and a resume."""

from __future__ import annotations

import gzip
import hashlib
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from support.loopback import TEXT, Resource, redirect
from support.sites import generated_site
from test_resume import kill9, run, spawn, wait_for_hits
from warcio.archiveiterator import ArchiveIterator

from plugins.archive.writer import OPEN_SUFFIX, WarcArchive, complete_length, payload_digest
from rccrawler.exceptions import ConfigError
from rccrawler.manager import load_settings
from rccrawler.records import DownloadResult, HttpExchange

ARCHIVE = "plugins.archive.ArchiveManager"
NOISE = random.Random(7).randbytes(120_000)
"""Incompressible: one such body fills a 64 KiB file by itself, so two make two files."""
SITE = {
    "/robots.txt": Resource(b"User-agent: *\nDisallow: /private\n", headers=TEXT),
    "/": Resource(
        b"<a href='/a'>a</a><a href='/b'>b</a><a href='/moved'>m</a>"
        b"<a href='/missing'>x</a><a href='/zipped'>z</a>"
        b"<a href='/noise'>n</a><a href='/noise2'>n</a>"
    ),
    "/a": Resource(b"<p>the same words</p>"),
    "/b": Resource(b"<p>the same words</p>"),
    "/moved": redirect("/c"),
    "/c": Resource(b"<p>c</p>", headers=(("Content-Type", "text/html"), ("X-Kind", "c"))),
    "/zipped": Resource(b"<p>" + b"zip " * 500 + b"</p>", gzip=True),
    "/noise": Resource(NOISE, headers=(("Content-Type", "application/octet-stream"),)),
    "/noise2": Resource(NOISE[::-1], headers=(("Content-Type", "application/octet-stream"),)),
}
BODIES = {path: res.body for path, res in SITE.items()} | {
    "/missing": b"not found", "/sitemap.xml": b"not found"}  # fmt: skip


def warc_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.warc.gz"))


def records(paths: list[Path]) -> list:
    """(type, uri, warc headers, http headers, payload) of every record, in order."""
    found = []
    for path in paths:
        with open(path, "rb") as handle:
            for record in ArchiveIterator(handle):
                found.append((
                    record.rec_type,
                    record.rec_headers.get_header("WARC-Target-URI"),
                    record.rec_headers,
                    record.http_headers,
                    record.content_stream().read(),
                ))  # fmt: skip
    return found


def warcio_cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = "import sys; from warcio.cli import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", command, *args], capture_output=True, text=True, timeout=120
    )


def test_every_response_is_archived_with_its_heads_and_digest(serve, crawler):
    server = serve({"a.test": SITE})
    result = crawler.run(
        ["a.test"], server.resolve, manager=ARCHIVE, archive={"max_file_bytes": 65536},
        crawl={"sitemaps": True},
    )  # fmt: skip
    assert result.finished
    files = warc_files(result.output_dir)
    assert len(files) >= 2, "each 120 KB body closes a 64 KiB file"
    assert not list(result.output_dir.glob(f"*{OPEN_SUFFIX}"))
    every = records(files)
    # Each file opens with its warcinfo.
    for path in files:
        assert records([path])[0][0] == "warcinfo"
    fetched = [hit.path for hit in server.hits]
    assert {"/robots.txt", "/sitemap.xml", "/moved", "/missing"} <= set(fetched)
    answers = [r for r in every if r[0] in ("response", "revisit")]
    requests = [r for r in every if r[0] == "request"]
    assert sorted(r[1] for r in answers) == sorted(f"http://a.test{p}" for p in fetched)
    assert sorted(r[1] for r in requests) == sorted(r[1] for r in answers)
    by_uri = {r[1]: r for r in answers}
    for path in fetched:
        kind, _uri, warc, http, payload = by_uri[f"http://a.test{path}"]
        assert http.get_statuscode() == str(SITE.get(path, Resource(status=404)).status)
        digest = warc.get_header("WARC-Payload-Digest")
        assert digest == payload_digest(BODIES[path]), path
        if kind == "response":
            assert payload == BODIES[path]
    # Redirect and error answers are kept with their heads.
    assert by_uri["http://a.test/moved"][3].get_header("Location") == "/c"
    assert by_uri["http://a.test/missing"][3].get_statuscode() == "404"
    assert by_uri["http://a.test/c"][3].get_header("X-Kind") == "c"
    # The payload is stored decoded; the head says which encoding it came with.
    zipped = by_uri["http://a.test/zipped"][3]
    assert zipped.get_header("X-Archive-Orig-Content-Encoding") == "gzip"
    assert zipped.get_header("Content-Length") == str(len(BODIES["/zipped"]))
    # /a and /b are byte-identical: the later is a revisit of the earlier.
    kinds = {by_uri[f"http://a.test{p}"][0] for p in ("/a", "/b")}
    assert kinds == {"response", "revisit"}
    revisit = next(by_uri[f"http://a.test{p}"] for p in ("/a", "/b")
                   if by_uri[f"http://a.test{p}"][0] == "revisit")  # fmt: skip
    assert revisit[2].get_header("WARC-Refers-To-Target-URI") in {
        "http://a.test/a", "http://a.test/b"} - {revisit[1]}  # fmt: skip
    # Requests carry the headers sent.
    request = next(r for r in requests if r[1] == "http://a.test/")
    assert request[3].get_header("Host") == "a.test"
    assert request[3].get_header("User-Agent")
    assert f"{request[3].protocol} {request[3].statusline}" == "GET / HTTP/1.1"
    # Standard tools read it.
    checked = warcio_cli("check", "-v", *map(str, files))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    indexed = warcio_cli("index", "-f", "warc-type,warc-target-uri", *map(str, files))
    assert indexed.returncode == 0, indexed.stderr
    assert indexed.stdout.count('"warc-type": "response"') + indexed.stdout.count(
        '"warc-type": "revisit"'
    ) == len(fetched)


def test_kill9_then_resume_leaves_whole_files_and_writes_only_new_ones(serve, crawler, tmp_path):
    server = serve({"a.test": generated_site("a.test", 600, fanout=8)})
    config = crawler.settings_file(
        ["a.test"], server.resolve, manager=ARCHIVE, archive={"max_file_bytes": 65536}
    )
    output = crawler.root / "output"
    proc = spawn(config)
    wait_for_hits(server, 250, proc)
    kill9(proc)
    finished = {path: hashlib.sha256(path.read_bytes()).hexdigest() for path in warc_files(output)}
    assert finished, "some files were finished before the kill"
    left = list(output.glob(f"*{OPEN_SUFFIX}"))
    assert len(left) <= 1
    if left:
        # Whatever moment the kill came, model the worst: a record cut halfway.
        with open(left[0], "ab") as handle:
            handle.write(gzip.compress(b"WARC/1.1\r\n" + b"x" * 5000)[:700])
    final = run(config)
    assert final.returncode == 0, final.stderr
    assert not list(output.glob(f"*{OPEN_SUFFIX}"))
    files = warc_files(output)
    for path, digest in finished.items():
        assert hashlib.sha256(path.read_bytes()).hexdigest() == digest, "never rewritten"
    checked = warcio_cli("check", *map(str, files))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    archived = {r[1] for r in records(files) if r[0] in ("response", "revisit")}
    nodes = {n["url"] for n in result_nodes(output)}
    assert len(nodes) == 600
    assert nodes <= archived


def result_nodes(output: Path) -> list[dict[str, str]]:
    import csv

    from rccrawler.unloaders import host_file_stem

    with open(output / f"{host_file_stem('a.test')}.nodes.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def test_a_cut_file_keeps_its_whole_records(tmp_path):
    members = [gzip.compress(b"one" * 100), gzip.compress(b"two" * 100)]
    path = tmp_path / "x.gz"
    path.write_bytes(members[0] + members[1] + gzip.compress(b"three" * 1000)[:40])
    assert complete_length(path) == len(members[0]) + len(members[1])
    path.write_bytes(b"")
    assert complete_length(path) == 0


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ({"max_file_bytes": 10}, "archive.max_file_bytes"),
        ({"max_file_bytes": True}, "archive.max_file_bytes"),
        ({"prefix": "../x"}, "archive.prefix"),
        ({"rotate": 1}, "archive.rotate"),
    ],
)
def test_bad_archive_settings_name_the_key(crawler, section, key):
    config = crawler.settings_file(["a.test"], {}, manager=ARCHIVE, archive=section)
    with pytest.raises(ConfigError) as info:
        load_settings(config)
    assert info.value.key == key


def exchange_result(url: str, body: bytes) -> DownloadResult:
    head = HttpExchange(
        url=url, method="GET", target="/", request_headers=(("Host", "a.test"),),
        http_version="HTTP/1.1", reason="OK", response_headers=(("Content-Type", "text/plain"),),
    )  # fmt: skip
    return DownloadResult(status=200, content_type="text/plain", body=body, exchange=head)


def test_a_later_run_writes_revisits_for_what_earlier_files_hold(tmp_path):
    first = WarcArchive(tmp_path, "t", 1 << 20, {"software": "test"})
    first.recover()
    first.write(exchange_result("http://a.test/1", b"same"))
    first.close()
    second = WarcArchive(tmp_path, "t", 1 << 20, {"software": "test"})
    second.recover()
    second.write(exchange_result("http://a.test/2", b"same"))
    second.write(exchange_result("http://a.test/3", b"other"))
    second.close()
    assert len(second.written) == 1 and second.written[0] not in first.written
    kinds = {r[1]: r[0] for r in records(warc_files(tmp_path)) if r[0] != "request"}
    assert kinds == {None: "warcinfo", "http://a.test/1": "response",
                     "http://a.test/2": "revisit", "http://a.test/3": "response"}  # fmt: skip


def test_an_open_file_of_a_live_process_is_left_alone(tmp_path):
    live = tmp_path / f"t-20260101000000-00001-{os.getppid()}.warc.gz{OPEN_SUFFIX}"
    dead = tmp_path / f"t-20260101000000-00002-{2**22 + 12345}.warc.gz{OPEN_SUFFIX}"
    for path in (live, dead):
        path.write_bytes(gzip.compress(b"WARC/1.1\r\n")[:10])
    WarcArchive(tmp_path, "t", 1 << 20, {}).recover()
    assert live.exists()
    assert not dead.exists(), "a dead writer's file without whole records is removed"
