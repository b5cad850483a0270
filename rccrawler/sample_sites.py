"""Deterministic sample sites for the loopback server: the demo site and big generated sites.

Everything here is a pure function of its arguments (random generators get fixed
seeds), so a crawl of these sites can be asserted page by page and benchmarks
compare like with like.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from html import escape

from rccrawler.loopback import TEXT, Resource, redirect

__all__ = [
    "BLOG_HOST",
    "DEMO_HOST",
    "EXTERNAL_HOST",
    "DemoFacts",
    "GeneratedSite",
    "demo_facts",
    "demo_sites",
    "generated_site",
    "page_level",
    "page_path",
]

DEMO_HOST = "demo.test"
BLOG_HOST = "blog.demo.test"
"""A subdomain: linked from the demo site, served, but a site of its own (SPEC §5.3)."""
EXTERNAL_HOST = "other.test"

# -- English-looking text from word lists -------------------------------------------


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_NOUNS = _words(
    "crawler server page link thread queue request response index setting host file "
    "record query word report graph node archive cache worker browser document network "
    "schedule process table checkpoint limit budget robot header address folder section "
    "parser filter summary title heading keyword result machine lease backup"
)
_ADJECTIVES = _words(
    "quick slow polite careful large small recent stable simple complete local remote "
    "secure hidden default shared separate daily fresh broken reliable patient strict "
    "gentle narrow broad internal external"
)
_ADVERBS = _words(
    "quickly slowly politely carefully quietly safely gradually automatically rarely "
    "usually always often"
)
_VERBS = _words(
    "store fetch parse follow update check write read schedule compress measure limit "
    "retry skip record rank split merge load save open close validate count index resume"
)
_PREPOSITIONS = _words("with for from into behind before after under beside")
_TEMPLATES = (
    "The {adj} {noun} {verbs} the {noun2} {prep} every {noun3}.",
    "When you {verb} the {noun}, the {noun2} {verbs} {adverb}.",
    "{Nouns} are {adj} {prep} {nouns2} because the {noun} {verbs} each {noun2}.",
    "You can {verb} a {adj} {noun} with the {noun2} option.",
    "Each {noun} {verbs} {number} {nouns2} per second {prep} the {adj} {noun3}.",
    "A {adj} {noun} never {verbs} a {noun2} twice.",
    "If the {noun} is {adj}, {verb} the {nouns2} first and {verb2} the {noun3} later.",
    "Most {nouns} {verb} their {nouns2} {adverb}, so the {noun3} stays {adj}.",
)


def _plural(noun: str) -> str:
    if noun.endswith(("s", "x", "ch", "sh")):
        return noun + "es"
    if noun.endswith("y") and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


def _singular(noun: str) -> str:
    """Good enough for the topic slugs: links → link, queries → query, proxies → proxy."""
    if noun.endswith("ies"):
        return noun[:-3] + "y"
    if noun.endswith(("ses", "xes")):
        return noun[:-2]
    if noun.endswith("s") and not noun.endswith("ss"):
        return noun[:-1]
    return noun


def _third_person(verb: str) -> str:
    return _plural(verb)  # the same spelling rules: fetches, retries, stores


def _sentence(rng: random.Random, nouns: tuple[str, ...] = ()) -> str:
    """One sentence; ``nouns`` (a page's topic words) are preferred, so pages differ in words."""

    def noun() -> str:
        return rng.choice(nouns) if nouns and rng.random() < 0.5 else rng.choice(_NOUNS)

    n1, n2, n3 = noun(), noun(), noun()
    v1, v2 = rng.choice(_VERBS), rng.choice(_VERBS)
    text = rng.choice(_TEMPLATES).format(
        adj=rng.choice(_ADJECTIVES),
        adverb=rng.choice(_ADVERBS),
        prep=rng.choice(_PREPOSITIONS),
        number=rng.randrange(2, 100),
        noun=n1,
        noun2=n2,
        noun3=n3,
        Nouns=_plural(n1).capitalize(),
        nouns=_plural(n1),
        nouns2=_plural(n2),
        verb=v1,
        verb2=v2,
        verbs=_third_person(v1),
    )
    return text[0].upper() + text[1:]


def _paragraph(rng: random.Random, nouns: tuple[str, ...], sentences: int) -> str:
    return " ".join(_sentence(rng, nouns) for _ in range(sentences))


def _seeded(*parts: object) -> random.Random:
    """A generator seeded from ``parts`` the same way in every process (no hash())."""
    return random.Random(zlib.crc32(repr(parts).encode()))


def _html(
    title: str,
    body: str,
    *,
    description: str = "",
    keywords: str = "",
) -> bytes:
    meta = ""
    if description:
        meta += f'<meta name="description" content="{escape(description)}">\n'
    if keywords:
        meta += f'<meta name="keywords" content="{escape(keywords)}">\n'
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{escape(title)}</title>\n{meta}</head>\n<body>\n{body}</body>\n</html>\n"
    ).encode()


def _a(href: str, text: str) -> str:
    return f'<a href="{escape(href)}">{escape(text)}</a>'


# -- the demo site -----------------------------------------------------------------

_SECTIONS: tuple[tuple[str, str, tuple[str, ...], tuple[str, ...]], ...] = (
    # slug, title, topics, topic words (used in titles, keywords and text)
    (
        "getting-started",
        "Getting started",
        ("installing", "first-crawl", "requirements", "upgrading"),
        ("package", "environment", "install", "python", "version", "download", "tutorial"),
    ),
    (
        "configuration",
        "Configuration",
        ("settings-file", "threads", "politeness", "proxies"),
        ("yaml", "option", "key", "default", "delay", "agent", "proxy", "cookie"),
    ),
    (
        "crawling",
        "Crawling",
        ("links", "robots", "redirects", "duplicates"),
        ("frontier", "level", "depth", "redirect", "duplicate", "hash", "anchor", "sitemap"),
    ),
    (
        "storage",
        "Storage",
        ("sqlite", "postgresql", "checkpoints", "resuming"),
        ("database", "transaction", "lock", "journal", "snapshot", "column", "row"),
    ),
    (
        "search",
        "Search",
        ("indexing", "queries", "ranking", "stemming"),
        ("stem", "phrase", "wildcard", "synonym", "stopword", "weight", "relevance"),
    ),
    (
        "deployment",
        "Deployment",
        ("machines", "monitoring", "logging", "scaling"),
        ("cluster", "metric", "dashboard", "alert", "container", "service", "uptime"),
    ),
)
_ARTICLE_VERBS = ("Using", "Tuning", "Testing", "Understanding", "Debugging", "Planning")
_ARTICLES_PER_TOPIC = 6

_GUIDE_VARIANTS = (
    "http://demo.test//guide.html",
    "/guide.html?",
    "/guide.html#top",
    "/docs/../guide.html",
    "HTTP://Demo.Test:80/guide.html",
)
"""Spellings of /guide.html (SPEC §6): one page, requested once, as first found (/guide.html)."""
_SEARCH_VARIANTS = ("/search?b=2&a=1", "/search?a=1&b=2", "/search?a=1&c=&b=2")
"""Spellings of one search page; the first is linked first, so only it should be requested."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoFacts:
    """What a correct crawl of :func:`demo_sites` finds, for tests and the demo report.

    Paths are of :data:`DEMO_HOST`, normalized (SPEC §6).
    """

    host: str = DEMO_HOST
    blog_host: str = BLOG_HOST
    external_host: str = EXTERNAL_HOST
    nodes: frozenset[str]
    """Paths that become graph nodes (200 text/html), duplicates included."""
    duplicates: tuple[str, ...]
    """Byte-identical pages; which one is "the first" depends on crawl order."""
    redirects: Mapping[str, str]
    """Redirecting path → final path (the redirecting path is not a node)."""
    redirect_loop: tuple[str, ...]
    offsite_redirect: str
    """Redirects to the subdomain: not followed (SPEC §5.5)."""
    robots_redirect: str
    """Redirects into /private/: not followed."""
    disallowed: tuple[str, ...]
    """Linked but disallowed by robots.txt."""
    broken: str
    not_html: tuple[str, ...]
    """200 answers that are not nodes: PDF, JSON, and one without Content-Type."""
    no_content_type: str
    never_found: tuple[str, ...]
    """Served pages linked only from non-HTML answers or disallowed pages: never fetched."""
    guide_variants: tuple[str, ...] = _GUIDE_VARIANTS
    search_variants: tuple[str, ...] = _SEARCH_VARIANTS
    ignored_schemes: tuple[str, ...] = (
        "mailto:docs@demo.test",
        "javascript:void(0)",
        "tel:+15550100",
    )
    max_level: int = 5
    """Level of the deepest node (the start page is level 0)."""


class _DemoBuilder:
    """Builds the demo site's pages and records the facts about them as it goes."""

    def __init__(self) -> None:
        self.site: dict[str, Resource] = {}
        self.nodes: set[str] = set()

    def page(self, path: str, title: str, body: str, **meta: str) -> bytes:
        data = _html(title, _nav() + body, **meta)
        self.site[path] = Resource(data)
        self.nodes.add(path)
        return data

    def section(
        self,
        slug: str,
        title: str,
        topics: tuple[str, ...],
        words: tuple[str, ...],
        extra: str = "",
    ) -> None:
        """Section index → topic pages → articles → notes (levels 1 to 4)."""
        rng = _seeded("section", slug)
        links = "".join(f"<li>{_a(f'{t}/', _titled(t))}</li>\n" for t in topics)
        self.page(
            f"/docs/{slug}/",
            f"{title} — Demo documentation",
            f"<h1>{escape(title)}</h1>\n<p>{_paragraph(rng, words, 4)}</p>\n"
            f"<h2>Topics</h2>\n<ul>\n{links}</ul>\n{extra}",
            description=_sentence(rng, words),
            keywords=", ".join((slug, *words[:4])),
        )
        for topic in topics:
            self.topic(slug, title, topic, words)

    def topic(self, section: str, section_title: str, topic: str, words: tuple[str, ...]) -> None:
        base = f"/docs/{section}/{topic}/"
        rng = _seeded("topic", section, topic)
        topic_words = (*words, *(_singular(w) for w in topic.split("-")))
        articles = [
            (f"{verb.lower()}-{topic}", f"{verb} {_titled(topic).lower()}")
            for verb in _ARTICLE_VERBS[:_ARTICLES_PER_TOPIC]
        ]
        # Relative links, so that resolving against a directory URL is exercised.
        links = "".join(f"<li>{_a(f'{slug}.html', t)}</li>\n" for slug, t in articles)
        self.page(
            base,
            f"{_titled(topic)} — {section_title}",
            f"<h1>{escape(_titled(topic))}</h1>\n<p>{_paragraph(rng, topic_words, 3)}</p>\n"
            f"<h2>Articles</h2>\n<ol>\n{links}</ol>\n"
            f"<p>{_a('../', f'Back to {section_title}')}</p>\n",
            description=_sentence(rng, topic_words),
            keywords=", ".join((topic, section, *words[:3])),
        )
        for n, (slug, title) in enumerate(articles):
            prev_link = _a(f"{articles[n - 1][0]}.html", "Previous") if n else ""
            next_link = _a(f"{articles[n + 1][0]}.html", "Next") if n + 1 < len(articles) else ""
            notes = _a(f"{slug}/notes.html", "Notes") if n == 0 else ""
            self.article(
                base + f"{slug}.html",
                title,
                topic_words,
                f"<p>{prev_link} {_a('./', _titled(topic))} {next_link} {notes}</p>\n",
            )
            if n == 0:
                self.notes(base + f"{slug}/notes.html", slug, title, topic_words)

    def article(self, path: str, title: str, words: tuple[str, ...], footer: str) -> None:
        rng = _seeded("article", path)
        parts = [f"<h1>{escape(title)}</h1>\n<p>{_paragraph(rng, words, 4)}</p>\n"]
        for heading in rng.sample(words, 2):
            parts.append(
                f"<h2>{escape(heading.capitalize())} and the {rng.choice(_NOUNS)}</h2>\n"
                f"<p>{_paragraph(rng, words, rng.randrange(3, 6))}</p>\n"
            )
        parts.append(f"<h3>See also</h3>\n{footer}")
        self.page(
            path,
            f"{title} — Demo documentation",
            "".join(parts),
            description=_sentence(rng, words),
            keywords=", ".join(rng.sample(words, 4)),
        )

    def notes(self, path: str, slug: str, title: str, words: tuple[str, ...]) -> None:
        rng = _seeded("notes", path)
        appendix = ""
        if path.startswith("/docs/crawling/"):
            appendix = _a("notes/appendix.html", "Appendix")  # one page at level 5
            self.page(
                path.removesuffix(".html") + "/appendix.html",
                f"Appendix to the notes on {title.lower()}",
                f"<h1>Appendix</h1>\n<p>{_paragraph(rng, words, 3)}</p>\n"
                f"<p>{_a('../notes.html', 'Back to the notes')}</p>\n",
            )
        self.page(
            path,
            f"Notes on {title.lower()}",
            f"<h1>Notes</h1>\n<p>{_paragraph(rng, words, 3)}</p>\n"
            f"<p>{_a(f'../{slug}.html', title)} {appendix}</p>\n",
            description=_sentence(rng, words),
        )


def _titled(slug: str) -> str:
    return slug.replace("-", " ").capitalize()


def _nav() -> str:
    links = " | ".join(_a(f"/docs/{slug}/", title) for slug, title, _, _ in _SECTIONS)
    return f"<nav>{_a('/', 'Home')} | {links}</nav>\n"


def _build_demo() -> tuple[dict[str, dict[str, Resource]], DemoFacts]:
    b = _DemoBuilder()
    site = b.site
    rng = _seeded("demo-index")

    # robots.txt, and the private area it disallows (linked from the index).
    site["/robots.txt"] = Resource(b"User-agent: *\nDisallow: /private/\n", headers=TEXT)
    b.page(
        "/private/",
        "Private area",
        f"<h1>Private</h1>\n<p>{_paragraph(rng, ('secret', 'password'), 2)}</p>\n"
        f"{_a('secret.html', 'The secret page')}\n",
    )
    b.page("/private/secret.html", "Secret", "<h1>Secret</h1>\n<p>Nobody polite reads this.</p>\n")

    # Three byte-identical copies of the guide; absolute-path links keep them identical.
    guide = _html(
        "The demo guide",
        '<h1 id="top">The demo guide</h1>\n'
        f"<p>{_paragraph(_seeded('guide'), ('guide', 'tutorial', 'crawl'), 6)}</p>\n"
        f"<p>{_a('/', 'Home')} {_a('/docs/getting-started/', 'Getting started')}</p>\n",
        description="A short guide to crawling the demo site.",
        keywords="guide, tutorial, crawl",
    )
    duplicates = ("/guide.html", "/print/guide.html", "/mirror/guide.html")
    for path in duplicates:
        site[path] = Resource(guide)
        b.nodes.add(path)
    # Other spellings of /guide.html that a crawler might (wrongly) request.
    site["//guide.html"] = site["/guide.html?"] = Resource(guide)

    search = b.page(
        "/search?a=1&b=2",
        "Search results",
        f"<h1>Search results</h1>\n<p>{_paragraph(rng, ('result', 'query'), 2)}</p>\n",
    )
    for variant in _SEARCH_VARIANTS:
        site[variant] = Resource(search)

    b.page(
        "/about.html",
        "About the demo documentation",
        f"<h1>About</h1>\n<p>{_paragraph(rng, ('demo', 'documentation', 'team'), 4)}</p>\n"
        f"<p>A printable {_a('/print/guide.html', 'guide')}.</p>\n",
        description="Who writes the demo documentation.",
    )
    b.page(
        "/changelog.html",
        "Changelog",
        f"<h1>Changelog</h1>\n<p>{_paragraph(rng, ('release', 'version', 'change'), 4)}</p>\n",
    )

    # Redirects: 301 to a page, a 302 chain of two hops, a loop, off-site, into robots.
    redirects = {"/old-guide.html": "/guide.html", "/go/start": "/changelog.html"}
    site["/old-guide.html"] = redirect("http://demo.test/guide.html", 301)
    site["/go/start"] = redirect("/go/middle", 302)
    site["/go/middle"] = redirect("/changelog.html", 302)
    site["/loop/a"] = redirect("/loop/b", 302)
    site["/loop/b"] = redirect("/loop/a", 302)
    site["/go/blog"] = redirect(f"http://{BLOG_HOST}/", 301)
    site["/go/private"] = redirect("/private/", 302)

    # Answers that are not graph nodes.
    site["/files/manual.pdf"] = Resource(
        b"%PDF-1.4\n% demo manual\n1 0 obj << /Type /Catalog >> endobj\ntrailer\n%%EOF\n",
        headers=(("Content-Type", "application/pdf"),),
    )
    site["/data.json"] = Resource(
        b'{"pages": 200, "links": ["/hidden/from-json.html"]}\n',
        headers=(("Content-Type", "application/json"),),
    )
    site["/raw/notes"] = Resource(
        b"<html><body>No Content-Type here. "
        b'<a href="/hidden/from-raw.html">do not follow</a></body></html>\n',
        headers=(),
    )
    site["/hidden/from-raw.html"] = Resource(
        _html("Hidden", "<p>Only a response without Content-Type links here.</p>\n")
    )

    index_links = [
        ("/guide.html", "Guide"),
        *((f"/docs/{slug}/", title) for slug, title, _, _ in _SECTIONS),
        ("/about.html", "About"),
        ("/private/", "Private area"),
        (f"http://{BLOG_HOST}/", "Blog"),
        (f"http://{EXTERNAL_HOST}/", "A friendly other site"),
        ("/old-guide.html", "Old guide (moved permanently)"),
        ("/go/start", "What's new (moved twice)"),
        ("/loop/a", "Going in circles"),
        ("/go/blog", "Blog (redirect)"),
        ("/go/private", "Private (redirect)"),
        ("/missing.html", "A page that was deleted"),
        ("/files/manual.pdf", "Manual (PDF)"),
        ("/data.json", "Statistics (JSON)"),
        ("/raw/notes", "Raw notes"),
        ("mailto:docs@demo.test", "Write to us"),
        ("javascript:void(0)", "Do nothing"),
        ("tel:+15550100", "Call us"),
        *((v, f"Guide, spelled {i}") for i, v in enumerate(_GUIDE_VARIANTS, 1)),
        *((v, f"Search {i}") for i, v in enumerate(_SEARCH_VARIANTS, 1)),
    ]
    b.page(
        "/",
        "Demo documentation",
        "<h1>Demo documentation</h1>\n"
        f"<p>{_paragraph(rng, ('documentation', 'crawler', 'guide'), 4)}</p>\n<ul>\n"
        + "".join(f"<li>{_a(href, text)}</li>\n" for href, text in index_links)
        + "</ul>\n",
        description="Documentation of the demo crawler, served on loopback.",
        keywords="demo, documentation, crawler",
    )

    for slug, title, topics, words in _SECTIONS:
        # The crawling section links the third copy of the guide.
        extra = f"<p>{_a('/mirror/guide.html', 'Mirror of the guide')}</p>\n"
        b.section(slug, title, topics, words, extra if slug == "crawling" else "")

    disallowed = ("/private/", "/private/secret.html")
    facts = DemoFacts(
        nodes=frozenset(b.nodes - set(disallowed)),
        duplicates=duplicates,
        redirects=redirects,
        redirect_loop=("/loop/a", "/loop/b"),
        offsite_redirect="/go/blog",
        robots_redirect="/go/private",
        disallowed=disallowed,
        broken="/missing.html",
        not_html=("/files/manual.pdf", "/data.json", "/raw/notes"),
        no_content_type="/raw/notes",
        never_found=("/private/secret.html", "/hidden/from-raw.html"),
    )
    return {DEMO_HOST: site, BLOG_HOST: _blog(), EXTERNAL_HOST: _other()}, facts


def _blog() -> dict[str, Resource]:
    rng = _seeded("blog")
    posts = {f"/posts/{n}.html": f"Release notes, part {n}" for n in range(1, 4)}
    site = {
        path: Resource(
            _html(
                title,
                f"<h1>{escape(title)}</h1>\n<p>{_paragraph(rng, ('release', 'blog'), 4)}</p>\n"
                f"<p>{_a('/', 'Blog home')} {_a('http://demo.test/', 'Documentation')}</p>\n",
            )
        )
        for path, title in posts.items()
    }
    site["/"] = Resource(
        _html(
            "The demo blog",
            "<h1>The demo blog</h1>\n<ul>\n"
            + "".join(f"<li>{_a(path, title)}</li>\n" for path, title in posts.items())
            + f"</ul>\n<p>{_a('http://demo.test/', 'Documentation')}</p>\n",
        )
    )
    return site


def _other() -> dict[str, Resource]:
    return {
        "/": Resource(
            _html(
                "Another site",
                "<h1>Another site</h1>\n<p>The demo crawl must not come here.</p>\n"
                f"<p>{_a('http://demo.test/', 'Demo documentation')}</p>\n",
            )
        )
    }


def demo_sites() -> dict[str, dict[str, Resource]]:
    """The sample site of ``rccrawler demo``: :data:`DEMO_HOST`, its blog and one other host.

    About 200 documentation pages (levels 0 to 5) in English-looking text for the
    search index, with the traps of SPEC §5 and §6 that :func:`demo_facts` lists.
    A fresh dict each call, so a caller may add or change pages.
    """
    return _build_demo()[0]


def demo_facts() -> DemoFacts:
    """What a correct crawl of :func:`demo_sites` finds."""
    return _build_demo()[1]


# -- generated sites -----------------------------------------------------------------


def page_path(i: int) -> str:
    """Path of page ``i`` of a :func:`generated_site`: ``/`` for 0, else ``/p/<i>.html``."""
    return "/" if i == 0 else f"/p/{i}.html"


def page_level(i: int, fanout: int = 10) -> int:
    """Breadth-first level of page ``i`` (the links from parent to children form a tree)."""
    level = 0
    while i > 0:
        i = (i - 1) // fanout
        level += 1
    return level


def _page_index(path: str) -> int | None:
    if path == "/":
        return 0
    if not (path.startswith("/p/") and path.endswith(".html")):
        return None
    digits = path[3:-5]
    # One spelling per page: no signs, no leading zeros.
    if not digits.isdigit() or not digits.isascii() or digits.startswith("0"):
        return None
    return int(digits)


class GeneratedSite(Mapping[str, Resource]):
    """A site of ``pages`` pages built on lookup, so 100,000 pages take no memory.

    Page ``i`` links to its children ``i*fanout+1 … i*fanout+fanout`` (those that
    exist), to ``/``, to two pseudo-random pages, and to ``extra_unvisited_links``
    paths under ``/x/`` that answer 404. Every page body is distinct.

    Combine it with fixed pages (``/robots.txt``) through ``collections.ChainMap``.
    """

    def __init__(
        self,
        host: str,
        pages: int,
        *,
        fanout: int = 10,
        seed: int = 0,
        extra_unvisited_links: int = 0,
    ) -> None:
        if pages < 1 or fanout < 1 or extra_unvisited_links < 0:
            raise ValueError("need pages >= 1, fanout >= 1 and extra_unvisited_links >= 0")
        self.host = host
        self.pages = pages
        self.fanout = fanout
        self.seed = seed
        self.extra_unvisited_links = extra_unvisited_links

    def __getitem__(self, path: str) -> Resource:
        i = _page_index(path)
        if i is None or i >= self.pages:
            raise KeyError(path)
        return Resource(self.body(i))

    def __contains__(self, path: object) -> bool:
        if not isinstance(path, str):
            return False
        i = _page_index(path)
        return i is not None and i < self.pages

    def __len__(self) -> int:
        return self.pages

    def __iter__(self) -> Iterator[str]:
        return (page_path(i) for i in range(self.pages))

    def links(self, i: int) -> list[str]:
        """The link targets of page ``i``, in document order."""
        first = i * self.fanout + 1
        children = [page_path(j) for j in range(first, min(first + self.fanout, self.pages))]
        rng = _seeded("links", self.seed, i)
        others = [page_path(rng.randrange(self.pages)) for _ in range(2)]
        extra = [f"/x/{i}/{k}.html" for k in range(self.extra_unvisited_links)]
        return [*children, "/", *others, *extra]

    def body(self, i: int) -> bytes:
        rng = _seeded("page", self.seed, i)
        words = tuple(rng.sample(_NOUNS, 3))
        title = f"Page {i} of {self.host}: {' '.join(words)}"
        links = "".join(f"<li>{_a(href, href)}</li>\n" for href in self.links(i))
        return _html(
            title,
            f"<h1>{escape(title)}</h1>\n<p>{_paragraph(rng, words, 3)}</p>\n<ul>\n{links}</ul>\n",
            keywords=", ".join(words),
        )


def generated_site(
    host: str,
    pages: int,
    *,
    fanout: int = 10,
    seed: int = 0,
    extra_unvisited_links: int = 0,
) -> GeneratedSite:
    """A deterministic site of ``pages`` HTML pages reachable breadth-first from ``/``.

    Args:
        host: the host name the pages are written for (it appears in titles).
        pages: number of pages; page ``i`` lives at :func:`page_path`.
        fanout: children per page; page ``i`` is at level :func:`page_level`.
        seed: changes the text and the pseudo-random links, not the tree.
        extra_unvisited_links: 404 links added to every page, to grow the frontier.
    """
    return GeneratedSite(
        host, pages, fanout=fanout, seed=seed, extra_unvisited_links=extra_unvisited_links
    )
