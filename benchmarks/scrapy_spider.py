"""The Scrapy side of benchmarks/crawl_bench.py and polite_many.py: the crawl rccrawler
does, done by Scrapy.

    python benchmarks/scrapy_spider.py START_URL OUTFILE
    python benchmarks/scrapy_spider.py --delay 1 --concurrency 300 --per-host 1 \
        --loopback @URLS_FILE OUTFILE

Breadth-first from START_URL (or every URL of the file after ``@``) along `<a href>`
links to the page's own host (scheme, host and port), robots.txt obeyed, and only 200
text/html (or application/xhtml+xml) responses parsed for links. By default no delay and
8 requests in flight (crawl_bench); ``--delay``, ``--concurrency`` and ``--per-host``
set DOWNLOAD_DELAY (not randomized), CONCURRENT_REQUESTS and
CONCURRENT_REQUESTS_PER_DOMAIN. ``--loopback`` resolves every name to 127.0.0.1 (the
benchmarks' virtual hosts, as rccrawler's ``crawl.resolve`` does). Every link is requested
whatever its extension (`deny_extensions=[]`), as rccrawler does, so both crawlers fetch
the same URLs. The final URL of every HTML page crawled is written to OUTFILE, one a line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from scrapy import Request, Spider
from scrapy.crawler import CrawlerProcess
from scrapy.http import HtmlResponse, Response
from scrapy.linkextractors import LinkExtractor
from scrapy.resolver import CachingThreadedResolver
from twisted.internet import defer

from rccrawler.web.html import HTML_MEDIA_TYPES

HTML_TYPES = tuple(media_type.encode() for media_type in HTML_MEDIA_TYPES)

SETTINGS: dict[str, Any] = {
    # Breadth-first: lower priority for deeper requests, FIFO within a priority.
    "DEPTH_PRIORITY": 1,
    "DEPTH_LIMIT": 0,
    "SCHEDULER_DISK_QUEUE": "scrapy.squeues.PickleFifoDiskQueue",
    "SCHEDULER_MEMORY_QUEUE": "scrapy.squeues.FifoMemoryQueue",
    # The politeness rccrawler is given: robots obeyed, no delay, 8 in flight per host.
    "ROBOTSTXT_OBEY": True,
    "DOWNLOAD_DELAY": 0,
    "RANDOMIZE_DOWNLOAD_DELAY": False,
    "CONCURRENT_REQUESTS": 8,
    "CONCURRENT_REQUESTS_PER_DOMAIN": 8,
    "AUTOTHROTTLE_ENABLED": False,
    "HTTPCACHE_ENABLED": False,
    "DOWNLOAD_TIMEOUT": 30,
    "LOG_LEVEL": "ERROR",
    # Nothing to do with crawling; it would only open a port.
    "TELNETCONSOLE_ENABLED": False,
}


def same_host(url: str, host: str) -> bool:
    """Internal link: same scheme-less netloc (host and port) as the start URL."""
    return urlsplit(url).netloc.lower() == host


class SameHostSpider(Spider):
    """Crawls one host breadth-first and remembers the URL of every HTML page."""

    name = "crawl_bench"

    def __init__(self, start_urls: list[str], outfile: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = start_urls
        self.outfile = Path(outfile)
        self.pages: list[str] = []
        self.links = LinkExtractor(tags=("a",), attrs=("href",), deny_extensions=[], unique=True)

    async def start(self) -> AsyncIterator[Request]:
        """Scrapy >= 2.13. The start request goes through the duplicate filter (Scrapy's
        default exempts it), so a link back to the start URL is not fetched a second time."""
        for request in self.start_requests():
            yield request

    def start_requests(self) -> Iterator[Request]:
        """Scrapy < 2.13, and the requests start() yields."""
        for url in self.start_urls:
            yield Request(url, callback=self.parse, dont_filter=False)

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Request]:
        content_type = response.headers.get(b"Content-Type") or b""
        media_type = content_type.split(b";")[0].strip().lower()
        if (
            response.status != 200
            or media_type not in HTML_TYPES
            or not isinstance(response, HtmlResponse)
        ):
            return
        self.pages.append(response.url)
        host = urlsplit(response.url).netloc.lower()
        for link in self.links.extract_links(response):
            if same_host(link.url, host):
                yield Request(link.url, callback=self.parse)

    def closed(self, reason: str) -> None:
        self.outfile.write_text("".join(f"{url}\n" for url in self.pages))


class LoopbackResolver(CachingThreadedResolver):
    """Every name is 127.0.0.1: the benchmarks' virtual hosts on the loopback server."""

    def getHostByName(self, name: str, timeout: Any = ()) -> defer.Deferred[str]:
        return defer.succeed("127.0.0.1")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("start", help="the start URL, or @FILE of start URLs, one a line")
    parser.add_argument("outfile")
    parser.add_argument("--delay", type=float, default=0.0, help="DOWNLOAD_DELAY, seconds")
    parser.add_argument("--concurrency", type=int, default=8, help="CONCURRENT_REQUESTS")
    parser.add_argument("--per-host", type=int, default=8, help="CONCURRENT_REQUESTS_PER_DOMAIN")
    parser.add_argument("--loopback", action="store_true", help="every name is 127.0.0.1")
    args = parser.parse_args(argv)
    if args.start.startswith("@"):
        starts = Path(args.start[1:]).read_text().split()
    else:
        starts = [args.start]
    settings = {
        **SETTINGS,
        "DOWNLOAD_DELAY": args.delay,
        "CONCURRENT_REQUESTS": args.concurrency,
        "CONCURRENT_REQUESTS_PER_DOMAIN": args.per_host,
    }
    if args.loopback:
        settings["TWISTED_DNS_RESOLVER"] = f"{__name__}.LoopbackResolver"
    process = CrawlerProcess(settings=settings, install_root_handler=True)
    process.crawl(SameHostSpider, start_urls=starts, outfile=args.outfile)
    process.start()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
