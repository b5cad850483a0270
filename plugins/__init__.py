"""Crawl tasks shipped with rccrawler, named by dotted path in settings.yaml."""
