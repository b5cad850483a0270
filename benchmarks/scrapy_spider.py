"""The Scrapy side of benchmarks/crawl_bench.py: the same crawl rccrawler does, done by Scrapy.

    python benchmarks/scrapy_spider.py START_URL OUTFILE

Breadth-first from START_URL along `<a href>` links to the same host (scheme, host and
port), robots.txt obeyed, no delay, 8 requests in flight, and only 200 text/html (or
application/xhtml+xml) responses parsed for links. Every link is requested whatever its
extension (`deny_extensions=[]`), as rccrawler does, so both crawlers fetch the same URLs.
The final URL of every HTML page crawled is written to OUTFILE, one a line.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from scrapy import Request, Spider
from scrapy.crawler import CrawlerProcess
from scrapy.http import HtmlResponse, Response
from scrapy.linkextractors import LinkExtractor

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

    def __init__(self, start_url: str, outfile: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = [start_url]
        self.host = urlsplit(start_url).netloc.lower()
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
        for link in self.links.extract_links(response):
            if same_host(link.url, self.host):
                yield Request(link.url, callback=self.parse)

    def closed(self, reason: str) -> None:
        self.outfile.write_text("".join(f"{url}\n" for url in self.pages))


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python benchmarks/scrapy_spider.py START_URL OUTFILE", file=sys.stderr)
        return 2
    process = CrawlerProcess(settings=SETTINGS, install_root_handler=True)
    process.crawl(SameHostSpider, start_url=argv[0], outfile=argv[1])
    process.start()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
