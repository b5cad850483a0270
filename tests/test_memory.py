"""What a crawl keeps in memory grows with its sites, not with its pages done (issue 43).

A crawl that runs for days must hold its memory flat: ``benchmarks/soak.py`` measures the
slope, and these tests hold each structure that once grew per page to its bound, by
counting what it holds (no timing).
"""

from __future__ import annotations

import gc
from collections import ChainMap
from collections.abc import Callable

from crawling import CrawlRunner
from support.loopback import TEXT, Resource
from support.sites import generated_site
from webserver import Sites, SiteServer

from rccrawler.web.robots import RobotsRules

ROBOTS = Resource(b"User-agent: *\nDisallow: /private/\n", headers=TEXT)


def live_robots_rules() -> int:
    gc.collect()
    return sum(1 for thing in gc.get_objects() if isinstance(thing, RobotsRules))


def test_robots_rules_are_one_per_site_whatever_the_threads(
    serve: Callable[[Sites], SiteServer], crawler: CrawlRunner
) -> None:
    """Each downloading and parsing thread kept its own RobotsRules of every site, each
    with its own cache of decisions by URL: 200 threads, 200 copies of each site's, and
    a URL kept per page done. Now ``CrawlContext.robots_rules`` holds one per site for
    every thread, and a RobotsRules keeps nothing per URL (test_robots.py)."""
    hosts = [f"s{n}.test" for n in range(4)]
    server = serve(
        {host: ChainMap({"/robots.txt": ROBOTS}, generated_site(host, 40)) for host in hosts}
    )
    before = live_robots_rules()
    result = crawler.run(
        [f"http://{host}/" for host in hosts],
        server.resolve,
        threads={"downloading": 8, "parsing": 2},
    )
    assert result.finished
    assert sum(site["pages_done"] for site in result.report["sites"].values()) == 4 * 40
    assert live_robots_rules() - before <= len(hosts)
    assert sorted(result.manager.context.robots_rules) == hosts
    assert sorted(result.manager.context.scope_rules) == hosts  # the same for scope rules
