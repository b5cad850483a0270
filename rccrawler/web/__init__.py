"""Talking to the web and reading what it says: fetching, URL rules, robots.txt, HTML,
sitemaps and crawler traps. Imports nothing of the crawl above it (threads, storage)."""
