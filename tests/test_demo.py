"""`rccrawler demo` end to end, as a user runs it, checked against the sample site's facts."""

from __future__ import annotations

import csv
import html
import http.client
import json
import re
import socket
import subprocess
import sys
import threading
from collections import Counter
from typing import Any

from support.sites import generated_site

from rccrawler.demo import DEMO_QUERY, self_check
from rccrawler.demo.server import DemoServer, serving
from rccrawler.demo.site import DEMO_HOST, demo_facts, demo_sites
from rccrawler.web.html import parse_html


def test_demo_crawls_the_sample_site(tmp_path):
    out = tmp_path / "demo"
    proc = subprocess.run(
        [sys.executable, "-m", "rccrawler", "demo", "--output", str(out), "--no-tui"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "results in" in proc.stdout and f"{DEMO_HOST}:" in proc.stdout
    assert "as a correct crawl of the sample site finds" in proc.stdout  # its self-check
    facts = demo_facts()
    with open(out / f"{DEMO_HOST}.nodes.csv", newline="") as handle:
        nodes = list(csv.DictReader(handle))
    paths = {row["url"].removeprefix(f"http://{DEMO_HOST}") for row in nodes}
    assert paths == set(facts.nodes)
    assert sum(1 for row in nodes if row["duplicate_of"]) == len(facts.duplicates) - 1
    with open(out / f"{DEMO_HOST}.skipped.csv", newline="") as handle:
        skipped = {row["url"]: row["reason"] for row in csv.DictReader(handle)}
    base = f"http://{DEMO_HOST}"
    assert skipped[base + facts.broken] == "error"
    assert skipped[base + facts.offsite_redirect] == "subdomain"
    assert skipped[base + facts.robots_redirect] == "robots"
    assert skipped[f"http://{facts.blog_host}/"] == "subdomain"
    for path in facts.not_html:
        assert skipped[base + path] == "not_html"
    for path in facts.disallowed:
        if path not in facts.never_found:
            assert skipped[base + path] == "robots"
    for path in facts.never_found:
        assert base + path not in skipped and path not in paths
    for scheme_link in facts.ignored_schemes:
        assert skipped[scheme_link] == "scheme"
    assert "redirect_loop" in skipped.values()
    report = json.loads((out / "report.json").read_text())
    site = report["sites"][DEMO_HOST]
    assert report["finished"] is True
    assert site["pages_done"] == len(facts.nodes) - (len(facts.duplicates) - 1)
    assert site["stop_reason"] == "no waiting links left"
    assert site["skipped_by_reason"] == dict(Counter(skipped.values()))
    assert max(int(row["level"]) for row in nodes) == facts.max_level
    # The GraphML has the CSV's nodes: the pages done and their duplicates.
    graphml = (out / f"{DEMO_HOST}.graphml").read_text()
    assert graphml.count("<node ") == len(nodes) == site["pages_done"] + site["duplicates"]
    check_sample_search(proc.stdout, {row["url"] for row in nodes if not row["duplicate_of"]})


def check_sample_search(stdout: str, node_urls: set[str]) -> None:
    """The demo ends with its sample search: three distinct pages of the graph, each a
    match of the query as the server's page says (its title as the hit's title)."""
    assert f"sample search for {DEMO_QUERY!r}, best 3:" in stdout
    hits = re.findall(r"^  (\d)\. (.*) \((http://\S+)\)$", stdout, re.M)
    assert [rank for rank, _title, _url in hits] == ["1", "2", "3"]
    pages = demo_sites()[DEMO_HOST]
    urls = [url for _rank, _title, url in hits]
    assert len(set(urls)) == 3 and set(urls) <= node_urls
    for _rank, title, url in hits:
        body = pages[url.removeprefix(f"http://{DEMO_HOST}")].body.decode()
        assert f"<title>{html.escape(title, quote=False)}</title>" in body
        words = re.findall(r"\w+", re.sub(r"<[^>]*>", " ", body).lower())
        assert "parser" in words or any(word.startswith("robots") for word in words), url


def _html_bodies():
    for site in demo_sites().values():
        for path, res in site.items():
            if getattr(res, "headers", None) and "html" in dict(res.headers).get(
                "Content-Type", ""
            ):
                yield path, res.body
    site = generated_site("g.test", 300, fanout=7, extra_unvisited_links=3)
    for path in site:
        yield path, site[path].body


def test_both_parser_backends_extract_the_same_links_from_every_test_page():
    count = 0
    for path, body in _html_bodies():
        url = f"http://{DEMO_HOST}{path}"
        lexbor = parse_html(body, url, "text/html", parser="lexbor")
        html5 = parse_html(body, url, "text/html", parser="html5lib")
        assert lexbor.links == html5.links, path
        assert lexbor.base_url == html5.base_url, path
        count += 1
    assert count > 400


def test_the_demo_self_check_names_a_wrong_result():
    facts = demo_facts()
    right = len(facts.nodes) - (len(facts.duplicates) - 1)
    good = {"pages_done": right, "duplicates": len(facts.duplicates) - 1}
    assert self_check(good).startswith("check: ")
    assert self_check({**good, "pages_done": right - 1}).startswith("check FAILED")
    assert self_check({**good, "duplicates": 0}).startswith("check FAILED")


def test_the_demo_server_sends_an_answer_without_waiting_for_the_clients_ack():
    """An answer leaves in two writes (headers, then body); with Nagle's algorithm on a
    kept-alive connection the body waited for the crawler's delayed ACK, 40 ms an
    answer, half of the demo's time. The server's side of the connection says."""
    nodelay: list[int] = []
    done = threading.Event()

    class Watched(DemoServer):
        def finish_request(self, request: Any, client_address: Any) -> None:
            super().finish_request(request, client_address)  # every answer on it
            nodelay.append(request.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            done.set()

    with serving(Watched(demo_sites())) as server:
        client = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=10)
        for path in ("/", "/docs/configuration/"):
            client.request("GET", path, headers={"Host": DEMO_HOST})
            answer = client.getresponse()
            assert answer.status == 200 and answer.read()
        client.close()
        assert done.wait(10)
    assert nodelay == [1]


def test_demo_serve_serves_the_sample_site_until_stopped_and_names_a_port_in_use(tmp_path):
    """``rccrawler demo --serve`` (the docs' sample site): it prints its address once it
    listens, answers as the demo's server does, and ends with 0 on SIGTERM; a second one
    on the same port exits 2 naming it."""
    command = [sys.executable, "-m", "rccrawler", "demo", "--serve", "--port", "0"]
    with subprocess.Popen(command, cwd=tmp_path, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as proc:  # fmt: skip
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            found = re.search(
                r"on 127\.0\.0\.1:(\d+) \(demo\.test, blog\.demo\.test, other\.test\)", line
            )
            assert found, line
            port = int(found.group(1))
            client = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            client.request("GET", "/", headers={"Host": DEMO_HOST})
            answer = client.getresponse()
            assert answer.status == 200 and answer.read() == demo_sites()[DEMO_HOST]["/"].body
            client.close()
            taken = subprocess.run([*command[:-1], str(port)], capture_output=True, text=True,
                                   timeout=120, cwd=tmp_path)  # fmt: skip
            assert taken.returncode == 2 and f"127.0.0.1:{port} is in use" in taken.stderr
        finally:
            proc.terminate()
            proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert list(tmp_path.iterdir()) == []  # it serves; it writes nothing
