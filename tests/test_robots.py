"""RFC 9309 conformance of rccrawler.web.robots, plus cases in the style of Google's spec tests."""

from __future__ import annotations

import threading
import tracemalloc

import pytest

from rccrawler.web import robots
from rccrawler.web.robots import (
    MAX_ROBOTS_BYTES,
    RobotsRules,
    meta_directives,
    product_token,
    robots_tag_directives,
)

UA = "rccrawler/0.1 (+https://example.test/bot)"

# RFC 9309 §5.1, "Simple Example".
RFC_5_1 = """\
User-Agent: *
Disallow: *.gif$
Disallow: /example/
Allow: /publications/

User-Agent: foobot
Disallow:/
Allow:/example/page.html
Allow:/example/allowed.gif

User-Agent: barbot
User-Agent: bazbot
Disallow: /example/page.html

User-Agent: quxbot

EOF
"""


def allowed(robots: str, url: str, agent: str = "rccrawler") -> bool:
    return RobotsRules.parse(robots, agent).allowed(url)


# --- product_token -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("user_agent", "token"),
    [
        ("rccrawler/0.1 (+https://x/bot)", "rccrawler"),
        ("rccrawler", "rccrawler"),
        ("RC_Crawler-2/3.0", "RC_Crawler-2"),
        ("  rccrawler/0.1", "rccrawler"),
        ("Mozilla/5.0 (compatible)", "Mozilla"),
        ("", ""),
        ("/0.1", ""),
    ],
)
def test_product_token(user_agent: str, token: str) -> None:
    assert product_token(user_agent) == token


# --- RFC 9309 §5.1 and §5.2 ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("agent", "path", "expected"),
    [
        # "*" group: foobot-like rules do not leak into it.
        ("otherbot", "/", True),
        ("otherbot", "/example/", False),
        ("otherbot", "/example/page.html", False),
        ("otherbot", "/publications/", True),
        ("otherbot", "/img/pic.gif", False),
        ("otherbot", "/img/pic.gif?x=1", True),
        # foobot: its own group only, Allow lines are more specific than Disallow: /.
        ("foobot", "/", False),
        ("foobot", "/example/page.html", True),
        ("foobot", "/example/allowed.gif", True),
        ("foobot", "/example/other.gif", False),
        ("foobot", "/publications/", False),
        # barbot and bazbot share one group (consecutive user-agent lines).
        ("barbot", "/example/page.html", False),
        ("bazbot", "/example/page.html", False),
        ("bazbot", "/example/", True),
        ("bazbot", "/img/pic.gif", True),
        # quxbot has an empty group: everything is allowed and "*" is not used.
        ("quxbot", "/example/", True),
        ("quxbot", "/img/pic.gif", True),
    ],
)
def test_rfc_5_1_simple_example(agent: str, path: str, expected: bool) -> None:
    assert allowed(RFC_5_1, path, agent) is expected


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/example/page/", True),
        ("/example/page/other.html", True),
        ("/example/page/disallowed.gif", False),
    ],
)
def test_rfc_5_2_longest_match(path: str, expected: bool) -> None:
    robots = "User-Agent: foobot\nAllow: /example/page/\nDisallow: /example/page/disallowed.gif\n"
    assert allowed(robots, path, "foobot") is expected


# --- group selection -----------------------------------------------------------------------


def test_group_selection_is_case_insensitive() -> None:
    robots = "User-agent: RCCrawler\nDisallow: /mine\n\nUser-agent: *\nDisallow: /all\n"
    rules = RobotsRules.parse(robots, "rccrawler/0.1")
    assert not rules.allowed("/mine")
    assert rules.allowed("/all")


def test_falls_back_to_star_group() -> None:
    robots = "User-agent: otherbot\nDisallow: /other\n\nUser-agent: *\nDisallow: /all\n"
    rules = RobotsRules.parse(robots, UA)
    assert rules.allowed("/other")
    assert not rules.allowed("/all")


def test_no_matching_group_and_no_star_allows_everything() -> None:
    assert allowed("User-agent: otherbot\nDisallow: /\n", "/anything")


@pytest.mark.parametrize("group_agent", ["rc", "rccrawler-beta", "rccrawlers", "crawler"])
def test_group_agent_must_equal_product_token(group_agent: str) -> None:
    robots = f"User-agent: {group_agent}\nDisallow: /\n\nUser-agent: *\nDisallow: /star\n"
    rules = RobotsRules.parse(robots, UA)
    assert rules.allowed("/page")
    assert not rules.allowed("/star")


def test_group_agent_line_with_version_matches_token() -> None:
    robots = "User-agent: rccrawler/2.0\nDisallow: /x\n"
    assert not allowed(robots, "/x")


def test_star_with_suffix_is_not_the_global_group() -> None:
    assert allowed("User-agent: *bot\nDisallow: /\n", "/page")


def test_groups_for_same_agent_are_merged() -> None:
    robots = (
        "User-agent: rccrawler\nDisallow: /a\n\n"
        "User-agent: *\nDisallow: /b\n\n"
        "User-agent: rccrawler\nDisallow: /c\n"
    )
    rules = RobotsRules.parse(robots, UA)
    assert not rules.allowed("/a")
    assert rules.allowed("/b")
    assert not rules.allowed("/c")


def test_merged_groups_apply_longest_match_across_groups() -> None:
    robots = (
        "User-agent: rccrawler\nDisallow: /shop\n\nUser-agent: rccrawler\nAllow: /shop/public\n"
    )
    rules = RobotsRules.parse(robots, UA)
    assert not rules.allowed("/shop/cart")
    assert rules.allowed("/shop/public/item")


def test_consecutive_user_agents_share_one_group() -> None:
    robots = "User-agent: a\nUser-agent: rccrawler\nUser-agent: b\nDisallow: /x\n"
    assert not allowed(robots, "/x")


def test_blank_lines_and_comments_do_not_split_user_agent_run() -> None:
    robots = "User-agent: a\n\n# comment\nUser-agent: rccrawler\n\nDisallow: /x\n"
    assert not allowed(robots, "/x")


def test_user_agent_after_rules_starts_new_group() -> None:
    robots = "User-agent: rccrawler\nDisallow: /x\nUser-agent: other\nDisallow: /y\n"
    rules = RobotsRules.parse(robots, UA)
    assert not rules.allowed("/x")
    assert rules.allowed("/y")


def test_rules_before_any_user_agent_are_ignored() -> None:
    assert allowed("Disallow: /\nUser-agent: other\nDisallow: /x\n", "/page")


# --- matching ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rules", "path", "expected"),
    [
        # Longest match wins, Allow wins a tie (Google's "order of precedence" table).
        ("Allow: /p\nDisallow: /", "/page", True),
        ("Allow: /folder\nDisallow: /folder", "/folder/page", True),
        ("Disallow: /folder\nAllow: /folder", "/folder/page", True),
        ("Allow: /page\nDisallow: /*.htm", "/page.htm", False),
        ("Allow: /page\nDisallow: /*.ph", "/page.php5", True),
        ("Allow: /$\nDisallow: /", "/", True),
        ("Allow: /$\nDisallow: /", "/page.htm", False),
        ("Disallow: /\nAllow: /$", "/?q=1", False),
        # Order in the file does not matter, only specificity.
        ("Disallow: /a/b\nAllow: /a", "/a/b/c", False),
        ("Allow: /a\nDisallow: /a/b", "/a/b/c", False),
        # "/fish*" is longer than "/fish", so the Allow wins.
        ("Disallow: /fish\nAllow: /fish*", "/fish.html", True),
        ("Disallow: /fish*\nAllow: /fish", "/fish.html", False),
        # An empty Disallow allows, an empty Allow is nothing.
        ("Disallow:", "/anything", True),
        ("Allow:\nDisallow: /x", "/x", False),
        # Patterns are case-sensitive.
        ("Disallow: /Fish", "/fish", True),
        # Rules match path plus query, never the fragment.
        ("Disallow: /page?x=1", "/page?x=1&y=2", False),
        ("Disallow: /page?x=1", "/page?x=2", True),
        ("Disallow: /*?", "/search?q=a", False),
        ("Disallow: /*?", "/search", True),
        ("Disallow: /page$", "/page#frag", False),
        # A "$" before the end of a pattern is an ordinary character.
        ("Disallow: /a$b", "/a$b/c", False),
        ("Disallow: /a$b", "/a", True),
        # A pattern that is only a wildcard matches everything.
        ("Disallow: *", "/x", False),
        ("Disallow: /*", "/", False),
    ],
)
def test_precedence_and_matching(rules: str, path: str, expected: bool) -> None:
    assert allowed(f"User-agent: *\n{rules}\n", path) is expected


# Google's documented path-matching examples: pattern -> (matching, non-matching paths).
GOOGLE_PATTERNS = {
    "/fish": (
        ["/fish", "/fish.html", "/fish/salmon.html", "/fishheads", "/fish.php?id=anything"],
        ["/Fish.asp", "/catfish", "/?id=fish", "/desert/fish"],
    ),
    "/fish*": (
        ["/fish", "/fish.html", "/fish/salmon.html", "/fishheads/yummy.html"],
        ["/Fish.asp", "/catfish", "/?id=fish"],
    ),
    "/fish/": (
        ["/fish/", "/fish/?id=anything", "/fish/salmon.htm"],
        ["/fish", "/fish.html", "/animals/fish/", "/Fish/Salmon.asp"],
    ),
    "/*.php": (
        ["/index.php", "/folder/filename.php?parameters", "/folder/any.php.file.html", "/a.php/"],
        ["/", "/windows.PHP"],
    ),
    "/*.php$": (
        ["/filename.php", "/folder/filename.php"],
        ["/filename.php?parameters", "/filename.php/", "/filename.php5", "/windows.PHP"],
    ),
    "/fish*.php": (
        ["/fish.php", "/fishheads/catfish.php?parameters"],
        ["/Fish.PHP", "/fish.html"],
    ),
    "/a*b*c$": (
        ["/abc", "/a/b/c", "/axxbyyc", "/abcbc"],
        ["/abcd", "/acb", "/ab"],
    ),
}


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        (pattern, path, expected)
        for pattern, (hits, misses) in GOOGLE_PATTERNS.items()
        for expected, paths in ((False, hits), (True, misses))
        for path in paths
    ],
)
def test_google_path_patterns(pattern: str, path: str, expected: bool) -> None:
    assert allowed(f"User-agent: *\nDisallow: {pattern}\n", path) is expected


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        # Escapes of unreserved characters are decoded, in either side.
        ("/foo/%62ar", "/foo/bar", False),
        ("/foo/bar", "/foo/%62ar", False),
        ("/foo/%62ar", "/foo/%62%61r", False),
        ("/%7Euser", "/~user/home", False),
        # Hex case does not matter.
        ("/a%2fb", "/a%2Fb", False),
        # Non-ASCII characters equal their UTF-8 escapes, both ways.
        ("/café", "/caf%C3%A9", False),
        ("/caf%C3%A9", "/café", False),
        ("/caf%c3%a9", "/café/menu", False),
        ("/ツ", "/%E3%83%84", False),
        # Escapes of reserved characters are kept: %2F is not "/", %3F is not "?".
        ("/a%2Fb", "/a/b", True),
        ("/a/b", "/a%2Fb", True),
        ("/a%3Fb", "/a?b", True),
        ("/a%2Fb", "/a%2Fb", False),
        # Characters that must be escaped equal their escapes.
        ("/a b", "/a%20b", False),
        ("/a%20b", "/a b", False),
        ("/100%", "/100%25", False),
        # An escaped "*" or "$" is a literal character, not a wildcard or an anchor.
        ("/a%2A", "/aXYZ", True),
        ("/a%24", "/a", True),
        # The query keeps reserved characters literal (RFC 9309 §2.2.2 table).
        ("/foo/bar?baz=https://foo.bar", "/foo/bar?baz=https://foo.bar", False),
        # RFC 9309 §2.2.2, the percent-encoding table, row by row (both directions).
        ("/foo/bar?baz=https://foo.bar", "/foo/bar?baz=https%3A%2F%2Ffoo.bar", False),
        ("/foo/bar?baz=https%3A%2F%2Ffoo.bar", "/foo/bar?baz=https://foo.bar", False),
        ("/foo/bar/ツ", "/foo/bar/%E3%83%84", False),
        ("/foo/bar/%E3%83%84", "/foo/bar/ツ", False),
        ("/foo/bar/%E3%83%84", "/foo/bar/%E3%83%84", False),
        ("/foo/bar/%62%61%7A", "/foo/bar/baz", False),
        ("/foo/bar/baz", "/foo/bar/%62%61%7A", False),
        # RFC 9309 §2.2.3: "%2A" and "%24" in a rule match a literal "*" and "$".
        ("/path/file-with-a-%2A.html", "https://www.example.com/path/file-with-a-*.html", False),
        ("/path/file-with-a-%2A.html", "/path/file-with-a-%2A.html", False),
        ("/path/file-with-a-%2A.html", "/path/file-with-a-b.html", True),
        ("/path/foo-%24", "https://www.example.com/path/foo-$", False),
        ("/path/foo-%24", "/path/foo-%24", False),
        ("/path/foo-%24", "/path/foo-", True),
        ("/path/foo-%24$", "/path/foo-$", False),
        ("/path/foo-%24$", "/path/foo-$x", True),
        ("/*/x-%2A", "/a/x-*", False),
        ("/*/x-%2A", "/a/x-y", True),
    ],
)
def test_percent_encoding_equivalence(pattern: str, path: str, expected: bool) -> None:
    assert allowed(f"User-agent: *\nDisallow: {pattern}\n", path) is expected


def test_percent_encoded_pattern_length_is_measured_after_normalizing() -> None:
    # "/foo/%62ar" normalizes to "/foo/bar": an exact tie with the Allow, which wins.
    robots = "User-agent: *\nDisallow: /foo/%62ar\nAllow: /foo/bar\n"
    assert allowed(robots, "/foo/bar")


@pytest.mark.parametrize(
    "url",
    [
        "https://example.test/private/x",
        "http://example.test:8080/private/x?y=1#top",
        "/private/x",
        "private/x",
        "//example.test/private/x",
        "http://[broken-host/private/x",
    ],
)
def test_absolute_and_relative_urls(url: str) -> None:
    assert not allowed("User-agent: *\nDisallow: /private\n", url)


def test_empty_path_is_root() -> None:
    rules = RobotsRules.parse("User-agent: *\nDisallow: /$\nDisallow: /?\n", UA)
    assert not rules.allowed("https://example.test")
    assert not rules.allowed("https://example.test?q=1")
    assert rules.allowed("https://example.test/x")


@pytest.mark.parametrize("url", ["/robots.txt", "https://example.test/robots.txt"])
def test_robots_txt_is_always_allowed(url: str) -> None:
    assert allowed("User-agent: *\nDisallow: /\n", url)
    assert RobotsRules.disallow_all().allowed(url)


# --- syntax --------------------------------------------------------------------------------


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_line_endings(newline: str) -> None:
    robots = newline.join(["User-agent: *", "Disallow: /a", "Allow: /a/b", "Crawl-delay: 2", ""])
    rules = RobotsRules.parse(robots, UA)
    assert not rules.allowed("/a/x")
    assert rules.allowed("/a/b")
    assert rules.crawl_delay == 2.0


def test_mixed_line_endings_and_bom() -> None:
    rules = RobotsRules.parse("\ufeffUser-agent: *\r\nDisallow: /a\rDisallow: /b\n", UA)
    assert not rules.allowed("/a")
    assert not rules.allowed("/b")


def test_directive_names_are_case_insensitive() -> None:
    robots = "USER-AGENT: *\nDISALLOW: /a\nallow: /a/b\nCRAWL-DELAY: 3\nSITEMAP: https://s/x.xml\n"
    rules = RobotsRules.parse(robots, UA)
    assert not rules.allowed("/a")
    assert rules.allowed("/a/b")
    assert rules.crawl_delay == 3.0
    assert rules.sitemaps == ("https://s/x.xml",)


def test_comments_blank_and_unknown_lines_are_ignored() -> None:
    robots = (
        "# a comment\n"
        "User-agent: *   # trailing comment\n"
        "\n"
        "Noindex: /ignored\n"
        "just some text\n"
        "Disallow /three words\n"
        "Disallow: /a # not part of the pattern\n"
    )
    rules = RobotsRules.parse(robots, UA)
    assert not rules.allowed("/a")
    assert rules.allowed("/ignored")
    assert rules.allowed("/three")
    assert not rules.allowed("/ab")  # the pattern is "/a", without the comment


@pytest.mark.parametrize(
    "robots",
    [
        "User-agent: *\nDisallow /x/\n",
        "User-agent *\nDisallow /x/\n",
        "User-agent\t*\nDisallow\t/x/  # a comment\n",
        "User-agent rccrawler\nDisallow /x/\n",
    ],
)
def test_a_rule_line_missing_its_colon_is_read_as_google_reads_it(robots: str) -> None:
    rules = RobotsRules.parse(robots, UA)
    assert not rules.allowed("/x/page")
    assert rules.allowed("/y/")


def test_the_500_kib_cut_holds_wherever_robots_text_is_parsed() -> None:
    """parse() (used on the text saved in the state) reads no more than from_response()."""
    line = "Disallow: /private-page-number-that-is-long\n"
    text = "User-agent: *\n" + line * (2 * MAX_ROBOTS_BYTES // len(line)) + "Disallow: /late\n"
    assert not RobotsRules.parse(text, UA).allowed("/private-page-number-that-is-long")
    assert RobotsRules.parse(text, UA).allowed("/late")
    assert RobotsRules.from_response(200, text.encode(), UA).allowed("/late")


def test_whitespace_around_fields_is_ignored() -> None:
    assert not allowed("  User-agent :  *  \n\tDisallow :\t/a  \n", "/a")


def test_common_misspellings_are_obeyed() -> None:
    assert not allowed("Useragent: *\nDissallow: /a\n", "/a")


# --- crawl-delay ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("Crawl-delay: 5", 5.0),
        ("Crawl-delay: 0.5", 0.5),
        ("Crawl-delay: .25", 0.25),
        ("Crawl-delay: 0", 0.0),
        ("", None),
        ("Crawl-delay:", None),
        ("Crawl-delay: soon", None),
        ("Crawl-delay: -1", None),
        ("Crawl-delay: nan", None),
        ("Crawl-delay: inf", None),
    ],
)
def test_crawl_delay_values(line: str, expected: float | None) -> None:
    rules = RobotsRules.parse(f"User-agent: *\n{line}\nDisallow: /x\n", UA)
    assert rules.crawl_delay == expected


def test_crawl_delay_is_per_group() -> None:
    robots = (
        "User-agent: otherbot\nCrawl-delay: 30\n\n"
        "User-agent: rccrawler\nCrawl-delay: 2\nDisallow: /x\n\n"
        "User-agent: *\nCrawl-delay: 10\n"
    )
    assert RobotsRules.parse(robots, UA).crawl_delay == 2.0
    assert RobotsRules.parse(robots, "somebot").crawl_delay == 10.0
    assert RobotsRules.parse(robots, "otherbot").crawl_delay == 30.0


def test_crawl_delay_absent_from_our_group_does_not_fall_back_to_star() -> None:
    robots = "User-agent: rccrawler\nDisallow: /x\n\nUser-agent: *\nCrawl-delay: 10\n"
    assert RobotsRules.parse(robots, UA).crawl_delay is None


def test_crawl_delay_of_merged_groups_is_the_largest() -> None:
    robots = "User-agent: rccrawler\nCrawl-delay: 1\n\nUser-agent: rccrawler\nCrawl-delay: 4\n"
    assert RobotsRules.parse(robots, UA).crawl_delay == 4.0


def test_crawl_delay_ends_user_agent_run() -> None:
    robots = "User-agent: otherbot\nCrawl-delay: 9\nUser-agent: rccrawler\nDisallow: /x\n"
    rules = RobotsRules.parse(robots, UA)
    assert rules.crawl_delay is None
    assert not rules.allowed("/x")


# --- sitemaps ------------------------------------------------------------------------------


def test_sitemaps_are_site_wide_and_do_not_split_groups() -> None:
    robots = (
        "Sitemap: https://example.test/a.xml\n"
        "User-agent: otherbot\n"
        "Sitemap: https://example.test/b.xml\n"
        "User-agent: rccrawler\n"
        "Disallow: /x\n"
        "sitemap: https://example.test/a.xml\n"
        "Sitemap:\n"
    )
    rules = RobotsRules.parse(robots, UA)
    assert rules.sitemaps == ("https://example.test/a.xml", "https://example.test/b.xml")
    assert not rules.allowed("/x")


def test_no_sitemaps() -> None:
    assert RobotsRules.parse("User-agent: *\nDisallow:\n", UA).sitemaps == ()


# --- allow_all / disallow_all / from_response ----------------------------------------------


def test_allow_all() -> None:
    rules = RobotsRules.allow_all()
    assert rules.allowed("/anything?at=all")
    assert rules.crawl_delay is None
    assert rules.sitemaps == ()
    assert not rules.disallows_everything


def test_disallow_all() -> None:
    rules = RobotsRules.disallow_all()
    assert not rules.allowed("/")
    assert not rules.allowed("https://example.test/page?q=1")
    assert rules.crawl_delay is None
    assert rules.disallows_everything


@pytest.mark.parametrize(
    ("robots", "expected"),
    [
        ("User-agent: *\nDisallow: /\n", True),
        ("User-agent: *\nDisallow: /*\n", True),
        ("User-agent: *\nDisallow: /\nAllow: /public\n", False),
        ("User-agent: *\nDisallow: /private\n", False),
        ("User-agent: rccrawler\nDisallow:\n\nUser-agent: *\nDisallow: /\n", False),
        ("", False),
    ],
)
def test_disallows_everything_for_parsed_rules(robots: str, expected: bool) -> None:
    assert RobotsRules.parse(robots, UA).disallows_everything is expected


BODY = b"User-agent: *\nDisallow: /private\n"


@pytest.mark.parametrize(
    ("status", "page_allowed", "private_allowed", "everything"),
    [
        (200, True, False, False),
        (204, True, False, False),
        (301, True, True, False),
        (304, True, True, False),
        (403, True, True, False),
        (404, True, True, False),
        (410, True, True, False),
        (429, True, True, False),
        (500, False, False, True),
        (503, False, False, True),
        (None, False, False, True),
    ],
)
def test_from_response_status_mapping(
    status: int | None, page_allowed: bool, private_allowed: bool, everything: bool
) -> None:
    rules = RobotsRules.from_response(status, BODY, UA)
    assert rules.allowed("/page") is page_allowed
    assert rules.allowed("/private") is private_allowed
    assert rules.disallows_everything is everything


def test_from_response_strips_bom_and_replaces_bad_utf8() -> None:
    body = b"\xef\xbb\xbfUser-agent: *\nDisallow: /caf\xc3\xa9\nDisallow: /bad\xff\n"
    rules = RobotsRules.from_response(200, body, UA)
    assert not rules.allowed("/caf%C3%A9")
    assert not rules.allowed("/bad%EF%BF%BD")  # U+FFFD, from errors="replace"
    assert rules.allowed("/bad")


def test_from_response_cuts_body_at_500_kib() -> None:
    head = b"User-agent: *\nDisallow: /early\n"
    cut_line = b"Disallow: /pub"  # what is left of "Disallow: /public" at the cut
    padding = b"#" * (MAX_ROBOTS_BYTES - len(head) - len(cut_line) - 1) + b"\n"
    body = head + padding + cut_line + b"lic\n" + b"Disallow: /late\n" * 100
    assert len(head + padding + cut_line) == MAX_ROBOTS_BYTES
    rules = RobotsRules.from_response(200, body, UA)
    assert not rules.allowed("/early")
    assert rules.allowed("/late")
    assert rules.allowed("/pub")  # the line the cut went through is dropped, not truncated


# --- caching and threads -------------------------------------------------------------------


def test_repeated_queries_give_the_same_answer() -> None:
    rules = RobotsRules.parse("User-agent: *\nDisallow: /*.pdf$\n", UA)
    for _ in range(3):
        assert not rules.allowed("/doc.pdf")
        assert rules.allowed("/doc.pdf?v=2")


def test_answers_are_per_instance() -> None:
    strict = RobotsRules.parse("User-agent: *\nDisallow: /x\n", UA)
    lax = RobotsRules.parse("User-agent: *\nAllow: /\n", UA)
    assert not strict.allowed("/x")
    assert lax.allowed("/x")


def test_deciding_keeps_nothing_per_url() -> None:
    """Issue 43: each RobotsRules (one per site and thread) cached its decisions, up to
    4,096 URLs each: over many sites that grew by a URL per page done, 0.33 KB a page
    in a long crawl. Here 100 sites decide 20,000 URLs, then 20,000 others: what
    robots.py allocated stays where it was (a cache of its own is bounded for all
    sites together, below 20,000 entries)."""
    text = "User-agent: *\nDisallow: /private/\nDisallow: /*.pdf$\n"
    sites = [RobotsRules.parse(text, UA) for _ in range(100)]

    def decide(round_: int) -> int:
        for number, rules in enumerate(sites):
            for n in range(200):
                assert rules.allowed(f"http://s{number:03d}.test/p/{round_}/{n:03d}.html")
        held = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(True, robots.__file__)]
        )
        return sum(stat.size for stat in held.statistics("filename"))

    tracemalloc.start()
    try:
        after_first = decide(0)
        grown = decide(1) - after_first
    finally:
        tracemalloc.stop()
    assert grown < 100_000, f"{grown} bytes kept for 20,000 more URLs"


def test_concurrent_calls() -> None:
    rules = RobotsRules.parse("User-agent: *\nDisallow: /*/private\nAllow: /a/private/ok\n", UA)
    errors: list[str] = []

    def check(index: int) -> None:
        for n in range(500):
            if rules.allowed(f"/{index}/private/{n}") or not rules.allowed(f"/{index}/{n}"):
                errors.append(f"{index}/{n}")

    threads = [threading.Thread(target=check, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    assert rules.allowed("/a/private/ok")


@pytest.mark.parametrize(
    ("meta", "expected"),
    [
        ("", set()),
        ("noindex, nofollow", {"noindex", "nofollow"}),
        ("nofollow", {"nofollow"}),
        ("none", {"none", "noindex", "nofollow"}),
        ("index,follow", {"index", "follow"}),
        ("  noarchive  nofollow ", {"noarchive", "nofollow"}),
        ("nofollowing, max-snippet:0", {"nofollowing", "max-snippet:0"}),
    ],
)
def test_meta_robots_directives(meta: str, expected: set[str]) -> None:
    # As ParsedPage.meta_robots holds them: lowercased, several tags joined by ", ".
    assert meta_directives(meta) == expected


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ((), set()),
        (("noindex",), {"noindex"}),
        (("NoIndex, NoFollow",), {"noindex", "nofollow"}),
        (("none",), {"none", "noindex", "nofollow"}),
        (("rccrawler: nofollow",), {"nofollow"}),  # names us
        (("RCCrawler:noindex",), {"noindex"}),
        (("otherbot: noindex, nofollow",), set()),  # another crawler's
        (("otherbot: noindex", "nofollow"), {"nofollow"}),  # one line each
        (
            ("unavailable_after: 25 Jun 2010 15:00:00 PST",),
            {"unavailable_after:", "25", "jun", "2010", "15:00:00", "pst"},
        ),
        (("max-snippet: 20, noindex",), {"max-snippet:", "20", "noindex"}),
    ],
)
def test_x_robots_tag_directives_for_us(values: tuple[str, ...], expected: set[str]) -> None:
    assert robots_tag_directives(values, "rccrawler") == expected
