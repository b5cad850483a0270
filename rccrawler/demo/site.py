"""The sample site of ``rccrawler demo``, and the English-looking text it is written in.

Everything here is a pure function of its arguments (random generators get fixed
seeds), so a crawl of the demo site can be asserted page by page (see tests/test_demo.py).
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from html import escape
from importlib import resources

import yaml

from rccrawler.demo.server import TEXT, Resource, redirect

__all__ = [
    "BLOG_HOST",
    "DEMO_HOST",
    "EXTERNAL_HOST",
    "DemoFacts",
    "demo_facts",
    "demo_sites",
]

DEMO_HOST = "demo.test"
BLOG_HOST = "blog.demo.test"
"""A subdomain: linked from the demo site, served, but a site of its own (SPEC §5.3)."""
EXTERNAL_HOST = "other.test"

# -- English-looking text from word lists -------------------------------------------


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


NOUNS = _words(
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
        return rng.choice(nouns) if nouns and rng.random() < 0.5 else rng.choice(NOUNS)

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


def paragraph(rng: random.Random, nouns: tuple[str, ...], sentences: int) -> str:
    return " ".join(_sentence(rng, nouns) for _ in range(sentences))


def seeded(*parts: object) -> random.Random:
    """A generator seeded from ``parts`` the same way in every process (no hash())."""
    return random.Random(zlib.crc32(repr(parts).encode()))


def html_page(
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


def anchor(href: str, text: str) -> str:
    return f'<a href="{escape(href)}">{escape(text)}</a>'


# -- the demo site -----------------------------------------------------------------

_SECTIONS: tuple[tuple[str, str, tuple[str, ...], tuple[str, ...]], ...] = tuple(
    (entry["slug"], entry["title"], tuple(entry["topics"]), tuple(entry["words"]))
    for entry in yaml.safe_load(
        resources.files(__package__).joinpath("sections.yaml").read_text(encoding="utf-8")
    )
)
"""(slug, title, topics, topic words) of each section, from ``sections.yaml``."""
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
        data = html_page(title, _nav() + body, **meta)
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
        rng = seeded("section", slug)
        links = "".join(f"<li>{anchor(f'{t}/', _titled(t))}</li>\n" for t in topics)
        self.page(
            f"/docs/{slug}/",
            f"{title} — Demo documentation",
            f"<h1>{escape(title)}</h1>\n<p>{paragraph(rng, words, 4)}</p>\n"
            f"<h2>Topics</h2>\n<ul>\n{links}</ul>\n{extra}",
            description=_sentence(rng, words),
            keywords=", ".join((slug, *words[:4])),
        )
        for topic in topics:
            self.topic(slug, title, topic, words)

    def topic(self, section: str, section_title: str, topic: str, words: tuple[str, ...]) -> None:
        base = f"/docs/{section}/{topic}/"
        rng = seeded("topic", section, topic)
        topic_words = (*words, *(_singular(w) for w in topic.split("-")))
        articles = [
            (f"{verb.lower()}-{topic}", f"{verb} {_titled(topic).lower()}")
            for verb in _ARTICLE_VERBS[:_ARTICLES_PER_TOPIC]
        ]
        # Relative links, so that resolving against a directory URL is exercised.
        links = "".join(f"<li>{anchor(f'{slug}.html', t)}</li>\n" for slug, t in articles)
        self.page(
            base,
            f"{_titled(topic)} — {section_title}",
            f"<h1>{escape(_titled(topic))}</h1>\n<p>{paragraph(rng, topic_words, 3)}</p>\n"
            f"<h2>Articles</h2>\n<ol>\n{links}</ol>\n"
            f"<p>{anchor('../', f'Back to {section_title}')}</p>\n",
            description=_sentence(rng, topic_words),
            keywords=", ".join((topic, section, *words[:3])),
        )
        for n, (slug, title) in enumerate(articles):
            prev_link = anchor(f"{articles[n - 1][0]}.html", "Previous") if n else ""
            next_link = (
                anchor(f"{articles[n + 1][0]}.html", "Next") if n + 1 < len(articles) else ""
            )
            notes = anchor(f"{slug}/notes.html", "Notes") if n == 0 else ""
            self.article(
                base + f"{slug}.html",
                title,
                topic_words,
                f"<p>{prev_link} {anchor('./', _titled(topic))} {next_link} {notes}</p>\n",
            )
            if n == 0:
                self.notes(base + f"{slug}/notes.html", slug, title, topic_words)

    def article(self, path: str, title: str, words: tuple[str, ...], footer: str) -> None:
        rng = seeded("article", path)
        parts = [f"<h1>{escape(title)}</h1>\n<p>{paragraph(rng, words, 4)}</p>\n"]
        for heading in rng.sample(words, 2):
            parts.append(
                f"<h2>{escape(heading.capitalize())} and the {rng.choice(NOUNS)}</h2>\n"
                f"<p>{paragraph(rng, words, rng.randrange(3, 6))}</p>\n"
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
        rng = seeded("notes", path)
        appendix = ""
        if path.startswith("/docs/crawling/"):
            appendix = anchor("notes/appendix.html", "Appendix")  # one page at level 5
            self.page(
                path.removesuffix(".html") + "/appendix.html",
                f"Appendix to the notes on {title.lower()}",
                f"<h1>Appendix</h1>\n<p>{paragraph(rng, words, 3)}</p>\n"
                f"<p>{anchor('../notes.html', 'Back to the notes')}</p>\n",
            )
        self.page(
            path,
            f"Notes on {title.lower()}",
            f"<h1>Notes</h1>\n<p>{paragraph(rng, words, 3)}</p>\n"
            f"<p>{anchor(f'../{slug}.html', title)} {appendix}</p>\n",
            description=_sentence(rng, words),
        )


def _titled(slug: str) -> str:
    return slug.replace("-", " ").capitalize()


def _nav() -> str:
    links = " | ".join(anchor(f"/docs/{slug}/", title) for slug, title, _, _ in _SECTIONS)
    return f"<nav>{anchor('/', 'Home')} | {links}</nav>\n"


def _build_demo() -> tuple[dict[str, dict[str, Resource]], DemoFacts]:
    b = _DemoBuilder()
    site = b.site
    rng = seeded("demo-index")

    # robots.txt, and the private area it disallows (linked from the index).
    site["/robots.txt"] = Resource(b"User-agent: *\nDisallow: /private/\n", headers=TEXT)
    b.page(
        "/private/",
        "Private area",
        f"<h1>Private</h1>\n<p>{paragraph(rng, ('secret', 'password'), 2)}</p>\n"
        f"{anchor('secret.html', 'The secret page')}\n",
    )
    b.page("/private/secret.html", "Secret", "<h1>Secret</h1>\n<p>Nobody polite reads this.</p>\n")

    # Three byte-identical copies of the guide; absolute-path links keep them identical.
    guide = html_page(
        "The demo guide",
        '<h1 id="top">The demo guide</h1>\n'
        f"<p>{paragraph(seeded('guide'), ('guide', 'tutorial', 'crawl'), 6)}</p>\n"
        f"<p>{anchor('/', 'Home')} {anchor('/docs/getting-started/', 'Getting started')}</p>\n",
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
        f"<h1>Search results</h1>\n<p>{paragraph(rng, ('result', 'query'), 2)}</p>\n",
    )
    for variant in _SEARCH_VARIANTS:
        site[variant] = Resource(search)

    b.page(
        "/about.html",
        "About the demo documentation",
        f"<h1>About</h1>\n<p>{paragraph(rng, ('demo', 'documentation', 'team'), 4)}</p>\n"
        f"<p>A printable {anchor('/print/guide.html', 'guide')}.</p>\n",
        description="Who writes the demo documentation.",
    )
    b.page(
        "/changelog.html",
        "Changelog",
        f"<h1>Changelog</h1>\n<p>{paragraph(rng, ('release', 'version', 'change'), 4)}</p>\n",
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
        html_page("Hidden", "<p>Only a response without Content-Type links here.</p>\n")
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
        f"<p>{paragraph(rng, ('documentation', 'crawler', 'guide'), 4)}</p>\n<ul>\n"
        + "".join(f"<li>{anchor(href, text)}</li>\n" for href, text in index_links)
        + "</ul>\n",
        description="Documentation of the demo crawler, served on loopback.",
        keywords="demo, documentation, crawler",
    )

    for slug, title, topics, words in _SECTIONS:
        # The crawling section links the third copy of the guide.
        extra = f"<p>{anchor('/mirror/guide.html', 'Mirror of the guide')}</p>\n"
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
    rng = seeded("blog")
    posts = {f"/posts/{n}.html": f"Release notes, part {n}" for n in range(1, 4)}
    site = {
        path: Resource(
            html_page(
                title,
                f"<h1>{escape(title)}</h1>\n<p>{paragraph(rng, ('release', 'blog'), 4)}</p>\n"
                f"<p>{anchor('/', 'Blog home')} "
                f"{anchor('http://demo.test/', 'Documentation')}</p>\n",
            )
        )
        for path, title in posts.items()
    }
    site["/"] = Resource(
        html_page(
            "The demo blog",
            "<h1>The demo blog</h1>\n<ul>\n"
            + "".join(f"<li>{anchor(path, title)}</li>\n" for path, title in posts.items())
            + f"</ul>\n<p>{anchor('http://demo.test/', 'Documentation')}</p>\n",
        )
    )
    return site


def _other() -> dict[str, Resource]:
    return {
        "/": Resource(
            html_page(
                "Another site",
                "<h1>Another site</h1>\n<p>The demo crawl must not come here.</p>\n"
                f"<p>{anchor('http://demo.test/', 'Demo documentation')}</p>\n",
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
