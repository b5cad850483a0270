"""What the user sees of a crawl: the live status view and the report table (``ui.status``).

``ui.status`` is the only module of rccrawler that imports rich, and it is imported
only when a terminal needs it, so plain-log runs never load rich at all.
"""
