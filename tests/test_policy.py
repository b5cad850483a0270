"""The crawl rules as pure decisions (rccrawler.policy), tested with no database at all."""

from __future__ import annotations

import pytest

from rccrawler.policy import (
    CrawlLimits,
    DownloadVerdict,
    RedirectVerdict,
    admit_links,
    backoff_s,
    breadth_first_allows,
    decide_download,
    decide_redirect,
    redirects_back_to,
    robots_stop_reason,
    throttled_delay,
    unique_links,
)
from rccrawler.records import DownloadResult, FoundLink, HostData, PageData, PageId, SkipReason

LIMITS = CrawlLimits(max_pages=0, max_download_attempts=3, max_redirects=3)


def page(attempts: int = 0, **kw: object) -> PageData:
    return PageData(id=PageId(7), host="a.test", url="http://a.test/x",
                    normalized_url="http://a.test/x", download_attempts=attempts, **kw)  # type: ignore[arg-type]  # fmt: skip


def host(**kw: object) -> HostData:
    return HostData(host="a.test", crawl_delay=0.5, min_crawl_delay=0.5, **kw)  # type: ignore[arg-type]


HTML = "text/html; charset=utf-8"


@pytest.mark.parametrize(
    ("result", "attempts", "verdict", "error"),
    [
        (DownloadResult(status=200, content_type=HTML), 0, DownloadVerdict.HTML, ""),
        (DownloadResult(status=200, content_type="application/xhtml+xml"), 0,
         DownloadVerdict.HTML, ""),
        (DownloadResult(status=200, content_type="application/pdf"), 0,
         DownloadVerdict.NOT_NODE, "not_html"),
        (DownloadResult(status=200), 0, DownloadVerdict.NOT_NODE, "not_html"),
        (DownloadResult(status=204, content_type=HTML), 0, DownloadVerdict.NOT_NODE, "not_html"),
        (DownloadResult(status=404, content_type=HTML), 0, DownloadVerdict.ERROR, "http_404"),
        (DownloadResult(status=410), 2, DownloadVerdict.ERROR, "http_410"),
        (DownloadResult(status=503), 0, DownloadVerdict.RETRY, "http_503"),
        (DownloadResult(status=503), 2, DownloadVerdict.ERROR, "http_503"),
        (DownloadResult(status=429), 1, DownloadVerdict.RETRY, "http_429"),
        (DownloadResult(status=501), 0, DownloadVerdict.ERROR, "http_501"),
        (DownloadResult(error="timeout", retryable=True), 0, DownloadVerdict.RETRY, "timeout"),
        (DownloadResult(error="timeout", retryable=True), 2, DownloadVerdict.ERROR, "timeout"),
        (DownloadResult(error="decode"), 0, DownloadVerdict.ERROR, "decode"),
    ],
)  # fmt: skip
def test_what_a_download_means(result, attempts, verdict, error):
    outcome = decide_download(page(attempts), result, host(), 1000.0, LIMITS)
    assert outcome.verdict is verdict
    assert outcome.error == error
    assert outcome.attempts == attempts + 1
    # A failed request or a 5xx says nothing about the page's body: not stored.
    assert outcome.answered == (not result.error and (result.status or 0) < 500
                                and result.status != 429)  # fmt: skip


def test_a_retry_backs_the_host_off_exponentially_unless_it_said_when():
    first = decide_download(page(0), DownloadResult(status=503), host(), 1000.0, LIMITS)
    assert first.host.next_fetch_at == 1000.5 and first.host_changed
    second = decide_download(page(1), DownloadResult(status=503), host(), 1000.0, LIMITS)
    assert second.host.next_fetch_at == 1001.0
    told = decide_download(
        page(0), DownloadResult(status=503, retry_after=120.0), host(), 1000.0, LIMITS
    )
    assert told.host.retry_after_until == 1120.0 and told.host.next_fetch_at == 0.0
    assert [backoff_s(n) for n in (1, 2, 3, 10)] == [0.5, 1.0, 2.0, 30.0]


def test_the_host_passed_in_is_never_changed():
    original = host()
    decide_download(page(0), DownloadResult(status=503, retry_after=5.0), original, 10.0, LIMITS)
    assert original.retry_after_until == 0.0 and original.next_fetch_at == 0.0


def test_auto_throttle_follows_latency_but_never_below_the_floor():
    slow = DownloadResult(status=200, content_type=HTML, elapsed=2.0, throttle=True)
    outcome = decide_download(page(0), slow, host(), 0.0, LIMITS)
    assert outcome.host.crawl_delay == 2.0 and outcome.host_changed
    fast = HostData(host="a.test", crawl_delay=2.0, min_crawl_delay=0.5)
    assert throttled_delay(fast, 0.01, ok=True) == 1.005
    assert throttled_delay(fast, 0.01, ok=False) == 2.0  # an error never lowers it
    assert throttled_delay(host(), 0.0, ok=True) == 0.5


def test_redirects_move_alias_skip_or_loop():
    moved = decide_redirect(page(), "http://a.test/y", None, None, False, LIMITS)
    assert moved.verdict is RedirectVerdict.MOVE and moved.hops == 1
    assert moved.chain == "http://a.test/x\nhttp://a.test/y"
    alias = decide_redirect(page(), "http://a.test/y", None, PageId(3), False, LIMITS)
    assert alias.verdict is RedirectVerdict.ALIAS and alias.alias_of == 3
    skip = decide_redirect(page(), "http://b.test/", SkipReason.EXTERNAL, None, False, LIMITS)
    assert skip.verdict is RedirectVerdict.SKIP and skip.reason == "external"
    back = decide_redirect(page(), "http://a.test/x", None, None, False, LIMITS)
    assert back.verdict is RedirectVerdict.LOOP and back.reason == "redirect_loop"
    deep = page(redirect_hops=3, redirect_target="http://a.test/1\nhttp://a.test/2")
    assert decide_redirect(deep, "http://a.test/9", None, None, False, LIMITS).verdict is (
        RedirectVerdict.LOOP
    )
    assert decide_redirect(page(), "http://a.test/z", None, PageId(3), True, LIMITS).verdict is (
        RedirectVerdict.LOOP
    )


def test_a_redirect_back_through_aliases_is_a_loop():
    replace_of = {PageId(3): PageId(5), PageId(5): PageId(7)}.get
    assert redirects_back_to(PageId(3), PageId(7), replace_of, 10)
    assert not redirects_back_to(PageId(3), PageId(9), replace_of, 10)
    assert not redirects_back_to(None, PageId(7), replace_of, 10)
    assert not redirects_back_to(PageId(7), PageId(7), replace_of, 10)
    assert not redirects_back_to(PageId(3), PageId(7), replace_of, 0)  # too far to tell


def test_links_are_admitted_once_within_the_budget():
    links = [FoundLink("http://a.test/1", "http://a.test/1"),
             FoundLink("http://a.test/1#x", "http://a.test/1"),
             FoundLink("http://a.test/2", "http://a.test/2"),
             FoundLink("http://a.test/3", "http://a.test/3"),
             FoundLink("http://a.test/deep", "http://a.test/deep", SkipReason.DEPTH),
             FoundLink("http://a.test/old", "http://a.test/old", SkipReason.DEPTH)]  # fmt: skip
    unique = unique_links(links)
    assert unique["http://a.test/1"].url == "http://a.test/1"  # the first spelling wins
    known = {"http://a.test/old": 4}
    free = admit_links(unique, known, 0, LIMITS)
    assert [link.normalized_url for link in free.new] == [
        "http://a.test/1", "http://a.test/2", "http://a.test/3"]  # fmt: skip
    assert free.not_queued == [("http://a.test/deep", "depth")]
    assert free.known_targets == [4] and not free.budget_hit
    tight = admit_links(unique, known, 8, CrawlLimits(max_pages=10))
    assert [link.normalized_url for link in tight.new] == ["http://a.test/1", "http://a.test/2"]
    assert ("http://a.test/3", "budget") in tight.not_queued and tight.budget_hit


def test_breadth_first_barrier_and_robots_stop_reason():
    assert breadth_first_allows(3, [])
    assert breadth_first_allows(3, [2, 5])
    assert not breadth_first_allows(4, [2, 5])
    assert robots_stop_reason(503) == "robots.txt unavailable (HTTP 503)"
    assert robots_stop_reason(None) == "robots.txt unreachable"
    assert robots_stop_reason(None, "dns") == "robots.txt unreachable (dns)"
    assert robots_stop_reason(None, "connection_refused") == (
        "robots.txt unreachable (connection refused)"
    )
